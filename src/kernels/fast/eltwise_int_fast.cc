/*!
 * \file eltwise_int_fast.cc
 * \brief The integer ELTWISE of eltwise_fast.h.
 *
 * EltwiseRef decides per element which dtype each operand has, where b is and which kind to
 * compute. Here each row is cut into chunks of kChunk elements and every chunk runs three loops,
 * each specialized once per command: the differences x - z of a and of b (per operand dtype and
 * b mode), t of the kind (ref::EltwiseInt with a constant kind), and rshift_rne, clamp and store
 * (per result dtype). The arithmetic is the reference's own functions, in int64.
 *
 * At the AVX-512 level one fused loop does the same on 8 int64 lanes, as AddInt8Avx512 did for ADD
 * (which now runs here): every product is 32 x 32 -> 64 bits (vpmuldq), exact because
 * |x - z| < 2^16 and the multipliers are below 2^31; only int16 x int16 multiply, whose
 * (a - z_a) * (b - z_b) needs 33 bits, stays on the portable loops.
 */
#include <tvm_npu/operand_rules.h>

#include "kernels/fast/eltwise_fast.h"
#include "kernels/fast/eltwise_rows.h"
#include "kernels/fast/x86_intrinsics.h"
#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

constexpr uint64_t kChunk = 64;  // 3 x 512 bytes of int64 on the stack, within L1

struct IntParams {
  int64_t ma, mb;
  int32_t zy, lo, hi;
  uint32_t shift;
};

// d[i] = x - zp for n elements of an int8 or int16 row, from element e.
template <bool kWide>
void Differences(const uint8_t* row, uint64_t e, uint64_t n, int64_t zp, int64_t* d) {
  for (uint64_t i = 0; i < n; ++i) d[i] = ref::LoadInt(row, e + i, kWide) - zp;
}

template <uint32_t kKind>
void Combine(const int64_t* da, const int64_t* db, uint64_t n, const IntParams& p, int64_t* t) {
  for (uint64_t i = 0; i < n; ++i) t[i] = ref::EltwiseInt(kKind, da[i], db[i], p.ma, p.mb);
}

template <bool kWide>
void Requantize(const int64_t* t, uint64_t n, const IntParams& p, uint8_t* row, uint64_t e) {
  for (uint64_t i = 0; i < n; ++i) {
    ref::StoreInt(row, e + i, kWide,
                  ref::ClampInt(ref::RoundShift(t[i], p.shift), p.zy, p.lo, p.hi, kWide));
  }
}

using DifferencesFn = void (*)(const uint8_t*, uint64_t, uint64_t, int64_t, int64_t*);
using CombineFn = void (*)(const int64_t*, const int64_t*, uint64_t, const IntParams&, int64_t*);
using RequantizeFn = void (*)(const int64_t*, uint64_t, const IntParams&, uint8_t*, uint64_t);

CombineFn CombineFor(uint32_t kind) {
  switch (kind) {
    case stream::kEltAdd: return Combine<stream::kEltAdd>;
    case stream::kEltSub: return Combine<stream::kEltSub>;
    case stream::kEltMul: return Combine<stream::kEltMul>;
    case stream::kEltMax: return Combine<stream::kEltMax>;
    default: return Combine<stream::kEltMin>;
  }
}

bool Wide(uint32_t own, const stream::EltwiseOperands& op) {
  return stream::OperandDType(own, op.dtype) == stream::kInt16;
}

void EltwiseIntPortable(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                        uint8_t* out) {
  const bool b16 = Wide(op.b_dtype, op);
  const DifferencesFn diff_a = Wide(op.a_dtype, op) ? Differences<true> : Differences<false>;
  const DifferencesFn diff_b = b16 ? Differences<true> : Differences<false>;
  const CombineFn combine = CombineFor(op.kind);
  const RequantizeFn requantize = Wide(op.out_dtype, op) ? Requantize<true> : Requantize<false>;
  const IntParams p{op.a_mult,
                    op.b_mult,
                    ref::WrapI32(op.out_zp),
                    ref::WrapI32(op.clip_lo),
                    ref::WrapI32(op.clip_hi),
                    op.shift};
  const int64_t za = ref::WrapI32(op.a_zp), zb = ref::WrapI32(op.b_zp);
  int64_t da[kChunk], db[kChunk], t[kChunk];
  if (op.b_mode == stream::kBScalar) {
    const int64_t v = ref::LoadInt(b, 0, b16) - zb;
    for (uint64_t i = 0; i < kChunk; ++i) db[i] = v;
  }
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ar = a + r * op.a_stride;
    uint8_t* outr = out + r * op.out_stride;
    uint64_t c = 0;  // b's channel for element e (mode kBChannel); rows start at channel 0
    for (uint64_t e = 0; e < op.row_elems; e += kChunk) {
      const uint64_t n = op.row_elems - e < kChunk ? op.row_elems - e : kChunk;
      diff_a(ar, e, n, za, da);
      if (op.b_mode == stream::kBSame) {
        diff_b(b + r * op.b_stride, e, n, zb, db);
      } else if (op.b_mode == stream::kBChannel) {
        for (uint64_t i = 0; i < n; ++i) {
          db[i] = ref::LoadInt(b, c, b16) - zb;
          c = c + 1 == op.channels ? 0 : c + 1;
        }
      }
      combine(da, db, n, p, t);
      requantize(t, n, p, outr, e);
    }
  }
}

