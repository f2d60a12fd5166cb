/*!
 * \file eltwise_ref.cc
 * \brief Reference ELTWISE (binary, broadcast b), fp16 and int8/int16 (docs/npu.md section 2).
 */
#include "kernels/ref/eltwise_ref.h"

#include <tvm_npu/operand_rules.h>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

// Index of b's element for element e of row r, and b's row: per b_mode (section 6).
inline uint64_t BOffset(const stream::EltwiseOperands& op, uint64_t r, uint64_t e, uint64_t elem) {
  if (op.b_mode == stream::kBSame) return r * op.b_stride + e * elem;
  if (op.b_mode == stream::kBChannel) return (e % op.channels) * elem;
  return 0;
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
        const float v = ref::EltwiseFp32(op.kind, ref::LoadHalf(ar + e * 2), bv);
        ref::StoreHalf(outr + e * 2, ref::Activate(v, op.act, lo, hi));
      }
    }
    return;
  }
  // Integer: each operand int8 or int16 (format 1.2), read and written in its own dtype.
  const bool a16 = stream::OperandDType(op.a_dtype, op.dtype) == stream::kInt16;
  const bool b16 = stream::OperandDType(op.b_dtype, op.dtype) == stream::kInt16;
  const bool out16 = stream::OperandDType(op.out_dtype, op.dtype) == stream::kInt16;
  const uint64_t b_elem = b16 ? 2 : 1;
  const int64_t a_zp = ref::WrapI32(op.a_zp), b_zp = ref::WrapI32(op.b_zp);
  const int32_t out_zp = ref::WrapI32(op.out_zp);
  const int32_t lo = ref::WrapI32(op.clip_lo), hi = ref::WrapI32(op.clip_hi);
  const int64_t ma = op.a_mult, mb = op.b_mult;  // bounded at load so that |t| < 2^62
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ar = a + r * op.a_stride;
    uint8_t* outr = out + r * op.out_stride;
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      const int64_t da = ref::LoadInt(ar, e, a16) - a_zp;
      const int64_t db = ref::LoadInt(b + BOffset(op, r, e, b_elem), 0, b16) - b_zp;
      const int64_t t = ref::EltwiseInt(op.kind, da, db, ma, mb);
      ref::StoreInt(outr, e, out16,
                    ref::ClampInt(ref::RoundShift(t, op.shift), out_zp, lo, hi, out16));
    }
  }
}

}  // namespace tvm_npu
