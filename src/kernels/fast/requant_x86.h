/*!
 * \file requant_x86.h
 * \brief The int8 requantization of docs/npu.md section 2 for 8 lanes (AVX2) and 16 lanes
 *        (AVX-512), written once (x86-64 only; include from files compiled for every target:
 *        the functions carry their own target attribute).
 */
#ifndef TVM_NPU_KERNELS_FAST_REQUANT_X86_H_
#define TVM_NPU_KERNELS_FAST_REQUANT_X86_H_

#include "kernels/fast/x86_intrinsics.h"
#if TVM_NPU_X86_64

namespace tvm_npu {
namespace fast {

// fp32(acc) (the MXCSR rounding, as the scalar conversion), one fp32 multiply (no FMA: nothing to
// fuse with), round half to even by the explicit mode of ROUND, then the clamp. The rounded value
// is an integer and may be huge or inf; clamping it to +-1024 first keeps z_y + r within int32 and
// changes no result, because z_y, lo and hi are int8. The widths differ only in the intrinsics'
// prefix (P) and the name of the rounding instruction, so one body is pasted for both: a template
// over the vector type could not carry each width's target attribute (see x86_intrinsics.h).
#define NPU_DEFINE_REQUANT(TARGET, NAME, VI, VF, P, ROUND)                      \
  TARGET inline VI NAME(VI acc, VF scale, VI zp, VI lo, VI hi) {                \
    VF f = P##_mul_ps(P##_cvtepi32_ps(acc), scale);                             \
    f = ROUND(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                \
    f = P##_min_ps(P##_max_ps(f, P##_set1_ps(-1024.0f)), P##_set1_ps(1024.0f)); \
    const VI q = P##_add_epi32(P##_cvttps_epi32(f), zp);                        \
    return P##_min_epi32(P##_max_epi32(q, lo), hi);                             \
  }

NPU_DEFINE_REQUANT(NPU_TARGET_AVX2, Requant8, __m256i, __m256, _mm256, _mm256_round_ps)
NPU_DEFINE_REQUANT(NPU_TARGET_AVX512_VNNI, Requant16, __m512i, __m512, _mm512, _mm512_roundscale_ps)

#undef NPU_DEFINE_REQUANT

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_X86_64
#endif  // TVM_NPU_KERNELS_FAST_REQUANT_X86_H_
