/*!
 * \file pool_ref.cc
 * \brief Reference average / max pooling, fp16 and int8 (docs/npu.md section 2).
 *
 * fp16 average: for each window row (kh) the fp32 sum from +0.0 of its taps in order (kw), and the
 * fp32 sum from +0.0 of those row sums in order (kh) — padding taps would add +0.0, which never
 * changes a sum that started at +0.0, so they are skipped — then IEEE fp32 division by KH * KW,
 * activation, one rounding to fp16. Two levels keep a global pool's sum accurate: in one running
 * sum the error grows with the number of taps (0.8% of the mean over 256 x 2048 taps of 36352). fp16 max: the maximum over the taps
 * inside the input, in order (kh, kw); a NaN tap makes the result the first NaN met (so the
 * result does not depend on where a NaN sits relative to larger values).
 * int8: acc = sum (average) or max of (x - z_x) over the taps inside the input, in int32, then
 * the fp32 requantization with the command's scale S (ref::RequantizeFp32).
 */
#include "kernels/ref/pool_ref.h"

#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <cmath>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

// Visits the input pixels of output (r, q)'s window, in tap order, as byte offsets of their
// first channel.
template <typename F>
void ForWindow(const stream::PoolOperands& op, uint64_t r, uint64_t q, F&& f) {
  uint64_t y0, y1, x0, x1;
  ref::WindowRange(r, op.stride_h, op.kh, op.pad_top, op.in_h, &y0, &y1);
  ref::WindowRange(q, op.stride_w, op.kw, op.pad_left, op.in_w, &x0, &x1);
  for (uint64_t y = y0; y < y1; ++y) {
    for (uint64_t x = x0; x < x1; ++x) f(y * op.in_stride + x * stream::InPixelStride(op));
  }
}

// The fp16 average's sum over output (r, q)'s window of the halves at `in` + tap offsets: each row's
// taps summed in fp32 from +0.0, then the row sums in fp32 from +0.0, both in order.
float WindowSum(const stream::PoolOperands& op, uint64_t r, uint64_t q, const uint8_t* in) {
  uint64_t y0, y1, x0, x1;
  ref::WindowRange(r, op.stride_h, op.kh, op.pad_top, op.in_h, &y0, &y1);
  ref::WindowRange(q, op.stride_w, op.kw, op.pad_left, op.in_w, &x0, &x1);
  float sum = 0.0f;
  for (uint64_t y = y0; y < y1; ++y) {
    float row = 0.0f;
    for (uint64_t x = x0; x < x1; ++x) {
      row += ref::LoadHalf(in + y * op.in_stride + x * stream::InPixelStride(op));
    }
    sum += row;
  }
  return sum;
}

void PoolFp16(const stream::PoolOperands& op, const uint8_t* in, uint8_t* out) {
  const float lo = ref::BitsToFloat(op.clip_lo), hi = ref::BitsToFloat(op.clip_hi);
  // KH * KW as an fp32 divisor (rounded if beyond 2^24, as a float conversion does).
  const float taps = static_cast<float>(uint64_t{op.kh} * op.kw);
  const bool is_max = op.kind == stream::kPoolMax;
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      uint8_t* out_px = out + r * op.out_stride + q * stream::OutPixelStride(op);
      for (uint64_t ch = 0; ch < op.c; ++ch) {
        float acc = 0.0f;
        if (is_max) {
          bool first = true;
          ForWindow(op, r, q, [&](uint64_t off) {
            const float v = ref::LoadHalf(in + off + ch * 2);
            if (first || (!std::isnan(acc) && (std::isnan(v) || v > acc))) acc = v;
            first = false;
          });
        } else {
          acc = WindowSum(op, r, q, in + ch * 2) / taps;
        }
        ref::StoreHalf(out_px + ch * 2, ref::Activate(acc, op.act, lo, hi));
      }
    }
  }
}

void PoolInt8(const stream::PoolOperands& op, const uint8_t* in, uint8_t* out) {
  const int32_t in_zp = static_cast<int32_t>(op.in_zp), out_zp = static_cast<int32_t>(op.out_zp);
  const int32_t lo = static_cast<int32_t>(op.clip_lo), hi = static_cast<int32_t>(op.clip_hi);
  const float scale = ref::BitsToFloat(op.scale);  // finite and > 0, checked at load
  const bool is_max = op.kind == stream::kPoolMax;
  for (uint64_t r = 0; r < op.out_h; ++r) {
    for (uint64_t q = 0; q < op.out_w; ++q) {
      int8_t* out_px =
          reinterpret_cast<int8_t*>(out + r * op.out_stride + q * stream::OutPixelStride(op));
      for (uint64_t ch = 0; ch < op.c; ++ch) {
        uint32_t sum = 0;  // uint32: the int32 wrap-around of the accumulator, defined in C++
        int32_t max = 0;
        bool first = true;
        ForWindow(op, r, q, [&](uint64_t off) {
          const int32_t v = int32_t{static_cast<int8_t>(in[off + ch])} - in_zp;
          sum += static_cast<uint32_t>(v);
          max = first ? v : std::max(max, v);
          first = false;
        });
        const int32_t acc = is_max ? max : ref::WrapI32(sum);
        out_px[ch] = ref::RequantizeFp32(acc, scale, out_zp, lo, hi);
      }
    }
  }
}

}  // namespace

void PoolRef(const stream::PoolOperands& op, const uint8_t* in, uint8_t* out) {
  if (op.dtype == stream::kInt8) {
    PoolInt8(op, in, out);
  } else {
    PoolFp16(op, in, out);
  }
}

}  // namespace tvm_npu
