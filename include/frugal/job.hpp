#pragma once

// frugal::job: resumable batch jobs over JSON lines, for spot instances. Checkpoints make the output exactly
// once and in input order across crashes; SIGTERM checkpoints and exits 75 (resumable). A job can be cut
// into shards, one process each (a Kubernetes Indexed Job's pods), and merged after. Target frugal::job
// (needs nlohmann-json).

#include "frugal/job/checkpoint.hpp"
#include "frugal/job/errors.hpp"
#include "frugal/job/failover.hpp"
#include "frugal/job/merge.hpp"
#include "frugal/job/runner.hpp"
#include "frugal/job/shard.hpp"
