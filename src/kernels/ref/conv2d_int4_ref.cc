/*!
 * \file conv2d_int4_ref.cc
 * \brief Reference CONV2D with group-wise int4 weights (format 1.4, docs/npu.md section 2), dense
 *        only: per group of g input channels an fp32 sum from +0.0 of the exact products
 *        x * (q - z) (W4A16) or an exact int32 dot product of (x - z_x) with (q - z) (W4A8), one
 *        fp32 multiply by the group's fp16 scale, the groups added in fp32 from +0.0 in order,
 *        then the fp32 bias; fp16: activation and one rounding; int8: the requantization of the
 *        fp32 sum.
 */
#include <tvm_npu/operand_rules.h>

#include <cmath>
#include <vector>

#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/ref_common.h"
#include "runtime/npu_error.h"

namespace tvm_npu {

Int4Dequant LoadInt4Block(const stream::Conv2DOperands& op, const uint8_t* block,
                          uint32_t alignment) {
  const stream::Int4Block layout = stream::Int4BlockLayout(op, alignment);
  const uint64_t oc = op.oc, groups = op.in_c / stream::Int4Group(op);
  const bool int8 = op.dtype == stream::kInt8;
  Int4Dequant d;
  d.bias.resize(oc);
  d.requant.resize(int8 ? oc : 0);
  d.scale.resize(groups * oc);
  d.zero_point.assign(groups * oc, 0);
  // The block is data in SRAM, not operands, so the parser could not check it: check it here,
  // before anything is written, so a bad block never yields a half-written tile.
  for (uint64_t o = 0; o < oc; ++o) {
    d.bias[o] = ref::BitsToFloat(static_cast<uint32_t>(ref::LoadI32(block + o * 4)));
    if (!int8) continue;
    d.requant[o] =
        ref::BitsToFloat(static_cast<uint32_t>(ref::LoadI32(block + layout.requant + o * 4)));
    if (!std::isfinite(d.bias[o]) || !ref::ValidScale(d.requant[o])) {
      NPU_THROW(kBadStream) << "CONV2D int4 weights: output channel " << o << " has bias "
                            << d.bias[o] << " and S " << d.requant[o] << "; under int8 the bias "
                            << "is finite and S finite and > 0 (docs/npu.md section 6)";
    }
  }
  const bool uint4 = stream::WeightCode(op) == stream::kUInt4;
  for (uint64_t j = 0; j < groups; ++j) {
    for (uint64_t o = 0; o < oc; ++o) {
      const float s = ref::LoadHalf(block + layout.scales + (j * oc + o) * 2);
      if (!ref::ValidScale(s)) {
        NPU_THROW(kBadStream) << "CONV2D int4 weights: group " << j << " of output channel " << o
                              << " has scale " << s
                              << "; it must be finite and > 0 (docs/npu.md section 6)";
      }
      d.scale[j * oc + o] = s;
      if (uint4) {
        const uint8_t pair = block[layout.zero_points + j * layout.zp_row + o / 2];
        d.zero_point[j * oc + o] = static_cast<int8_t>((o & 1) != 0 ? pair >> 4 : pair & 15);
      }
    }
  }
  return d;
}

int32_t Int4Code(const stream::Conv2DOperands& op, const uint8_t* row, uint64_t k) {
  const uint8_t pair = row[k / 2];
  const int32_t nibble = (k & 1) != 0 ? pair >> 4 : pair & 15;
  return stream::WeightCode(op) == stream::kInt4 ? nibble - ((nibble & 8) << 1) : nibble;
}

void Conv2DInt4Ref(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                   const uint8_t* block, uint8_t* out, uint32_t alignment) {
  const Int4Dequant d = LoadInt4Block(op, block, alignment);
  const uint64_t oc = op.oc, g = stream::Int4Group(op), groups = op.in_c / g;
  const bool int8 = op.dtype == stream::kInt8;
  const int32_t in_zp = ref::WrapI32(op.in_zp), out_zp = ref::WrapI32(op.out_zp);
  const int32_t lo = ref::WrapI32(op.clip_lo), hi = ref::WrapI32(op.clip_hi);
  const float lo_f = ref::BitsToFloat(op.clip_lo), hi_f = ref::BitsToFloat(op.clip_hi);
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      // kh = kw = 1: one tap, in the padding or not (then every group's sum is 0).
      uint64_t y, x;
      const bool inside = ref::InputCoord(r, op.stride_h, 0, op.dil_h, op.pad_top, op.in_h, &y) &&
                          ref::InputCoord(q, op.stride_w, 0, op.dil_w, op.pad_left, op.in_w, &x);
      const uint8_t* px = inside ? in + y * op.in_stride + x * stream::InPixelStride(op) : nullptr;
      uint8_t* out_px = out + r * op.out_stride + q * stream::OutPixelStride(op);
      for (uint64_t o = 0; o < oc; ++o) {
        const uint8_t* row = w + o * op.w_stride;
        float sum = 0.0f;
        for (uint64_t j = 0; j < groups; ++j) {
          const int32_t z = d.zero_point[j * oc + o];
          float part;
          if (int8) {
            // |(x - z_x) * (q - z)| <= 255 * 15 and g <= 128 terms: below 2^19, exact.
            int32_t a = 0;
            for (uint64_t k = j * g; px != nullptr && k < (j + 1) * g; ++k) {
              a += (int32_t{static_cast<int8_t>(px[k])} - in_zp) * (Int4Code(op, row, k) - z);
            }
            part = static_cast<float>(a) * d.scale[j * oc + o];
          } else {
            // x * (q - z) is exact in fp32 (11 by 4 significant bits); only the adds round.
            float a = 0.0f;
            for (uint64_t k = j * g; px != nullptr && k < (j + 1) * g; ++k) {
              a += ref::LoadHalf(px + k * 2) * static_cast<float>(Int4Code(op, row, k) - z);
            }
            part = a * d.scale[j * oc + o];
          }
          sum += part;  // separate from the multiply: two roundings, no fused multiply-add
        }
        sum += d.bias[o];
        if (int8) {
          out_px[o] = static_cast<uint8_t>(ref::RequantizeFloat(sum, d.requant[o], out_zp, lo, hi));
        } else {
          ref::StoreHalf(out_px + o * 2, ref::Activate(sum, op.act, lo_f, hi_f));
        }
      }
    }
  }
}

}  // namespace tvm_npu
