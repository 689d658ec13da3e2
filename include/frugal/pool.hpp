#pragma once

/// @file
/// @brief frugal's model pool: models named in config, loaded on demand by a user loader (one load however
/// many callers arrive), leased while in use, evicted least recently used first to fit a memory budget, and
/// unloaded when idle.

#include "frugal/pool/errors.hpp"
#include "frugal/pool/model_pool.hpp"
#include "frugal/pool/options.hpp"