#if TVM_NPU_X86_64

NPU_TARGET_AVX512 inline __mmask8 Lanes8(uint64_t left) {
  return left >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << left) - 1);
}

// 8 sign-extended elements of an int8 or int16 row minus the zero point.
template <bool kWide>
NPU_TARGET_AVX512 inline __m512i Differences8(const uint8_t* p, __mmask8 mask, __m512i zp) {
  const __m512i x = kWide ? _mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(mask, p))
                          : _mm512_cvtepi8_epi64(_mm_maskz_loadu_epi8(mask, p));
  return _mm512_sub_epi64(x, zp);
}

struct Int8Lanes {  // the per-command constants, broadcast
  __m512i za, zb, ma, mb, zy, lo, hi, low_mask, half;
  __m128i shift;
};

// ref::EltwiseInt on 8 lanes; vpmuldq multiplies the low 32 bits of each lane, signed, which hold
// da, db (|.| < 2^16), da * db (< 2^24 unless both are int16, not run here) and M (< 2^31).
template <uint32_t kKind>
NPU_TARGET_AVX512 inline __m512i Combine8(__m512i da, __m512i db, const Int8Lanes& k) {
  if (kKind == stream::kEltMul) return _mm512_mul_epi32(_mm512_mul_epi32(da, db), k.ma);
  const __m512i ta = _mm512_mul_epi32(da, k.ma), tb = _mm512_mul_epi32(db, k.mb);
  switch (kKind) {
    case stream::kEltAdd: return _mm512_add_epi64(ta, tb);
    case stream::kEltSub: return _mm512_sub_epi64(ta, tb);
    case stream::kEltMax: return _mm512_max_epi64(ta, tb);
    default: return _mm512_min_epi64(ta, tb);
  }
}

// ref::RoundShift (q = t >> n, r = the low n bits, q += 1 past half or at half with q odd), then
// ClampInt, counting the lanes of `mask` that saturate (ref::CountIfSaturated).
template <bool kO16>
NPU_TARGET_AVX512 inline __m512i Requantize8(__m512i t, const Int8Lanes& k, __mmask8 mask) {
  const __m512i one = _mm512_set1_epi64(1);
  __m512i q = _mm512_sra_epi64(t, k.shift);
  const __m512i rem = _mm512_and_si512(t, k.low_mask);
  const __mmask8 up = _mm512_cmpgt_epi64_mask(rem, k.half) |
                      (_mm512_cmpeq_epi64_mask(rem, k.half) & _mm512_test_epi64_mask(q, one));
  q = _mm512_mask_add_epi64(q, up, q, one);
  const __m512i y = _mm512_add_epi64(q, k.zy);
  const __m512i dmax = _mm512_set1_epi64(kO16 ? 32767 : 127);
  const __m512i dmin = _mm512_set1_epi64(kO16 ? -32768 : -128);
  const __mmask8 sat = (_mm512_cmpgt_epi64_mask(y, dmax) & _mm512_cmpeq_epi64_mask(k.hi, dmax) &
                        _mm512_cmpneq_epi64_mask(k.zy, dmax)) |
                       (_mm512_cmplt_epi64_mask(y, dmin) & _mm512_cmpeq_epi64_mask(k.lo, dmin) &
                        _mm512_cmpneq_epi64_mask(k.zy, dmin));
  if ((sat & mask) != 0) ref::CountSaturated(__builtin_popcount(sat & mask));
  return _mm512_min_epi64(_mm512_max_epi64(y, k.lo), k.hi);
}

