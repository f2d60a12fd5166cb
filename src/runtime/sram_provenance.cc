/*!
 * \file sram_provenance.cc
 * \brief SramWrites and ConstantWeightCommands (sram_provenance.h).
 */
#include "runtime/sram_provenance.h"

#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <type_traits>

#include "kernels/ref/group_norm_ref.h"

namespace tvm_npu {
namespace {

ByteRange Rows(uint64_t addr, uint64_t rows, uint64_t stride) {
  return {addr, addr + SatMul(rows, stride)};
}

// The output of a compute command: out_h rows of an image (CONV2D, POOL), else `rows` rows.
template <typename Op>
ByteRange OutputRows(const stream::Command& cmd) {
  const auto op = OperandsOf<Op>(cmd);
  if constexpr (std::is_same_v<Op, stream::Conv2DOperands> ||
                std::is_same_v<Op, stream::PoolOperands>) {
    return Rows(op.out_addr, op.out_h, op.out_stride);
  } else {
    return Rows(op.out_addr, op.rows, op.out_stride);
  }
}

// From the first row's start to the last row's end: `rows` rows of `len` bytes, `stride` apart.
ByteRange Span(uint64_t addr, uint64_t rows, uint64_t stride, uint64_t len) {
  return rows == 0 ? ByteRange{addr, addr} : ByteRange{addr, addr + SatMul(rows - 1, stride) + len};
}

// CONV2D's bias: fp16's oc floats, int8's requantization block / W8A16's dequantization block
// (bias and scale rows), or the int4 dequantization block (with the group scales).
uint64_t BiasBytes(const stream::Conv2DOperands& op, uint64_t alignment) {
  return stream::BiasBlockBytes(op, alignment);
}

ByteRange ConvWeights(const stream::Conv2DOperands& op) {
  return Span(op.w_addr, op.oc, op.w_stride, stream::WeightRowBytes(op));
}

ByteRange DmaDst(const stream::DmaOperands& op) {
  return Span(op.dst_addr, op.rows, op.dst_stride, op.row_bytes);
}

// A set of SRAM bytes, as disjoint ranges (begin -> end).
class ByteSet {
 public:
  void Mark(ByteRange r, bool in) {
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
    if (in) ranges_[r.begin] = r.end;
  }

