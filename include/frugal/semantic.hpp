#pragma once

/// @file
/// @brief frugal's semantic cache: results for similar inputs, keyed by embeddings, with an exact key
/// tried first, and its stats as Prometheus text. Needs hnswlib's headers (target frugal::semantic).

#include "frugal/semantic/export.hpp"
#include "frugal/semantic/semantic_cache.hpp"