// n elements of a row; b advances with them, or is `fixed` for every block of 8. The kind is a
// template argument: a switch per 8 lanes cost a large int8 ADD 6%.
template <uint32_t kKind, bool kA16, bool kB16, bool kO16>
NPU_TARGET_AVX512 void Span8(const uint8_t* a, const uint8_t* b, const __m512i* fixed, uint8_t* out,
                             uint64_t n, const Int8Lanes& k) {
  for (uint64_t e = 0; e < n; e += 8) {
    const __mmask8 mask = Lanes8(n - e);
    const __m512i da = Differences8<kA16>(a + e * (kA16 ? 2 : 1), mask, k.za);
    const __m512i db =
        fixed != nullptr ? *fixed : Differences8<kB16>(b + e * (kB16 ? 2 : 1), mask, k.zb);
    const __m512i y = Requantize8<kO16>(Combine8<kKind>(da, db, k), k, mask);
    if (kO16) {
      _mm512_mask_cvtepi64_storeu_epi16(out + e * 2, mask, y);
    } else {
      _mm512_mask_cvtepi64_storeu_epi8(out + e, mask, y);
    }
  }
}

template <uint32_t kKind, bool kA16, bool kB16, bool kO16>
NPU_TARGET_AVX512 void EltwiseIntAvx512(const stream::EltwiseOperands& op, const uint8_t* a,
                                        const uint8_t* b, uint8_t* out) {
  const uint64_t shift = op.shift;
  const int64_t zb = ref::WrapI32(op.b_zp);
  const Int8Lanes k{_mm512_set1_epi64(ref::WrapI32(op.a_zp)),
                    _mm512_set1_epi64(zb),
                    _mm512_set1_epi64(op.a_mult),
                    _mm512_set1_epi64(op.b_mult),
                    _mm512_set1_epi64(ref::WrapI32(op.out_zp)),
                    _mm512_set1_epi64(ref::WrapI32(op.clip_lo)),
                    _mm512_set1_epi64(ref::WrapI32(op.clip_hi)),
                    _mm512_set1_epi64(static_cast<int64_t>((uint64_t{1} << shift) - 1)),
                    _mm512_set1_epi64(static_cast<int64_t>(uint64_t{1} << (shift - 1))),
                    _mm_cvtsi32_si128(static_cast<int>(shift))};
  alignas(64) int64_t lanes[8];
  const bool repeats =
      RepeatingB(op, lanes, [b, zb](uint32_t i) { return ref::LoadInt(b, i, kB16) - zb; });
  const __m512i fixed = repeats ? _mm512_load_si512(lanes) : _mm512_setzero_si512();
  ForEachSpan(op, a, b, out, repeats, kA16 ? 2 : 1, kO16 ? 2 : 1,
              [&](const uint8_t* as, const uint8_t* bs, uint8_t* outs, uint64_t n) {
                Span8<kKind, kA16, kB16, kO16>(as, bs, repeats ? &fixed : nullptr, outs, n, k);
              });
}

using EltwiseFn = void (*)(const stream::EltwiseOperands&, const uint8_t*, const uint8_t*,
                           uint8_t*);

// The instantiation for the kind and the operands' dtypes (a16 * 4 + b16 * 2 + out16).
template <uint32_t kKind>
EltwiseFn ForDTypes(unsigned wide) {
  constexpr EltwiseFn kByDTypes[8] = {
      EltwiseIntAvx512<kKind, false, false, false>, EltwiseIntAvx512<kKind, false, false, true>,
      EltwiseIntAvx512<kKind, false, true, false>,  EltwiseIntAvx512<kKind, false, true, true>,
      EltwiseIntAvx512<kKind, true, false, false>,  EltwiseIntAvx512<kKind, true, false, true>,
      EltwiseIntAvx512<kKind, true, true, false>,   EltwiseIntAvx512<kKind, true, true, true>};
  return kByDTypes[wide];
}

EltwiseFn Avx512Kernel(uint32_t kind, unsigned wide) {
  switch (kind) {
    case stream::kEltAdd: return ForDTypes<stream::kEltAdd>(wide);
    case stream::kEltSub: return ForDTypes<stream::kEltSub>(wide);
    case stream::kEltMul: return ForDTypes<stream::kEltMul>(wide);
    case stream::kEltMax: return ForDTypes<stream::kEltMax>(wide);
    default: return ForDTypes<stream::kEltMin>(wide);
  }
}

#endif  // TVM_NPU_X86_64

}  // namespace

void EltwiseInt(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
                Level level) {
#if TVM_NPU_X86_64
  const bool a16 = Wide(op.a_dtype, op), b16 = Wide(op.b_dtype, op);
  if (level == kLevelAvx512Vnni && !(op.kind == stream::kEltMul && a16 && b16)) {
    return Avx512Kernel(op.kind, a16 * 4 + b16 * 2 + Wide(op.out_dtype, op))(op, a, b, out);
  }
#endif
  (void)level;
  EltwiseIntPortable(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