  std::vector<ByteRange> Ranges() const {
    std::vector<ByteRange> out;
    for (const auto& [b, e] : ranges_) out.push_back({b, e});
    return out;
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

void OnDmaLoad(const stream::DmaOperands& op, uint64_t weights_bytes, ByteSet* var) {
  if (op.rows == 0) return;
  const uint64_t span_end = DmaDst(op).end;
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
    case stream::kConv2D: return OutputRows<stream::Conv2DOperands>(cmd);
    case stream::kPool: return OutputRows<stream::PoolOperands>(cmd);
    case stream::kAdd: return OutputRows<stream::AddOperands>(cmd);
    case stream::kEltwise: return OutputRows<stream::EltwiseOperands>(cmd);
    case stream::kUnary: return OutputRows<stream::UnaryOperands>(cmd);
    case stream::kSoftmax: return OutputRows<stream::SoftmaxOperands>(cmd);
    case stream::kNorm: return OutputRows<stream::NormOperands>(cmd);
    case stream::kGnApply: return OutputRows<stream::GnApplyOperands>(cmd);
    case stream::kGnStats: {  // format 1.7: the group records
      const auto op = OperandsOf<stream::GnStatsOperands>(cmd);
      return {op.stats_addr, op.stats_addr + uint64_t{op.groups} * kGnRecordBytes};
    }
    case stream::kRope: return OutputRows<stream::RopeOperands>(cmd);
    case stream::kMatmul: {  // every batch's output block, and the gaps between them
      const auto op = OperandsOf<stream::MatmulOperands>(cmd);
      const uint64_t end =
          op.out_addr + SatMul(op.batch - 1, op.out_bstride) + SatMul(op.m, op.out_stride);
      return {op.out_addr, end};
    }
    default: return {0, sram_bytes};
  }
}

std::vector<bool> ConstantWeightCommands(const ParsedStream& ps) {
  std::vector<bool> constant(ps.widest.size(), false);
  ByteSet var;  // a call starts from zeroed SRAM: nothing variable yet
  for (size_t i = 0; i < ps.widest.size(); ++i) {
    const stream::Command& cmd = ps.widest[i];
    if (cmd.opcode() == stream::kDmaLoad) {
      OnDmaLoad(OperandsOf<stream::DmaOperands>(cmd), ps.header.weights_bytes, &var);
      continue;
    }
    if (cmd.opcode() == stream::kConv2D) {
      const auto op = OperandsOf<stream::Conv2DOperands>(cmd);
      const uint64_t bias_bytes = BiasBytes(op, ps.config.alignment);
      constant[i] = !var.Any(ConvWeights(op)) &&
                    (bias_bytes == 0 || !var.Any({op.bias_addr, op.bias_addr + bias_bytes}));
    }
    var.Mark(SramWrites(cmd, ps.config.sram_bytes), true);
  }
  return constant;
}

std::vector<ByteRange> SramReads(const stream::Command& cmd, const NPUConfig& cfg) {
  switch (cmd.opcode()) {
    case stream::kDmaLoad:
    case stream::kEnd: return {};
    case stream::kDmaStore: {
      const auto op = OperandsOf<stream::DmaOperands>(cmd);
      return {Span(op.src_addr, op.rows, op.src_stride, op.row_bytes)};
    }
    case stream::kConv2D: {
      const auto op = OperandsOf<stream::Conv2DOperands>(cmd);
      const uint64_t elem = stream::DTypeBytes(op.dtype);
      const uint64_t row =
          SatMul(op.in_w - 1, stream::InPixelStride(op)) + uint64_t{op.in_c} * elem;
      return {Span(op.in_addr, op.in_h, op.in_stride, row),
              ConvWeights(op),
              {op.bias_addr, op.bias_addr + BiasBytes(op, cfg.alignment)}};
    }
    case stream::kPool: {
      const auto op = OperandsOf<stream::PoolOperands>(cmd);
      const uint64_t row = SatMul(op.in_w - 1, stream::InPixelStride(op)) +
                           uint64_t{op.c} * stream::DTypeBytes(op.dtype);
      return {Span(op.in_addr, op.in_h, op.in_stride, row)};
    }
    case stream::kAdd: {
      const auto op = OperandsOf<stream::AddOperands>(cmd);
      const uint64_t row = uint64_t{op.row_elems} * stream::DTypeBytes(op.dtype);
      return {Span(op.a_addr, op.rows, op.a_stride, row),
              Span(op.b_addr, op.rows, op.b_stride, row)};
    }
    case stream::kEltwise: {
      const auto op = OperandsOf<stream::EltwiseOperands>(cmd);
      const uint64_t ea = stream::DTypeBytes(stream::OperandDType(op.a_dtype, op.dtype));
      const uint64_t eb = stream::DTypeBytes(stream::OperandDType(op.b_dtype, op.dtype));
      const ByteRange b =
          op.b_mode == stream::kBSame ? Span(op.b_addr, op.rows, op.b_stride, op.row_elems * eb)
          : op.b_mode == stream::kBChannel ? ByteRange{op.b_addr, op.b_addr + op.channels * eb}
                                           : ByteRange{op.b_addr, op.b_addr + eb};
      return {Span(op.a_addr, op.rows, op.a_stride, op.row_elems * ea), b};
    }
    case stream::kUnary: {
      const auto op = OperandsOf<stream::UnaryOperands>(cmd);
      const uint64_t row = uint64_t{op.row_elems} * stream::DTypeBytes(op.dtype);
      std::vector<ByteRange> reads = {Span(op.in_addr, op.rows, op.in_stride, row)};
      if (op.dtype == stream::kInt8) reads.push_back({op.table_addr, op.table_addr + 256});
      return reads;
    }
    case stream::kSoftmax: {
      const auto op = OperandsOf<stream::SoftmaxOperands>(cmd);
      std::vector<ByteRange> reads = {Span(op.in_addr, op.rows, op.in_stride,
                                           uint64_t{op.row_elems} * stream::DTypeBytes(op.dtype))};
      if (op.mask_rows != 0) {
        reads.push_back(
            Span(op.mask_addr, op.mask_rows, op.mask_stride, uint64_t{op.row_elems} * 2));
      }
      return reads;
    }
    case stream::kNorm: {
      const auto op = OperandsOf<stream::NormOperands>(cmd);
      std::vector<ByteRange> reads = {Span(op.in_addr, op.rows, op.in_stride,
                                           uint64_t{op.row_elems} * stream::DTypeBytes(op.dtype))};
      const uint64_t prm = uint64_t{op.row_elems} * 4;
      if (op.gamma_addr != stream::kNoParam) reads.push_back({op.gamma_addr, op.gamma_addr + prm});
      if (op.beta_addr != stream::kNoParam) reads.push_back({op.beta_addr, op.beta_addr + prm});
      return reads;
    }
    case stream::kGnStats: {  // format 1.7: the tile, and the records it merges into
      const auto op = OperandsOf<stream::GnStatsOperands>(cmd);
      const uint64_t row = uint64_t{op.row_pixels} * op.channels * 2;
      return {Span(op.in_addr, op.rows, op.in_stride, row),
              {op.stats_addr, op.stats_addr + uint64_t{op.groups} * kGnRecordBytes}};
    }
    case stream::kGnApply: {
      const auto op = OperandsOf<stream::GnApplyOperands>(cmd);
      const uint64_t row = uint64_t{op.row_pixels} * op.channels * 2;
      const uint64_t prm = uint64_t{op.channels} * 4;
      std::vector<ByteRange> reads = {
          Span(op.in_addr, op.rows, op.in_stride, row),
          {op.stats_addr, op.stats_addr + uint64_t{op.groups} * kGnRecordBytes}};
      if (op.gamma_addr != stream::kNoParam) reads.push_back({op.gamma_addr, op.gamma_addr + prm});
      if (op.beta_addr != stream::kNoParam) reads.push_back({op.beta_addr, op.beta_addr + prm});
      return reads;
    }
    case stream::kRope: {  // the input rows and both whole tables (a row may read any table row)
      const auto op = OperandsOf<stream::RopeOperands>(cmd);
      const uint64_t row = uint64_t{op.row_elems} * 2;
      return {Span(op.in_addr, op.rows, op.in_stride, row),
              Span(op.cos_addr, op.cs_rows, op.cs_stride, row),
              Span(op.sin_addr, op.cs_rows, op.cs_stride, row)};
    }
    case stream::kMatmul: {  // every batch's block of a and of b, and the gaps between them
      const auto op = OperandsOf<stream::MatmulOperands>(cmd);
      const uint64_t b_batches = (uint64_t{op.batch} - 1) / op.b_group + 1;
      const uint64_t b_rows = op.b_transposed ? op.n : op.k;
      std::vector<ByteRange> reads = {
          {op.a_addr, op.a_addr + SatMul(op.batch - 1, op.a_bstride) + SatMul(op.m, op.a_stride)},
          {op.b_addr,
           op.b_addr + SatMul(b_batches - 1, op.b_bstride) + SatMul(b_rows, op.b_stride)}};
      // An int8 B's scale table (b_dtype int8): one fp32 word per B batch.
      if (op.b_dtype != 0) reads.push_back({op.b_scale_addr, op.b_scale_addr + b_batches * 4});
      return reads;
    }
    default: return {{0, cfg.sram_bytes}};
  }
}

std::vector<bool> ResidentLoads(const ParsedStream& ps) {
  const size_t n = ps.widest.size();
  std::vector<bool> resident(n, false);
  ByteSet touched;  // read or written by an earlier command
  for (size_t i = 0; i < n; ++i) {
    const stream::Command& cmd = ps.widest[i];
    if (cmd.opcode() == stream::kDmaLoad) {
      const auto op = OperandsOf<stream::DmaOperands>(cmd);
      const bool constant =
          op.rows > 0 &&
          Span(op.src_addr, op.rows, op.src_stride, op.row_bytes).end <= ps.header.weights_bytes;
      resident[i] = constant && !touched.Any(DmaDst(op));
    }
    for (const ByteRange& r : SramReads(cmd, ps.config)) touched.Mark(r, true);
    touched.Mark(SramWrites(cmd, ps.config.sram_bytes), true);
  }
  ByteSet written;  // written by a later command
  for (size_t i = n; i-- > 0;) {
    const stream::Command& cmd = ps.widest[i];
    if (resident[i]) resident[i] = !written.Any(DmaDst(OperandsOf<stream::DmaOperands>(cmd)));
    written.Mark(SramWrites(cmd, ps.config.sram_bytes), true);
  }
  return resident;
}

std::vector<ByteRange> LoadedBytes(const ParsedStream& ps, const std::vector<bool>& loads) {
  ByteSet bytes;
  for (size_t i = 0; i < ps.widest.size(); ++i) {
    if (!loads[i]) continue;
    const auto op = OperandsOf<stream::DmaOperands>(ps.widest[i]);
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint64_t dst = op.dst_addr + r * op.dst_stride;
      bytes.Mark({dst, dst + op.row_bytes}, true);
    }
  }
  return bytes.Ranges();
}

}  // namespace tvm_npu
