/*!
 * \file softmax_ref.cc
 * \brief Reference SOFTMAX, fp16 and int8 codes (docs/npu.md section 2).
 */
#include <cmath>

#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {

namespace {

// z of element e (format 1.4): x * scale, then + the mask's element, each one fp32 operation and
// rounding, no fused multiply-add (-ffp-contract=off in CMakeLists.txt keeps the compiler from fusing
// them). With scale 0 and no mask z is x: the 1.1 softmax, bit for bit.
inline float Z(const ref::RowIo& io, const uint8_t* row, const uint8_t* mask_row, float scale,
               bool scaled, uint64_t e) {
  float z = io.Load(row, e);
  if (scaled) z = z * scale;
  if (mask_row != nullptr) z = z + ref::LoadHalf(mask_row + e * 2);
  return z;
}

}  // namespace

void SoftmaxRef(const stream::SoftmaxOperands& op, const uint8_t* in, const uint8_t* mask,
                uint8_t* out) {
  const bool scaled = op.scale != 0;
  const float scale = ref::BitsToFloat(op.scale);
  const ref::RowIo io{op.dtype == stream::kInt8, ref::BitsToFloat(op.in_scale),
                      ref::BitsToFloat(op.out_scale), ref::WrapI32(op.in_zp),
                      ref::WrapI32(op.out_zp)};
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    const uint8_t* mr =
        op.mask_rows == 0 ? nullptr : mask + ((op.mask_row0 + r) % op.mask_rows) * op.mask_stride;
    // Pass 1: the maximum, as comparisons in element order (a NaN never wins one; the NaN still
    // reaches every output through z - m of its own element and through the sum). A row whose z are
    // all -inf has m = -inf and z - m = NaN: every output NaN, as ONNX and TVM give.
    float m = Z(io, ir, mr, scale, scaled, 0);
    for (uint64_t e = 1; e < op.row_elems; ++e) {
      const float z = Z(io, ir, mr, scale, scaled, e);
      if (z > m) m = z;
    }
    // Pass 2: the sum of exp(z - m), in element order from +0.0. Pass 3 recomputes each exp rather
    // than keeping it: the output row holds fp16 only, and the same input gives the same fp32 bits.
    float sum = 0.0f;
    for (uint64_t e = 0; e < op.row_elems; ++e)
      sum += std::exp(Z(io, ir, mr, scale, scaled, e) - m);
    // Pass 3: one IEEE division and one rounding (to fp16, or to the output's codes) per element.
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      io.Store(outr, e, std::exp(Z(io, ir, mr, scale, scaled, e) - m) / sum);
    }
  }
}

}  // namespace tvm_npu
