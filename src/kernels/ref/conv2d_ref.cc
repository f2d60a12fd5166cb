/*!
 * \file conv2d_ref.cc
 * \brief Reference fp16 CONV2D, dense and depthwise: fp32 accumulation starting at +0.0 in the
 *        order (kh, kw, ic) (depthwise: (kh, kw) over its one channel), padding taps skipped,
 *        fp32 bias, activation in fp32, round to fp16 (docs/npu.md section 2); with int8 weight
 *        codes (format 1.4, W8A16) one fp32 multiply by the channel's scale before the bias.
 *        Also dispatches int8 to conv2d_int8_ref.cc.
 */
#include "kernels/ref/conv2d_ref.h"

#include <tvm_npu/operand_rules.h>

#include <cstring>
#include <vector>

#include "kernels/ref/ref_common.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

using ref::InputCoord;
using ref::LoadHalf;

// fp16 activations; the weights are fp16, or (format 1.4, W8A16) int8 codes whose products with
// the fp16 inputs are as exact as fp16 ones, so the sum is the same loop; only the epilogue gains
// one fp32 multiply by the channel's scale before the bias add. `scale` is nullptr for fp16.
void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const float* bias, const float* scale, uint8_t* out) {
  const float lo = ref::BitsToFloat(op.clip_lo);
  const float hi = ref::BitsToFloat(op.clip_hi);
  const bool depthwise = stream::IsDepthwise(op);
  const uint64_t wb = stream::WeightBytes(op);
  auto weight = [wb](const uint8_t* p) {
    return wb == 1 ? static_cast<float>(static_cast<int8_t>(*p)) : LoadHalf(p);
  };
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
            const uint8_t* w_px = w_row + (i * op.kw + j) * w_tap * wb;
            for (uint64_t c = 0; c < w_tap; ++c) {
              // fp16 x fp16 and fp16 x int8 products are exact in fp32; only the add rounds.
              acc += LoadHalf(in_px + c * 2) * weight(w_px + c * wb);
            }
          }
        }
        if (scale != nullptr) acc *= scale[o];  // one rounding: the codes' sum, dequantized
        if (bias != nullptr) acc += bias[o];
        ref::StoreHalf(out_px + o * 2, ref::Activate(acc, op.act, lo, hi));
      }
    }
  }
}

}  // namespace

void Conv2DRef(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
               const uint8_t* bias, uint8_t* out, uint32_t alignment) {
  if (stream::IsInt4Weights(op)) {
    Conv2DInt4Ref(op, in, w, bias, out, alignment);
    return;
  }
  if (op.dtype == stream::kInt8) {
    Conv2DInt8Ref(op, in, w, bias, out, alignment);
    return;
  }
  std::vector<float> b, s;
  if (bias != nullptr) {
    b.resize(op.oc);
    std::memcpy(b.data(), bias, op.oc * 4);
  }
  if (stream::IsW8A16(op)) {
    // The dequantization block has the requantization block's rows (bias bits, then scale); the
    // scales are data in SRAM, so check them here, before anything is written.
    std::vector<int32_t> bits(op.oc);
    s.resize(op.oc);
    const uint64_t row = stream::RequantRowStride(op.oc, alignment);
    const uint64_t bad = ref::LoadRequantBlock(bias, op.oc, row, bits.data(), s.data());
    if (bad < op.oc) {
      NPU_THROW(kBadStream) << "CONV2D int8 weights: output channel " << bad << " has scale "
                            << s[bad] << "; it must be finite and > 0 (docs/npu.md section 6)";
    }
  }
  Conv2DFp16(op, in, w, b.empty() ? nullptr : b.data(), s.empty() ? nullptr : s.data(), out);
}

}  // namespace tvm_npu
