#pragma once

// Text files of one item a line (inputs, calibration sentences, tokens): read whole, and an unreadable
// file is an error that names it.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

/// @brief The lines of @p path without their '\n', at most @p max of them; "-" reads stdin. Throws
/// std::runtime_error naming @p what (the flag or config field that gave the path) and the path when
/// it cannot be opened or read.
inline std::vector<std::string> read_lines(const std::string& path, const std::string& what,
                                           std::size_t max = SIZE_MAX) {
  const std::string where = (what.empty() ? "" : what + " ") + path;
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw std::runtime_error(where + ": cannot be opened: " + std::strerror(errno));
    in = &file;
  }
  std::vector<std::string> lines;
  for (std::string l; lines.size() < max && std::getline(*in, l);) lines.push_back(std::move(l));
  if (in->bad()) throw std::runtime_error(where + ": reading failed: " + std::strerror(errno));
  return lines;
}

}  // namespace examples
