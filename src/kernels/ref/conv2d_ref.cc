/*!
 * \file conv2d_ref.cc
 * \brief Reference fp16 CONV2D: fp32 accumulation in the order (kh, kw, ic), padding taps skipped,
 *        fp32 bias, activation in fp32, round to fp16 (docs/npu.md section 2).
 */
#include "kernels/ref/conv2d_ref.h"

#include <cstring>

#include "kernels/ref/fp16.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return HalfBitsToFloat(h);
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Written as comparisons so a NaN passes through unchanged ("NaN stays NaN").
float Activate(float x, uint32_t act, float lo, float hi) {
  if (act == stream::kActRelu) return x < 0.0f ? 0.0f : x;
  if (act == stream::kActClip) {
    if (x < lo) return lo;
    if (x > hi) return hi;
  }
  return x;
}

// Maps output coordinate `o`, tap `t` to an input coordinate; false for a padding tap.
// uint64 throughout: with u32 operands and stride 1 or 2 (checked by every caller),
// o * stride + t * dil <= 2 * (2^32 - 1) + (2^32 - 1)^2 = 2^64 - 1 cannot wrap.
bool InputCoord(uint64_t o, uint64_t stride, uint64_t t, uint64_t dil, uint64_t pad,
                uint64_t extent, uint64_t* coord) {
  const uint64_t v = o * stride + t * dil;
  if (v < pad || v - pad >= extent) return false;
  *coord = v - pad;
  return true;
}

void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out) {
  const float lo = BitsToFloat(op.clip_lo);
  const float hi = BitsToFloat(op.clip_hi);
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      uint8_t* out_px = out + r * op.out_stride + q * op.oc * 2;
      for (uint64_t o = 0; o < op.oc; ++o) {
        const uint8_t* w_row = w + o * op.w_stride;
        float acc = 0.0f;
        for (uint64_t i = 0; i < op.kh; ++i) {
          uint64_t y;
          if (!InputCoord(r, op.stride_h, i, op.dil_h, op.pad_top, op.in_h, &y)) continue;
          for (uint64_t j = 0; j < op.kw; ++j) {
            uint64_t x;
            if (!InputCoord(q, op.stride_w, j, op.dil_w, op.pad_left, op.in_w, &x)) continue;
            const uint8_t* in_px = in + y * op.in_stride + x * op.in_c * 2;
            const uint8_t* w_tap = w_row + (i * op.kw + j) * op.in_c * 2;
            for (uint64_t c = 0; c < op.in_c; ++c) {
              // The product of two halves is exact in fp32; only the add rounds.
              acc += LoadHalf(in_px + c * 2) * LoadHalf(w_tap + c * 2);
            }
          }
        }
        if (bias != nullptr) {
          float b;
          std::memcpy(&b, bias + o * 4, sizeof(b));
          acc += b;
        }
        const uint16_t h = FloatToHalfBits(Activate(acc, op.act, lo, hi));
        std::memcpy(out_px + o * 2, &h, sizeof(h));
      }
    }
  }
}

}  // namespace

void Conv2DRef(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
               const uint8_t* bias, uint8_t* out) {
  if (op.dtype == stream::kFP16) {
    Conv2DFp16(op, in, w, bias, out);
    return;
  }
  NPU_THROW(kOpNotSupported) << "CONV2D dtype " << op.dtype
                             << " has no reference kernel yet (int8 lands with issue 3); "
                             << "compile the layer for fp16";
}

}  // namespace tvm_npu
