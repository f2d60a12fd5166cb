/*!
 * \file add_ref.cc
 * \brief Reference elementwise ADD, fp16 and int8 (docs/npu.md section 2).
 */
#include "kernels/ref/add_ref.h"

#include "kernels/ref/ref_common.h"

namespace tvm_npu {

void AddRef(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  if (op.dtype == stream::kFP16) {
    const float lo = ref::BitsToFloat(op.clip_lo), hi = ref::BitsToFloat(op.clip_hi);
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint8_t* ar = a + r * op.a_stride;
      const uint8_t* br = b + r * op.b_stride;
      uint8_t* outr = out + r * op.out_stride;
      for (uint64_t e = 0; e < op.row_elems; ++e) {
        // Halves convert to fp32 exactly; the fp32 add rounds, then the fp16 store rounds.
        const float sum = ref::LoadHalf(ar + e * 2) + ref::LoadHalf(br + e * 2);
        ref::StoreHalf(outr + e * 2, ref::Activate(sum, op.act, lo, hi));
      }
    }
    return;
  }
  const int64_t a_zp = static_cast<int32_t>(op.a_zp), b_zp = static_cast<int32_t>(op.b_zp);
  const int32_t out_zp = static_cast<int32_t>(op.out_zp);
  const int32_t lo = static_cast<int32_t>(op.clip_lo), hi = static_cast<int32_t>(op.clip_hi);
  const int64_t ma = op.a_mult, mb = op.b_mult;  // both < 2^31 (checked at load)
  for (uint64_t r = 0; r < op.rows; ++r) {
    const int8_t* ar = reinterpret_cast<const int8_t*>(a + r * op.a_stride);
    const int8_t* br = reinterpret_cast<const int8_t*>(b + r * op.b_stride);
    int8_t* outr = reinterpret_cast<int8_t*>(out + r * op.out_stride);
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      // |a - z_a| <= 255, so |t| < 2 * 255 * 2^31 < 2^40: exact in int64.
      const int64_t t = (ar[e] - a_zp) * ma + (br[e] - b_zp) * mb;
      outr[e] = ref::ClampOut(ref::RoundShift(t, op.shift), out_zp, lo, hi);
    }
  }
}

}  // namespace tvm_npu
