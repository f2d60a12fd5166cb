/*!
 * \file conv2d_int8_ref.cc
 * \brief Reference int8 CONV2D, dense and depthwise (docs/npu.md section 2):
 *        acc = bias + sum over taps inside the input of (x - z_x) * w in int32 (wrap-around),
 *        then per-channel requantization y = clamp(z_y + round_half_even(fp32(fp32(acc) * S)),
 *        lo, hi) with the fp32 scale S of each output channel.
 */
#include <tvm_npu/operand_rules.h>

#include <vector>

#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/ref_common.h"
#include "runtime/npu_error.h"

namespace tvm_npu {

void Conv2DInt8Ref(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                   const uint8_t* requant, uint8_t* out, uint32_t alignment) {
  const uint64_t row = stream::RequantRowStride(op.oc, alignment);
  // The scales are data in SRAM, not operands, so the parser could not check them: check them
  // here, before writing anything, so a bad block never yields a half-written tile.
  std::vector<int32_t> bias(op.oc);
  std::vector<float> scale(op.oc);
  const uint64_t bad = ref::LoadRequantBlock(requant, op.oc, row, bias.data(), scale.data());
  if (bad < op.oc) {
    NPU_THROW(kBadStream) << "CONV2D int8: output channel " << bad << " has scale " << scale[bad]
                          << "; S must be finite and > 0 (docs/npu.md section 2)";
  }
  const int32_t in_zp = static_cast<int32_t>(op.in_zp), out_zp = static_cast<int32_t>(op.out_zp);
  const int32_t lo = static_cast<int32_t>(op.clip_lo), hi = static_cast<int32_t>(op.clip_hi);
  const bool depthwise = stream::IsDepthwise(op);
  const uint64_t w_tap = depthwise ? 1 : op.in_c;
  const int8_t* x8 = reinterpret_cast<const int8_t*>(in);
  const int8_t* w8 = reinterpret_cast<const int8_t*>(w);
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      int8_t* out_px =
          reinterpret_cast<int8_t*>(out + r * op.out_stride + q * stream::OutPixelStride(op));
      for (uint64_t o = 0; o < op.oc; ++o) {
        const int8_t* w_row = w8 + o * op.w_stride;
        const uint64_t c_first = depthwise ? o : 0;
        // uint32 so the documented int32 wrap-around is defined behaviour in C++.
        uint32_t acc = static_cast<uint32_t>(bias[o]);
        for (uint64_t i = 0; i < op.kh; ++i) {
          uint64_t y;
          if (!ref::InputCoord(r, op.stride_h, i, op.dil_h, op.pad_top, op.in_h, &y)) continue;
          for (uint64_t j = 0; j < op.kw; ++j) {
            uint64_t x;
            if (!ref::InputCoord(q, op.stride_w, j, op.dil_w, op.pad_left, op.in_w, &x)) {
              continue;
            }
            const int8_t* in_px = x8 + y * op.in_stride + x * stream::InPixelStride(op) + c_first;
            const int8_t* w_px = w_row + (i * op.kw + j) * w_tap;
            for (uint64_t c = 0; c < w_tap; ++c) {
              // |(x - z_x) * w| <= 255 * 128: exact in int32.
              acc += static_cast<uint32_t>((int32_t{in_px[c]} - in_zp) * int32_t{w_px[c]});
            }
          }
        }
        out_px[o] = ref::RequantizeFp32(ref::WrapI32(acc), scale[o], out_zp, lo, hi);
      }
    }
  }
}

}  // namespace tvm_npu
