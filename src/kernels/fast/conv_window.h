/*!
 * \file conv_window.h
 * \brief The input pixels a CONV2D output pixel reads (docs/npu.md section 4, tiling), shared
 *        by the fast convolutions. A plain function, so kernels with target attributes inline it.
 */
#ifndef TVM_NPU_KERNELS_FAST_CONV_WINDOW_H_
#define TVM_NPU_KERNELS_FAST_CONV_WINDOW_H_

#include <tvm_npu/operand_rules.h>
#include <tvm_npu/stream_format.h>

#include <cstdint>
#include <vector>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {

/*!
 * \brief The taps of output pixel (r, q) inside the input tile, in the reference's order (kh,
 *        then kw): px[i] points at the tap's input pixel, tap[i] = kh * KW + kw. Returns how many;
 *        px and tap hold KH * KW entries.
 */
inline size_t ValidTaps(const stream::Conv2DOperands& op, const uint8_t* in, uint64_t r, uint64_t q,
                        const uint8_t** px, uint32_t* tap) {
  size_t n = 0;
  for (uint64_t i = 0; i < op.kh; ++i) {
    uint64_t y;
    if (!ref::InputCoord(r, op.stride_h, i, op.dil_h, op.pad_top, op.in_h, &y)) continue;
    for (uint64_t j = 0; j < op.kw; ++j) {
      uint64_t x;
      if (!ref::InputCoord(q, op.stride_w, j, op.dil_w, op.pad_left, op.in_w, &x)) continue;
      px[n] = in + y * op.in_stride + x * stream::InPixelStride(op);
      tap[n++] = static_cast<uint32_t>(i * op.kw + j);
    }
  }
  return n;
}

/*!
 * \brief Where the taps of interior output pixels are: those whose whole window lies inside the
 *        tile read tap t at First(r, q) + offset[t], with no per-tap bounds checks.
 */
struct InteriorWindow {
  explicit InteriorWindow(const stream::Conv2DOperands& op) : op_(op) {
    const uint64_t elem = stream::DTypeBytes(op.dtype);
    // A kernel row is one contiguous run when its taps are adjacent packed pixels.
    const bool rows_contiguous =
        op.dil_w == 1 && stream::InPixelStride(op) == uint64_t{op.in_c} * elem;
    for (uint64_t i = 0; i < op.kh; ++i) {
      for (uint64_t j = 0; j < op.kw; ++j) {
        offset.push_back(i * op.dil_h * op.in_stride + j * op.dil_w * stream::InPixelStride(op));
        if (j == 0 || !rows_contiguous) run.push_back(offset.back());
      }
    }
    run_elems = rows_contiguous ? uint64_t{op.kw} * op.in_c : op.in_c;
  }
  bool Inside(uint64_t r, uint64_t q) const {
    const uint64_t y = r * op_.stride_h, x = q * op_.stride_w;
    return y >= op_.pad_top && y - op_.pad_top + (op_.kh - 1) * uint64_t{op_.dil_h} < op_.in_h &&
           x >= op_.pad_left && x - op_.pad_left + (op_.kw - 1) * uint64_t{op_.dil_w} < op_.in_w;
  }
  const uint8_t* First(const uint8_t* in, uint64_t r, uint64_t q) const {
    return in + (r * op_.stride_h - op_.pad_top) * op_.in_stride +
           (q * op_.stride_w - op_.pad_left) * stream::InPixelStride(op_);
  }
  std::vector<uint64_t> offset;  // per tap (kh * KW + kw), in bytes
  std::vector<uint64_t> run;     // the window as contiguous runs of run_elems elements, in order
  uint64_t run_elems = 0;

 private:
  const stream::Conv2DOperands& op_;
};

/*! \brief Output pixel (r, q) of the output tile. (Callers walk (r, q) rather than divide a
 *         flat index: two 64-bit divisions per pixel cost more than a 1x1 pixel's im2col.) */
inline uint8_t* OutPixel(const stream::Conv2DOperands& op, uint8_t* out, uint64_t r, uint64_t q) {
  return out + r * op.out_stride + q * stream::OutPixelStride(op);
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_CONV_WINDOW_H_
