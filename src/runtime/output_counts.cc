/*!
 * \file output_counts.cc
 * \brief CountOutputs (output_counts.h): where each compute command's results lie in SRAM.
 *
 * The fp16 counts look at the results themselves, after the command: every kernel, reference or
 * fast, writes the same bits, so they count alike by construction. An fp16 result is +-inf when it
 * overflowed (beyond +-65504, docs/npu.md section 2) or when an input already was; the first layer
 * with a count is where it started. The int8 / int16 counts need the value before the clamp, so
 * the requantizations count them as they run (kernels/ref/sat_count.h).
 */
#include "runtime/output_counts.h"

#include <tvm_npu/operand_rules.h>

#include <cstring>

namespace tvm_npu {
namespace {

// Results as blocks x rows x pixels x elems: elems contiguous, the rest strided in bytes.
struct Layout {
  uint32_t dtype;
  uint64_t addr, blocks, block_stride, rows, row_stride, pixels, pixel_stride, elems;
};

template <typename Op>
Layout Rows(const Op& op, uint32_t dtype) {
  return {dtype, op.out_addr, 1, 0, op.rows, op.out_stride, 1, 0, op.row_elems};
}

// A row command whose result has the command's dtype (an int8 UNARY is a table lookup: it never
// saturates, and its results are counted as outputs only).
template <typename Op>
Layout RowsOf(const stream::Command& cmd) {
  const auto op = OperandsOf<Op>(cmd);
  return Rows(op, op.dtype);
}

// CONV2D and POOL: out_h rows of out_w pixels of `channels` (a member of Op) elements.
template <typename Op>
Layout Image(const stream::Command& cmd, uint32_t Op::* channels_of) {
  const auto op = OperandsOf<Op>(cmd);
  const uint64_t channels = op.*channels_of;
  const uint64_t pstride =
      op.out_pstride != 0 ? op.out_pstride : channels * stream::DTypeBytes(op.dtype);
  return {op.dtype, op.out_addr, 1, 0, op.out_h, op.out_stride, op.out_w, pstride, channels};
}

bool LayoutOf(const stream::Command& cmd, Layout* l) {
  switch (cmd.opcode()) {
    case stream::kConv2D: *l = Image(cmd, &stream::Conv2DOperands::oc); return true;
    case stream::kPool: *l = Image(cmd, &stream::PoolOperands::c); return true;
    case stream::kEltwise: {
      const auto op = OperandsOf<stream::EltwiseOperands>(cmd);
      *l = Rows(op, stream::OperandDType(op.out_dtype, op.dtype));
      return true;
    }
    case stream::kMatmul: {
      const auto op = OperandsOf<stream::MatmulOperands>(cmd);
      *l = {op.dtype, op.out_addr, op.batch, op.out_bstride, op.m, op.out_stride, 1, 0, op.n};
      return true;
    }
    case stream::kAdd: *l = RowsOf<stream::AddOperands>(cmd); return true;
    case stream::kUnary: *l = RowsOf<stream::UnaryOperands>(cmd); return true;
    case stream::kSoftmax: *l = RowsOf<stream::SoftmaxOperands>(cmd); return true;
    case stream::kNorm: *l = RowsOf<stream::NormOperands>(cmd); return true;
    case stream::kRope: *l = RowsOf<stream::RopeOperands>(cmd); return true;
    default: return false;
  }
}

}  // namespace

void CountOutputs(const stream::Command& cmd, const uint8_t* sram, size_t i,
                  CommandCounts* counts) {
  Layout l;
  if (!LayoutOf(cmd, &l)) return;
  counts->outputs[i] = l.blocks * l.rows * l.pixels * l.elems;
  if (l.dtype != stream::kFP16) return;
  uint64_t inf = 0, nan = 0;
  for (uint64_t b = 0; b < l.blocks; ++b) {
    for (uint64_t r = 0; r < l.rows; ++r) {
      for (uint64_t p = 0; p < l.pixels; ++p) {
        const uint8_t* px =
            sram + l.addr + b * l.block_stride + r * l.row_stride + p * l.pixel_stride;
        for (uint64_t e = 0; e < l.elems; ++e) {
          uint16_t h;
          std::memcpy(&h, px + e * 2, sizeof(h));
          if ((h & 0x7C00u) != 0x7C00u) continue;  // finite: the exponent is not all ones
          ++((h & 0x03FFu) == 0 ? inf : nan);
        }
      }
    }
  }
  counts->fp16_overflow[i] = inf;
  counts->nan[i] = nan;
}

}  // namespace tvm_npu
