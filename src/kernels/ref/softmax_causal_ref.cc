/*!
 * \file softmax_causal_ref.cc
 * \brief Reference causal SOFTMAX (softmax_causal_ref.h).
 */
#include "kernels/ref/softmax_causal_ref.h"

#include <cmath>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {

void SoftmaxCausalRef(const stream::SoftmaxOperands& op, uint32_t position, const uint8_t* in,
                      uint8_t* out) {
  const bool scaled = op.scale != 0;
  const float scale = ref::BitsToFloat(op.scale);
  const uint64_t queries = op.row_elems - position;  // S: the operand before the position
  auto z = [&](const uint8_t* row, uint64_t e) {
    const float x = ref::LoadHalf(row + e * 2);
    return scaled ? x * scale : x;
  };
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    const uint64_t valid = position + r % queries + 1;  // elements 0..position + r % S
    // Format 1.6: a window keeps only its last `window` of them (a sliding window's band).
    const uint64_t first = op.window != 0 && valid > op.window ? valid - op.window : 0;
    // The passes of SoftmaxRef over the kept elements: max by comparisons in element order, the
    // in-order fp32 sum of exp(z - m) from +0.0, one division and rounding per element.
    float m = z(ir, first);
    for (uint64_t e = first + 1; e < valid; ++e) {
      const float v = z(ir, e);
      if (v > m) m = v;
    }
    float sum = 0.0f;
    for (uint64_t e = first; e < valid; ++e) sum += std::exp(z(ir, e) - m);
    for (uint64_t e = 0; e < first; ++e) ref::StoreHalf(outr + e * 2, 0.0f);
    for (uint64_t e = first; e < valid; ++e) {
      ref::StoreHalf(outr + e * 2, std::exp(z(ir, e) - m) / sum);
    }
    for (uint64_t e = valid; e < op.row_elems; ++e) ref::StoreHalf(outr + e * 2, 0.0f);
  }
}

}  // namespace tvm_npu
