/*!
 * \file fp16_avx512.h
 * \brief 16 fp16 lanes in fp32 at the AVX-512 level (F16C conversions): the loads, the fused
 *        activation and the store shared by the fp16 vector-unit kernels (x86-64 only; include from
 *        files compiled for every target: the functions carry their own target attribute).
 */
#ifndef TVM_NPU_KERNELS_FAST_FP16_AVX512_H_
#define TVM_NPU_KERNELS_FAST_FP16_AVX512_H_

#include "kernels/fast/x86_intrinsics.h"
#if TVM_NPU_X86_64

#include <tvm_npu/stream_format.h>

#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {

// Halves convert to fp32 exactly (vcvtph2ps quiets a signalling NaN, which any arithmetic on it
// would do anyway).
NPU_TARGET_AVX512_F16C inline __m512 LoadHalves16(const uint8_t* p, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
}

/*! \brief ref::Activate on 16 lanes: the same ordered comparisons, so a NaN passes through. */
struct Activation16 {
  uint32_t act;
  __m512 lo, hi;
};

NPU_TARGET_AVX512_F16C inline Activation16 MakeActivation16(uint32_t act, uint32_t lo,
                                                            uint32_t hi) {
  return {act, _mm512_set1_ps(ref::BitsToFloat(lo)), _mm512_set1_ps(ref::BitsToFloat(hi))};
}

NPU_TARGET_AVX512_F16C inline __m512 Activate16(__m512 v, const Activation16& a) {
  if (a.act == stream::kActRelu) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v,
                                _mm512_setzero_ps());
  }
  if (a.act == stream::kActClip) {
    const __mmask16 below = _mm512_cmp_ps_mask(v, a.lo, _CMP_LT_OQ);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, a.hi, _CMP_GT_OQ), v, a.hi);
    return _mm512_mask_blend_ps(below, v, a.lo);
  }
  return v;
}

// One rounding to fp16 by vcvtps2ph (round to nearest even by its immediate, as FloatToHalfBits),
// except lanes holding NaN: stored by the reference's scalar conversion, which keeps the payload
// bits vcvtps2ph would not.
NPU_TARGET_AVX512_F16C inline void StoreHalves16(uint8_t* p, __m512 v, __mmask16 mask,
                                                 uint64_t left) {
  if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & mask) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    for (uint64_t i = 0; i < left && i < 16; ++i) ref::StoreHalf(p + i * 2, lanes[i]);
  } else {
    _mm256_mask_storeu_epi16(p, mask, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_X86_64
#endif  // TVM_NPU_KERNELS_FAST_FP16_AVX512_H_
