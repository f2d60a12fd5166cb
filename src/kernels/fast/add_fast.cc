/*!
 * \file add_fast.cc
 * \brief Fast ADD (add_fast.h).
 */
#include "kernels/fast/add_fast.h"

#include "kernels/fast/x86_intrinsics.h"
#include "kernels/ref/add_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

#if TVM_NPU_X86_64

// Sign-extended int8 x minus its zero point, times a multiplier < 2^31: int64, exact.
NPU_TARGET_AVX512 inline __m512i Scaled(const int8_t* p, __mmask8 mask, __m512i zp, __m512i mult) {
  const __m128i bytes = _mm_maskz_loadu_epi8(mask, p);
  const __m512i x = _mm512_sub_epi64(_mm512_cvtepi8_epi64(bytes), zp);
  return _mm512_mul_epi32(x, mult);  // low 32 bits of each lane, signed: x fits, M < 2^31
}

NPU_TARGET_AVX512 void AddInt8Avx512(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b,
                              uint8_t* out) {
  const __m512i za = _mm512_set1_epi64(static_cast<int32_t>(op.a_zp));
  const __m512i zb = _mm512_set1_epi64(static_cast<int32_t>(op.b_zp));
  const __m512i ma = _mm512_set1_epi64(op.a_mult), mb = _mm512_set1_epi64(op.b_mult);
  const __m512i zy = _mm512_set1_epi64(static_cast<int32_t>(op.out_zp));
  const __m512i lo = _mm512_set1_epi64(static_cast<int32_t>(op.clip_lo));
  const __m512i hi = _mm512_set1_epi64(static_cast<int32_t>(op.clip_hi));
  const __m128i n = _mm_cvtsi32_si128(static_cast<int>(op.shift));
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i low_mask = _mm512_set1_epi64(static_cast<int64_t>((uint64_t{1} << op.shift) - 1));
  const __m512i half = _mm512_set1_epi64(static_cast<int64_t>(uint64_t{1} << (op.shift - 1)));
  for (uint64_t r = 0; r < op.rows; ++r) {
    const int8_t* ar = reinterpret_cast<const int8_t*>(a + r * op.a_stride);
    const int8_t* br = reinterpret_cast<const int8_t*>(b + r * op.b_stride);
    int8_t* outr = reinterpret_cast<int8_t*>(out + r * op.out_stride);
    for (uint64_t e = 0; e < op.row_elems; e += 8) {
      const uint64_t left = op.row_elems - e;
      const __mmask8 mask = left >= 8 ? 0xFF : static_cast<__mmask8>((1u << left) - 1);
      const __m512i t = _mm512_add_epi64(Scaled(ar + e, mask, za, ma), Scaled(br + e, mask, zb, mb));
      // rshift_rne (ref::RoundShift): q = t >> n, r = the low n bits, q += 1 past half or at
      // half with q odd.
      __m512i q = _mm512_sra_epi64(t, n);
      const __m512i rem = _mm512_and_si512(t, low_mask);
      const __mmask8 up = _mm512_cmpgt_epi64_mask(rem, half) |
                          (_mm512_cmpeq_epi64_mask(rem, half) & _mm512_test_epi64_mask(q, one));
      q = _mm512_mask_add_epi64(q, up, q, one);
      const __m512i y = _mm512_min_epi64(_mm512_max_epi64(_mm512_add_epi64(q, zy), lo), hi);
      _mm512_mask_cvtepi64_storeu_epi8(outr + e, mask, y);
    }
  }
}

// fp16: a + b in fp32 (halves convert exactly; vcvtph2ps quiets a signalling NaN, which the add
// would do anyway), Activate's comparisons, one rounding to fp16 by vcvtps2ph — except lanes
// holding NaN, stored by the scalar conversion as in the reference.
NPU_TARGET_AVX512_F16C void AddFp16Avx512(const stream::AddOperands& op, const uint8_t* a,
                                 const uint8_t* b, uint8_t* out) {
  const __m512 lo = _mm512_set1_ps(ref::BitsToFloat(op.clip_lo));
  const __m512 hi = _mm512_set1_ps(ref::BitsToFloat(op.clip_hi));
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ar = a + r * op.a_stride;
    const uint8_t* br = b + r * op.b_stride;
    uint8_t* outr = out + r * op.out_stride;
    for (uint64_t e = 0; e < op.row_elems; e += 16) {
      const uint64_t left = op.row_elems - e;
      const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
      const __m512 av = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, ar + e * 2));
      const __m512 bv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, br + e * 2));
      __m512 v = _mm512_add_ps(av, bv);
      if (op.act == stream::kActRelu) {
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v,
                                 _mm512_setzero_ps());
      } else if (op.act == stream::kActClip) {
        const __mmask16 below = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
        v = _mm512_mask_blend_ps(below, v, lo);
      }
      if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & mask) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, v);
        for (uint64_t i = 0; i < left && i < 16; ++i) ref::StoreHalf(outr + (e + i) * 2, lanes[i]);
      } else {
        _mm256_mask_storeu_epi16(outr + e * 2, mask, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      }
    }
  }
}
#endif

}  // namespace

void Add(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
         Level level) {
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni && op.dtype == stream::kInt8) return AddInt8Avx512(op, a, b, out);
  // The fp16 conversions ignore FTZ / DAZ, the reference's fp32 add does not: reference then.
  if (level == kLevelAvx512Vnni && op.dtype == stream::kFP16 && (_mm_getcsr() & 0x8040u) == 0) {
    return AddFp16Avx512(op, a, b, out);
  }
#endif
  (void)level;
  AddRef(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
