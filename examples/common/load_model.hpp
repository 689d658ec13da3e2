#pragma once

// The examples' one way to load the encoder (examples/models/bert.hpp): a precision name, its SmoothQuant
// calibration sentences where it needs them, then bert::encoder::load. One set of error texts, each
// naming the flag or config field it came from.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../models/bert.hpp"
#include "lines.hpp"

namespace examples {

/// @brief Where an encoder comes from, and how errors name each setting (a flag or a config path).
struct encoder_source {
  std::string dir;
  std::string precision = "fp32";
  std::string calibration;  ///< a file of sentences, one a line (SmoothQuant's statistics)
  std::size_t calibration_sentences = SIZE_MAX;  ///< at most this many of its lines
  std::size_t threads = 1;
  std::string precision_name = "--precision";
  std::string calibration_name = "--calibration";
};

/// @brief The encoder's precision named @p name; throws std::invalid_argument naming @p what (the flag or
/// config field) and the accepted names.
inline bert::precision encoder_precision(const std::string& name, const std::string& what) {
  try {
    return bert::parse_precision(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(what + ": " + e.what());
  }
}

/// @brief The load options of @p s: its precision, and the calibration sentences it needs. Throws
/// std::invalid_argument for a precision the encoder lacks or a SmoothQuant one without a calibration
/// file, std::runtime_error for a calibration file that cannot be read.
inline bert::load_options encoder_options(const encoder_source& s) {
  bert::load_options o{.weights = encoder_precision(s.precision, s.precision_name), .threads = s.threads};
  if (bert::needs_calibration(o.weights)) {
    if (s.calibration.empty())
      throw std::invalid_argument(s.precision_name + " " + s.precision + " (SmoothQuant) needs " +
                                  s.calibration_name + ", a file of sentences one a line");
    o.calibration = read_lines(s.calibration, s.calibration_name, s.calibration_sentences);
    if (o.calibration.empty())
      throw std::invalid_argument(s.calibration_name + " " + s.calibration + ": holds no sentence");
  }
  return o;
}

/// @brief encoder_options(s), then the encoder from s.dir.
inline bert::encoder load_encoder(const encoder_source& s) {
  return bert::encoder::load(s.dir, encoder_options(s));
}

}  // namespace examples
