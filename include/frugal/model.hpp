#pragma once

/// @file
/// @brief frugal's model files and tokenizers: a safetensors reader (frugal::safetensors, needs
/// nlohmann-json) and BERT's WordPiece tokenizer (frugal::wordpiece, needs utf8proc). Target frugal::model
/// links both.

#include "frugal/model/safetensors.hpp"
#include "frugal/model/wordpiece.hpp"
