#pragma once

// Eigen, with <immintrin.h> read first under cpu.hpp's pragmas. Built with -march=native on an AVX-512
// machine, GCC 12 reports false "used uninitialized" warnings inside its own AVX-512 intrinsics wherever
// Eigen inlines them (GCC bug 105593); as the header is then already read, the warnings stay silenced, and a
// -Werror build of a TU that includes frugal before Eigen compiles. (A TU that includes Eigen first is on its
// own.)
#include "frugal/quant/detail/cpu.hpp"

#include <Eigen/Core>
