/*!
 * \file eltwise_fast.cc
 * \brief Fast ELTWISE (eltwise_fast.h): the level dispatch and the fp16 AVX-512 kernel.
 */
#include "kernels/fast/eltwise_fast.h"

#include "kernels/fast/eltwise_rows.h"
#include "kernels/fast/fp16_avx512.h"
#include "kernels/fast/fp_env.h"
#include "kernels/ref/eltwise_ref.h"

namespace tvm_npu {
namespace fast {
namespace {

#if TVM_NPU_X86_64

// ref::EltwiseFp32 on 16 lanes. max / min as the contract's `a > b ? a : b`, `a < b ? a : b`:
// an ordered-quiet compare is false when either lane is NaN, so the blend then takes b.
template <uint32_t kKind>
NPU_TARGET_AVX512_F16C inline __m512 Op16(__m512 a, __m512 b) {
  switch (kKind) {
    case stream::kEltAdd: return _mm512_add_ps(a, b);
    case stream::kEltSub: return _mm512_sub_ps(a, b);
    case stream::kEltMul: return _mm512_mul_ps(a, b);
    case stream::kEltMax: return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), b, a);
    default: return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), b, a);
  }
}

// n elements of a and out. b is `b` advancing with them, or, when `fixed` is given, the same
// 16 lanes for every block of 16 (a scalar, or a channel vector whose length divides 16).
template <uint32_t kKind>
NPU_TARGET_AVX512_F16C void Span16(const uint8_t* a, const uint8_t* b, const __m512* fixed,
                                   uint8_t* out, uint64_t n, const Activation16& act) {
  for (uint64_t e = 0; e < n; e += 16) {
    const __mmask16 mask = Lanes16(n - e);
    const __m512 bv = fixed != nullptr ? *fixed : LoadHalves16(b + e * 2, mask);
    const __m512 v = Activate16(Op16<kKind>(LoadHalves16(a + e * 2, mask), bv), act);
    StoreHalves16(out + e * 2, v, mask, n - e);
  }
}

template <uint32_t kKind>
NPU_TARGET_AVX512_F16C void EltwiseFp16Avx512(const stream::EltwiseOperands& op, const uint8_t* a,
                                              const uint8_t* b, uint8_t* out) {
  const Activation16 act = MakeActivation16(op.act, op.clip_lo, op.clip_hi);
  alignas(64) float lanes[16];
  const bool repeats = RepeatingB(op, lanes, [b](uint32_t i) { return ref::LoadHalf(b + i * 2); });
  const __m512 fixed = repeats ? _mm512_load_ps(lanes) : _mm512_setzero_ps();
  ForEachSpan(op, a, b, out, repeats, 2, 2,
              [&](const uint8_t* as, const uint8_t* bs, uint8_t* outs, uint64_t n) {
                Span16<kKind>(as, bs, repeats ? &fixed : nullptr, outs, n, act);
              });
}

#endif  // TVM_NPU_X86_64

}  // namespace

void Eltwise(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
             Level level) {
  if (level == kLevelRef) return EltwiseRef(op, a, b, out);
  if (op.dtype != stream::kFP16) return EltwiseInt(op, a, b, out, level);
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni && NoFlushToZero()) {
    switch (op.kind) {
      case stream::kEltAdd: return EltwiseFp16Avx512<stream::kEltAdd>(op, a, b, out);
      case stream::kEltSub: return EltwiseFp16Avx512<stream::kEltSub>(op, a, b, out);
      case stream::kEltMul: return EltwiseFp16Avx512<stream::kEltMul>(op, a, b, out);
      case stream::kEltMax: return EltwiseFp16Avx512<stream::kEltMax>(op, a, b, out);
      default: return EltwiseFp16Avx512<stream::kEltMin>(op, a, b, out);
    }
  }
#endif
  EltwiseRef(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
