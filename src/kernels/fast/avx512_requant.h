/*!
 * \file avx512_requant.h
 * \brief The AVX-512 int8 requantization shared by the AVX-512 tiles (x86-64 only; include
 *        from files compiled for every target: the functions carry their own target attribute).
 */
#ifndef TVM_NPU_KERNELS_FAST_AVX512_REQUANT_H_
#define TVM_NPU_KERNELS_FAST_AVX512_REQUANT_H_

#include "kernels/fast/x86_intrinsics.h"
#if TVM_NPU_X86_64

#include <cstddef>

namespace tvm_npu {
namespace fast {

// docs/npu.md section 2, 16 channels at once: fp32(acc) (the MXCSR rounding, as the scalar
// conversion), one fp32 multiply (no FMA: nothing to fuse with), round half to even by
// roundscale's explicit mode, then the clamp. The rounded value is an integer and may be huge
// or inf; clamping it to +-1024 first keeps z_y + r within int32 and changes no result, because
// z_y, lo and hi are int8.
NPU_TARGET_AVX512_VNNI inline __m512i Requant16(__m512i acc, __m512 scale, __m512i zp, __m512i lo,
                                                __m512i hi) {
  __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
  f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(-1024.0f)), _mm512_set1_ps(1024.0f));
  const __m512i q = _mm512_add_epi32(_mm512_cvttps_epi32(f), zp);
  return _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
}

NPU_TARGET_AVX512_VNNI inline __mmask16 TailMask(size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_X86_64
#endif  // TVM_NPU_KERNELS_FAST_AVX512_REQUANT_H_
