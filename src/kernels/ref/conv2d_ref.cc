/*!
 * \file conv2d_ref.cc
 * \brief Reference fp16 CONV2D, dense and depthwise: fp32 accumulation starting at +0.0 in the
 *        order (kh, kw, ic) (depthwise: (kh, kw) over its one channel), padding taps skipped,
 *        fp32 bias, activation in fp32, round to fp16 (docs/npu.md section 2). Also dispatches
 *        int8 to conv2d_int8_ref.cc.
 */
#include "kernels/ref/conv2d_ref.h"

#include <tvm_npu/operand_rules.h>

#include <cstring>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

using ref::InputCoord;
using ref::LoadHalf;

void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out) {
  const float lo = ref::BitsToFloat(op.clip_lo);
  const float hi = ref::BitsToFloat(op.clip_hi);
  const bool depthwise = stream::IsDepthwise(op);
  // Depthwise: output channel o reads only input channel o, and its weight row holds one
  // element per tap. Dense: every input channel, in_c elements per tap.
  const uint64_t w_tap = depthwise ? 1 : op.in_c;
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      uint8_t* out_px = out + r * op.out_stride + q * stream::OutPixelStride(op);
      for (uint64_t o = 0; o < op.oc; ++o) {
        const uint8_t* w_row = w + o * op.w_stride;
        const uint64_t c_first = depthwise ? o : 0;
        float acc = 0.0f;
        for (uint64_t i = 0; i < op.kh; ++i) {
          uint64_t y;
          if (!InputCoord(r, op.stride_h, i, op.dil_h, op.pad_top, op.in_h, &y)) continue;
          for (uint64_t j = 0; j < op.kw; ++j) {
            uint64_t x;
            if (!InputCoord(q, op.stride_w, j, op.dil_w, op.pad_left, op.in_w, &x)) continue;
            const uint8_t* in_px =
                in + y * op.in_stride + x * stream::InPixelStride(op) + c_first * 2;
            const uint8_t* w_px = w_row + (i * op.kw + j) * w_tap * 2;
            for (uint64_t c = 0; c < w_tap; ++c) {
              // The product of two halves is exact in fp32; only the add rounds.
              acc += LoadHalf(in_px + c * 2) * LoadHalf(w_px + c * 2);
            }
          }
        }
        if (bias != nullptr) {
          float b;
          std::memcpy(&b, bias + o * 4, sizeof(b));
          acc += b;
        }
        ref::StoreHalf(out_px + o * 2, ref::Activate(acc, op.act, lo, hi));
      }
    }
  }
}

}  // namespace

void Conv2DRef(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
               const uint8_t* bias, uint8_t* out, uint32_t alignment) {
  if (op.dtype == stream::kInt8) {
    Conv2DInt8Ref(op, in, w, bias, out, alignment);
  } else {
    Conv2DFp16(op, in, w, bias, out);
  }
}

}  // namespace tvm_npu
