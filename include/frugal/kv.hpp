#pragma once

/// @file
/// @brief frugal's paged KV cache for decoders: K and V in fixed-size blocks from a byte budget, block
/// tables per sequence, reference counts, copy-on-write, prefix sharing of full blocks keyed by XXH3-128
/// hashes under a salt (model, adapter, tenant) with LRU eviction of unreferenced ones; a causal CPU
/// attention over the block tables (GQA, decode and prefill chunks) whose rows do not depend on the
/// batch; stats as Prometheus text. Model-agnostic; needs xxHash, as frugal::cache does.

#include "frugal/kv/attention.hpp"
#include "frugal/kv/errors.hpp"
#include "frugal/kv/export.hpp"
#include "frugal/kv/kv_cache.hpp"
#include "frugal/kv/salt.hpp"
