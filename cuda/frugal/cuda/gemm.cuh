#pragma once

// frugal's CUDA GEMMs: W8A8 int8 with a fused dequant epilogue, fp16/bf16, weight-only W8A16/W4A16 for
// decode, per-token quantize_rows, the cuBLASLt baselines and the dispatcher between them.
#include "frugal/cuda/cublaslt.cuh"
#include "frugal/cuda/device.cuh"
#include "frugal/cuda/dispatch.cuh"
#include "frugal/cuda/errors.cuh"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/gemm/device/gemm.cuh"
#include "frugal/cuda/memory.cuh"
