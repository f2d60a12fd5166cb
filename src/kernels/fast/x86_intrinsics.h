/*!
 * \file x86_intrinsics.h
 * \brief <immintrin.h> for the vector kernels (x86-64 builds only) and the names of the instruction
 *        sets they are compiled for. Include from files compiled for every target: each vector
 *        function carries its own target attribute and runs only where cpu_level.cc found the set.
 */
#ifndef TVM_NPU_KERNELS_FAST_X86_INTRINSICS_H_
#define TVM_NPU_KERNELS_FAST_X86_INTRINSICS_H_

#include "kernels/fast/cpu_level.h"

#if TVM_NPU_X86_64
// GCC 12's avx512fintrin.h builds masked loads from an undefined vector it then reports as
// "may be used uninitialized": a false positive in the header, not in the kernels.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define NPU_TARGET_AVX2 __attribute__((target("avx2")))
#define NPU_TARGET_AVX2_F16C __attribute__((target("avx2,f16c")))
#define NPU_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define NPU_TARGET_AVX512_F16C __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define NPU_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define NPU_TARGET_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

#include <cstdint>

// The lanes of the first min(left, 16) elements of a 16-lane vector. Integer code without a
// target attribute, so any level's function can inline it.
inline __mmask16 Lanes16(uint64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// Loops that several levels share (gemm_int8_tile.h, conv2d_fp16_tile.h) are templates over a
// struct of the level's instructions. GCC takes a function's target from its definition, never
// from a template argument, and a function without a level's target cannot inline that level's
// intrinsics; so a level's file defines NPU_TILE_TARGET as its NPU_TARGET_* before it includes
// such a header, whose templates are then that file's own (an anonymous namespace), compiled for
// that level.
#endif

#endif  // TVM_NPU_KERNELS_FAST_X86_INTRINSICS_H_
