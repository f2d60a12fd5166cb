/*!
 * \file unary_ref.cc
 * \brief Reference UNARY: fp16 activations evaluated in fp32, int8 through the compiler's table
 *        (docs/npu.md section 2).
 */
#include <cmath>

#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace ref {

// Each line is the order section 2 fixes; float literals and float functions keep every step in
// fp32 (the build disables contraction, so x * t is never fused with a neighbouring add).
float UnaryFp32(uint32_t func, float x, float alpha) {
  switch (func) {
    case stream::kUnarySigmoid: return 1.0f / (1.0f + std::exp(-x));
    case stream::kUnaryTanh: return std::tanh(x);
    case stream::kUnaryHardSwish: {
      float t = x + 3.0f;
      t = t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t);  // a NaN passes through the comparisons
      t = t / 6.0f;
      return x * t;
    }
    // erfc rather than 1 + erf: for x << 0 the sum cancels and loses the fp16 result's digits.
    case stream::kUnaryGelu: return 0.5f * x * std::erfc(-x * 0.70710677f);
    case stream::kUnaryLeakyRelu: return x < 0.0f ? x * alpha : x;
    case stream::kUnarySilu: {
      const float d = 1.0f + std::exp(-x);
      return x / d;
    }
    default: {  // kUnaryGeluTanh, as x * sigmoid(2z): 1 + tanh(z) would cancel for x < 0
      float u = x * x;
      u = u * x;
      u = 0.044715f * u;
      u = x + u;
      u = 1.5957691216f * u;
      const float d = 1.0f + std::exp(-u);
      return x / d;
    }
  }
}

}  // namespace ref

void UnaryRef(const stream::UnaryOperands& op, const uint8_t* in, const uint8_t* table,
              uint8_t* out) {
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    if (op.dtype == stream::kInt8) {
      for (uint64_t e = 0; e < op.row_elems; ++e) outr[e] = table[ir[e] ^ 0x80];  // x + 128
      continue;
    }
    const float alpha = ref::BitsToFloat(op.alpha);
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      ref::StoreHalf(outr + e * 2, ref::UnaryFp32(op.func, ref::LoadHalf(ir + e * 2), alpha));
    }
  }
}

}  // namespace tvm_npu
