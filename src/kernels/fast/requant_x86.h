/*!
 * \file requant_x86.h
 * \brief The int8 requantization of docs/npu.md section 2 for 8 lanes (AVX2) and 16 lanes
 *        (AVX-512), written once (x86-64 only; include from files compiled for every target:
 *        the functions carry their own target attribute).
 */
#ifndef TVM_NPU_KERNELS_FAST_REQUANT_X86_H_
#define TVM_NPU_KERNELS_FAST_REQUANT_X86_H_

#include "kernels/fast/x86_intrinsics.h"
#include "kernels/ref/sat_count.h"
#if TVM_NPU_X86_64

namespace tvm_npu {
namespace fast {

// The lanes whose z_y + r (before the clamp) saturates: beyond int8's range on a side whose clamp
// bound is the dtype's own and not the zero point (ref::CountIfSaturated), as a bit mask.
NPU_TARGET_AVX2 inline unsigned SatLanes8(__m256i q, __m256i zp, __m256i lo, __m256i hi) {
  const __m256i dmax = _mm256_set1_epi32(127), dmin = _mm256_set1_epi32(-128);
  const __m256i over = _mm256_andnot_si256(
      _mm256_cmpeq_epi32(zp, dmax),
      _mm256_and_si256(_mm256_cmpgt_epi32(q, dmax), _mm256_cmpeq_epi32(hi, dmax)));
  const __m256i under = _mm256_andnot_si256(
      _mm256_cmpeq_epi32(zp, dmin),
      _mm256_and_si256(_mm256_cmpgt_epi32(dmin, q), _mm256_cmpeq_epi32(lo, dmin)));
  return static_cast<unsigned>(
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(over, under))));
}
NPU_TARGET_AVX512_VNNI inline unsigned SatLanes16(__m512i q, __m512i zp, __m512i lo, __m512i hi) {
  const __m512i dmax = _mm512_set1_epi32(127), dmin = _mm512_set1_epi32(-128);
  return (_mm512_cmpgt_epi32_mask(q, dmax) & _mm512_cmpeq_epi32_mask(hi, dmax) &
          _mm512_cmpneq_epi32_mask(zp, dmax)) |
         (_mm512_cmplt_epi32_mask(q, dmin) & _mm512_cmpeq_epi32_mask(lo, dmin) &
          _mm512_cmpneq_epi32_mask(zp, dmin));
}

// fp32(acc) (the MXCSR rounding, as the scalar conversion), one fp32 multiply (no FMA: nothing to
// fuse with), round half to even by the explicit mode of ROUND, then the clamp. The rounded value
// is an integer and may be huge or inf; clamping it to +-1024 first keeps z_y + r within int32 and
// changes no result (nor whether it saturates), because z_y, lo and hi are int8. The lanes in
// `valid` (a bit per lane: those that are results) that saturate are counted. The widths differ
// only in the intrinsics' prefix (P) and the name of the rounding instruction, so one body is
// pasted for both: a template over the vector type could not carry each width's target attribute
// (see x86_intrinsics.h).
#define NPU_DEFINE_REQUANT(TARGET, NAME, VI, VF, P, ROUND, SAT)                  \
  TARGET inline VI NAME(VI acc, VF scale, VI zp, VI lo, VI hi, unsigned valid) { \
    VF f = P##_mul_ps(P##_cvtepi32_ps(acc), scale);                              \
    f = ROUND(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                 \
    f = P##_min_ps(P##_max_ps(f, P##_set1_ps(-1024.0f)), P##_set1_ps(1024.0f));  \
    const VI q = P##_add_epi32(P##_cvttps_epi32(f), zp);                         \
    const unsigned sat = SAT(q, zp, lo, hi) & valid;                             \
    if (sat != 0) ref::CountSaturated(__builtin_popcount(sat));                  \
    return P##_min_epi32(P##_max_epi32(q, lo), hi);                              \
  }

NPU_DEFINE_REQUANT(NPU_TARGET_AVX2, Requant8, __m256i, __m256, _mm256, _mm256_round_ps, SatLanes8)
NPU_DEFINE_REQUANT(NPU_TARGET_AVX512_VNNI, Requant16, __m512i, __m512, _mm512, _mm512_roundscale_ps,
                   SatLanes16)

#undef NPU_DEFINE_REQUANT

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_X86_64
#endif  // TVM_NPU_KERNELS_FAST_REQUANT_X86_H_
