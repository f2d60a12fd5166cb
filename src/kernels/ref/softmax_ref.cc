/*!
 * \file softmax_ref.cc
 * \brief Reference SOFTMAX, fp16 (docs/npu.md section 2).
 */
#include <cmath>

#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {

void SoftmaxRef(const stream::SoftmaxOperands& op, const uint8_t* in, uint8_t* out) {
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    // Pass 1: the maximum, as comparisons in element order (a NaN never wins one; the NaN still
    // reaches every output through x - m of its own element and through the sum).
    float m = ref::LoadHalf(ir);
    for (uint64_t e = 1; e < op.row_elems; ++e) {
      const float x = ref::LoadHalf(ir + e * 2);
      if (x > m) m = x;
    }
    // Pass 2: the sum of exp(x - m), in element order from +0.0. Pass 3 recomputes each exp rather
    // than keeping it: the output row holds fp16 only, and the same input gives the same fp32 bits.
    float sum = 0.0f;
    for (uint64_t e = 0; e < op.row_elems; ++e) sum += std::exp(ref::LoadHalf(ir + e * 2) - m);
    // Pass 3: one IEEE division and one rounding per element.
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      ref::StoreHalf(outr + e * 2, std::exp(ref::LoadHalf(ir + e * 2) - m) / sum);
    }
  }
}

}  // namespace tvm_npu
