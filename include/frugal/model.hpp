#pragma once

/// @file
/// @brief frugal's model files and tokenizers: the safetensors and GGUF readers (frugal::safetensors needs
/// nlohmann-json), BERT's WordPiece and the byte-level BPE tokenizer (both need utf8proc), and chat
/// templates. Target frugal::model links them all.

#include "frugal/model/bpe.hpp"
#include "frugal/model/chat_template.hpp"
#include "frugal/model/gguf.hpp"
#include "frugal/model/safetensors.hpp"
#include "frugal/model/wordpiece.hpp"
