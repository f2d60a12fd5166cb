/*!
 * \file eltwise_ref.cc
 * \brief Reference ELTWISE (binary, broadcast b), fp16 and int8 (docs/npu.md section 2).
 */
#include "kernels/ref/eltwise_ref.h"

#include <algorithm>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

// Index of b's element for element e of row r, and b's row: per b_mode (section 6).
inline uint64_t BOffset(const stream::EltwiseOperands& op, uint64_t r, uint64_t e, uint64_t elem) {
  if (op.b_mode == stream::kBSame) return r * op.b_stride + e * elem;
  if (op.b_mode == stream::kBChannel) return (e % op.channels) * elem;
  return 0;
}

// Comparisons as the contract writes them, so a NaN in b passes through and one in a does not.
inline float Fp32Op(uint32_t kind, float a, float b) {
  switch (kind) {
    case stream::kEltAdd: return a + b;
    case stream::kEltSub: return a - b;
    case stream::kEltMul: return a * b;
    case stream::kEltMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

}  // namespace

void EltwiseRef(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                uint8_t* out) {
  if (op.dtype == stream::kFP16) {
    const float lo = ref::BitsToFloat(op.clip_lo), hi = ref::BitsToFloat(op.clip_hi);
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint8_t* ar = a + r * op.a_stride;
      uint8_t* outr = out + r * op.out_stride;
      for (uint64_t e = 0; e < op.row_elems; ++e) {
        const float bv = ref::LoadHalf(b + BOffset(op, r, e, 2));
        const float v = Fp32Op(op.kind, ref::LoadHalf(ar + e * 2), bv);
        ref::StoreHalf(outr + e * 2, ref::Activate(v, op.act, lo, hi));
      }
    }
    return;
  }
  const int64_t a_zp = ref::WrapI32(op.a_zp), b_zp = ref::WrapI32(op.b_zp);
  const int32_t out_zp = ref::WrapI32(op.out_zp);
  const int32_t lo = ref::WrapI32(op.clip_lo), hi = ref::WrapI32(op.clip_hi);
  const int64_t ma = op.a_mult, mb = op.b_mult;  // both < 2^31 (checked at load)
  for (uint64_t r = 0; r < op.rows; ++r) {
    const int8_t* ar = reinterpret_cast<const int8_t*>(a + r * op.a_stride);
    int8_t* outr = reinterpret_cast<int8_t*>(out + r * op.out_stride);
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      const int64_t da = ar[e] - a_zp;
      const int64_t db = static_cast<int8_t>(b[BOffset(op, r, e, 1)]) - b_zp;
      // |da|, |db| <= 255 and multipliers < 2^31: |t| < 2^48, exact in int64.
      int64_t t;
      switch (op.kind) {
        case stream::kEltAdd: t = da * ma + db * mb; break;
        case stream::kEltSub: t = da * ma - db * mb; break;
        case stream::kEltMul: t = da * db * ma; break;
        case stream::kEltMax: t = std::max(da * ma, db * mb); break;
        default: t = std::min(da * ma, db * mb); break;
      }
      outr[e] = ref::ClampOut(ref::RoundShift(t, op.shift), out_zp, lo, hi);
    }
  }
}

}  // namespace tvm_npu
