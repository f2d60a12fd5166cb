/*!
 * \file sram_provenance.cc
 * \brief SramWrites and ConstantWeightCommands (sram_provenance.h).
 */
#include "runtime/sram_provenance.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace tvm_npu {
namespace {

ByteRange Rows(uint64_t addr, uint64_t rows, uint64_t stride) {
  return {addr, addr + SatMul(rows, stride)};
}

// The SRAM bytes whose value may differ between calls, as disjoint ranges (begin -> end).
class VariableBytes {
 public:
  void Mark(ByteRange r, bool variable) {
    if (r.begin >= r.end) return;
    // Cut out [begin, end), keeping the parts of overlapping ranges outside it.
    auto it = ranges_.lower_bound(r.begin);
    if (it != ranges_.begin() && std::prev(it)->second > r.begin) --it;
    while (it != ranges_.end() && it->first < r.end) {
      const uint64_t b = it->first, e = it->second;
      it = ranges_.erase(it);
      if (b < r.begin) ranges_[b] = r.begin;
      if (e > r.end) ranges_[r.end] = e;
    }
    if (variable) ranges_[r.begin] = r.end;
  }

  bool Any(ByteRange r) const {
    if (r.begin >= r.end) return false;
    auto it = ranges_.upper_bound(r.begin);
    if (it != ranges_.begin() && std::prev(it)->second > r.begin) return true;
    return it != ranges_.end() && it->first < r.end;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

// Rows of a strided constant load are marked one by one (the gaps between them keep their state);
// past this many rows, the whole span is called variable instead, which is only ever cautious.
constexpr uint64_t kMaxRowsTracked = 4096;

void OnDmaLoad(const stream::DmaOperands& op, uint64_t weights_bytes, VariableBytes* var) {
  if (op.rows == 0) return;
  const uint64_t span_end = op.dst_addr + SatMul(op.rows - 1, op.dst_stride) + op.row_bytes;
  const uint64_t src_end = op.src_addr + SatMul(op.rows - 1, op.src_stride) + op.row_bytes;
  const bool constant = src_end <= weights_bytes;
  if (!constant || op.rows > kMaxRowsTracked) {
    var->Mark({op.dst_addr, span_end}, true);
  } else if (op.dst_stride == op.row_bytes) {
    var->Mark({op.dst_addr, span_end}, false);
  } else {
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint64_t dst = op.dst_addr + r * op.dst_stride;
      var->Mark({dst, dst + op.row_bytes}, false);
    }
  }
}

}  // namespace

ByteRange SramWrites(const stream::Command& cmd, uint64_t sram_bytes) {
  switch (cmd.opcode()) {
    case stream::kDmaLoad: {
      const auto op = OperandsOf<stream::DmaOperands>(cmd);
      return Rows(op.dst_addr, op.rows, std::max(op.dst_stride, op.row_bytes));
    }
    case stream::kDmaStore:
    case stream::kEnd: return {0, 0};
    case stream::kConv2D: {
      const auto op = OperandsOf<stream::Conv2DOperands>(cmd);
      return Rows(op.out_addr, op.out_h, op.out_stride);
    }
    case stream::kPool: {
      const auto op = OperandsOf<stream::PoolOperands>(cmd);
      return Rows(op.out_addr, op.out_h, op.out_stride);
    }
    case stream::kAdd: {
      const auto op = OperandsOf<stream::AddOperands>(cmd);
      return Rows(op.out_addr, op.rows, op.out_stride);
    }
    case stream::kEltwise: {
      const auto op = OperandsOf<stream::EltwiseOperands>(cmd);
      return Rows(op.out_addr, op.rows, op.out_stride);
    }
    case stream::kUnary: {
      const auto op = OperandsOf<stream::UnaryOperands>(cmd);
      return Rows(op.out_addr, op.rows, op.out_stride);
    }
    case stream::kSoftmax: {
      const auto op = OperandsOf<stream::SoftmaxOperands>(cmd);
      return Rows(op.out_addr, op.rows, op.out_stride);
    }
    default: return {0, sram_bytes};
  }
}

std::vector<bool> ConstantWeightCommands(const ParsedStream& ps) {
  std::vector<bool> constant(ps.commands.size(), false);
  VariableBytes var;  // a call starts from zeroed SRAM: nothing variable yet
  for (size_t i = 0; i < ps.commands.size(); ++i) {
    const stream::Command& cmd = ps.commands[i];
    if (cmd.opcode() == stream::kDmaLoad) {
      OnDmaLoad(OperandsOf<stream::DmaOperands>(cmd), ps.header.weights_bytes, &var);
      continue;
    }
    if (cmd.opcode() == stream::kConv2D) {
      const auto op = OperandsOf<stream::Conv2DOperands>(cmd);
      const uint64_t taps = uint64_t{op.kh} * op.kw * (stream::IsDepthwise(op) ? 1 : op.in_c);
      const uint64_t w_row = taps * stream::DTypeBytes(op.dtype);
      // The bias: fp16's oc floats, or int8's requantization block (bias and scale rows).
      const uint64_t bias_bytes =
          op.bias_addr == stream::kNoBias ? 0
          : op.dtype == stream::kInt8
              ? stream::kRequantRows * stream::RequantRowStride(op.oc, ps.config.alignment)
              : uint64_t{op.oc} * 4;
      constant[i] = !var.Any({op.w_addr, op.w_addr + SatMul(op.oc - 1, op.w_stride) + w_row}) &&
                    (bias_bytes == 0 || !var.Any({op.bias_addr, op.bias_addr + bias_bytes}));
    }
    var.Mark(SramWrites(cmd, ps.config.sram_bytes), true);
  }
  return constant;
}

}  // namespace tvm_npu
