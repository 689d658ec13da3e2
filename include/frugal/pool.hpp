#pragma once

/// @file
/// @brief frugal's model pool: models named in config, loaded on demand by a user loader (one load however
/// many callers arrive), leased while in use, evicted least recently used first to fit a memory budget, and
/// unloaded when idle; a cascade that answers with a small model first and escalates to larger ones; and
/// their stats as Prometheus text.

#include "frugal/pool/cascade.hpp"
#include "frugal/pool/errors.hpp"
#include "frugal/pool/export.hpp"
#include "frugal/pool/model_pool.hpp"
#include "frugal/pool/options.hpp"
