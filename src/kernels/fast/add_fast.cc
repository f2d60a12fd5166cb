/*!
 * \file add_fast.cc
 * \brief Fast ADD (add_fast.h).
 */
#include "kernels/fast/add_fast.h"

#include "kernels/fast/eltwise_fast.h"
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
#endif

// An fp16 ADD is an ELTWISE add whose b has a's shape (docs/npu.md sections 2 and 6): the same
// arithmetic, so one fp16 vector kernel (eltwise_fast.cc) serves both.
stream::EltwiseOperands AsEltwise(const stream::AddOperands& op) {
  stream::EltwiseOperands e{};
  e.dtype = op.dtype;
  e.kind = stream::kEltAdd;
  e.b_mode = stream::kBSame;
  e.a_stride = op.a_stride;
  e.b_stride = op.b_stride;
  e.out_stride = op.out_stride;
  e.rows = op.rows;
  e.row_elems = op.row_elems;
  e.act = op.act;
  e.clip_lo = op.clip_lo;
  e.clip_hi = op.clip_hi;
  return e;
}

}  // namespace

void Add(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
         Level level) {
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni && op.dtype == stream::kInt8) return AddInt8Avx512(op, a, b, out);
#endif
  if (level == kLevelAvx512Vnni && op.dtype == stream::kFP16) {
    return Eltwise(AsEltwise(op), a, b, out, level);
  }
  (void)level;
  AddRef(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
