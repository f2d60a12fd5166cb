/*!
 * \file norm_ref.cc
 * \brief Reference NORM, fp16 (docs/npu.md section 2).
 */
#include "kernels/ref/norm_ref.h"

#include <cmath>
#include <cstring>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void NormRef(const stream::NormOperands& op, const uint8_t* in, const uint8_t* gamma,
             const uint8_t* beta, uint8_t* out) {
  // E <= max_width (checked at load), so the conversion is exact.
  const float n = static_cast<float>(op.row_elems);
  const float eps = ref::BitsToFloat(op.eps);
  const bool layer = op.kind == stream::kNormLayer;
  const ref::RowIo io{op.dtype == stream::kInt8, ref::BitsToFloat(op.in_scale),
                      ref::BitsToFloat(op.out_scale), ref::WrapI32(op.in_zp),
                      ref::WrapI32(op.out_zp)};
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    // Layernorm: the mean first, then the squared deviations from it (two passes; E[x^2] - E[x]^2
    // would cancel when the mean is large next to the spread). Rmsnorm: no centring.
    float mean = 0.0f;
    if (layer) {
      float s = 0.0f;
      for (uint64_t e = 0; e < op.row_elems; ++e) s += io.Load(ir, e);
      mean = s / n;
    }
    float q = 0.0f;
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      const float d = layer ? io.Load(ir, e) - mean : io.Load(ir, e);
      const float sq = d * d;  // rounded on its own: -ffp-contract=off keeps it out of an FMA
      q += sq;
    }
    const float rstd = std::sqrt(q / n + eps);
    for (uint64_t e = 0; e < op.row_elems; ++e) {
      const float x = io.Load(ir, e);
      float y = (layer ? x - mean : x) / rstd;
      if (gamma != nullptr) y = y * LoadF32(gamma + e * 4);
      if (beta != nullptr) y = y + LoadF32(beta + e * 4);
      io.Store(outr, e, y);
    }
  }
}

}  // namespace tvm_npu
