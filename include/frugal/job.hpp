#pragma once

// frugal::job: resumable batch jobs over JSON lines, for spot instances. Checkpoints make the output exactly
// once and in input order across crashes; SIGTERM checkpoints and exits 75 (resumable). Target frugal::job
// (needs nlohmann-json).

#include "frugal/job/checkpoint.hpp"
#include "frugal/job/errors.hpp"
#include "frugal/job/failover.hpp"
#include "frugal/job/runner.hpp"
