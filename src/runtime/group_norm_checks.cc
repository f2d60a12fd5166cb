/*!
 * \file group_norm_checks.cc
 * \brief Load-time validation of GN_STATS and GN_APPLY (format 1.7, docs/npu.md section 6), with
 *        the code rules of command_checks.cc: an undecodable field (a size 0, channels not a
 *        multiple of groups, a flag above 1, a bad eps) is ERR_BAD_STREAM, what the unit cannot
 *        run (int8, a row or pixel wider than max_width, a tile of 2^24 group elements) is
 *        ERR_OP_NOT_SUPPORTED, a footprint outside SRAM or an output overlapping an operand is
 *        ERR_INVALID_ADDR.
 */
#include <cmath>
#include <map>
#include <utility>

#include "kernels/ref/group_norm_ref.h"
#include "kernels/ref/ref_common.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

// The fields both commands share, in the same words' meaning.
template <typename Op>
void CheckGnShape(const std::string& where, const Op& op) {
  CheckDType(where, op.dtype);
  if (op.dtype != stream::kFP16) {
    NPU_THROW(kOpNotSupported) << where << ": only fp16 group norms run on the NPU (dtype "
                               << op.dtype << "); dequantize around it";
  }
  if (op.rows == 0 || op.row_pixels == 0 || op.channels == 0 || op.groups == 0) {
    NPU_THROW(kBadStream) << where << ": a size is 0 (rows " << op.rows << ", row_pixels "
                          << op.row_pixels << ", channels " << op.channels << ", groups "
                          << op.groups << ")";
  }
  if (op.channels % op.groups != 0) {
    NPU_THROW(kBadStream) << where << ": channels " << op.channels
                          << " is not a multiple of groups " << op.groups
                          << " (a group is channels / groups adjacent channels)";
  }
}

template <typename Op>
void CheckGnLimits(const std::string& where, const Op& op, const NPUConfig& c) {
  CheckVectorConfig(where, c);
  if (op.row_pixels > c.max_width || op.channels > c.max_width) {
    NPU_THROW(kOpNotSupported) << where << ": row_pixels " << op.row_pixels << " or channels "
                               << op.channels << " above max_width " << c.max_width
                               << "; split the rows into narrower tiles";
  }
  const uint64_t n = uint64_t{op.rows} * op.row_pixels * (op.channels / op.groups);
  if (n >= (uint64_t{1} << 24)) {
    NPU_THROW(kOpNotSupported) << where << ": a tile of " << n << " elements per group is not "
                               << "below 2^24 (its count would not be exact in fp32); use "
                               << "smaller tiles";
  }
}

uint64_t Padded(uint64_t bytes, const NPUConfig& c) {
  return (bytes + c.alignment - 1) / c.alignment * c.alignment;
}

}  // namespace

void CheckGnStatsParams(const std::string& where, const stream::GnStatsOperands& op) {
  CheckGnShape(where, op);
  if (op.first > 1) NPU_THROW(kBadStream) << where << ": first " << op.first << " is not 0 or 1";
}

void CheckGnApplyParams(const std::string& where, const stream::GnApplyOperands& op) {
  CheckGnShape(where, op);
  if (op.silu > 1) NPU_THROW(kBadStream) << where << ": silu " << op.silu << " is not 0 or 1";
  const float eps = ref::BitsToFloat(op.eps);
  if (!std::isfinite(eps) || eps < 0.0f) {
    NPU_THROW(kBadStream) << where << ": eps 0x" << std::hex << op.eps << std::dec
                          << " must be the fp32 bits of a finite value >= 0";
  }
}

void CheckGnStats(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const auto op = OperandsOf<stream::GnStatsOperands>(cmd);
  CheckGnStatsParams(where, op);
  CheckGnLimits(where, op, c);
  const uint64_t row = SatMul(SatMul(op.row_pixels, op.channels), 2);
  const uint64_t rec = SatMul(op.groups, kGnRecordBytes);
  // The records are read and written: they may not overlap the tile.
  if (OutputOverlapsInputs(where, c, {{"input", op.in_addr, op.rows, row, op.in_stride}},
                           {"stats", op.stats_addr, 1, rec, Padded(rec, c)})) {
    NPU_THROW(kInvalidAddr) << where << ": the statistics records overlap the input tile in SRAM";
  }
}

void CheckGnApply(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const auto op = OperandsOf<stream::GnApplyOperands>(cmd);
  CheckGnApplyParams(where, op);
  CheckGnLimits(where, op, c);
  const uint64_t row = SatMul(SatMul(op.row_pixels, op.channels), 2);
  const uint64_t rec = SatMul(op.groups, kGnRecordBytes);
  const uint64_t prm = SatMul(op.channels, 4);
  const SramRows input{"input", op.in_addr, op.rows, row, op.in_stride};
  const SramRows stats{"stats", op.stats_addr, 1, rec, Padded(rec, c)};
  const SramRows gamma{"gamma", op.gamma_addr, 1, prm, Padded(prm, c)};
  const SramRows beta{"beta", op.beta_addr, 1, prm, Padded(prm, c)};
  const SramRows output{"output", op.out_addr, op.rows, row, op.out_stride};
  const bool has_g = op.gamma_addr != stream::kNoParam, has_b = op.beta_addr != stream::kNoParam;
  bool overlap;
  if (has_g && has_b) {
    overlap = OutputOverlapsInputs(where, c, {input, stats, gamma, beta}, output);
  } else if (has_g || has_b) {
    overlap = OutputOverlapsInputs(where, c, {input, stats, has_g ? gamma : beta}, output);
  } else {
    overlap = OutputOverlapsInputs(where, c, {input, stats}, output);
  }
  if (overlap) NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
}

void CheckGnRecords(const std::vector<stream::Command>& commands) {
  // stats_addr -> (groups, channels) of the last GN_STATS there, in stream order.
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> started;
  for (size_t i = 0; i < commands.size(); ++i) {
    const uint32_t opcode = commands[i].opcode();
    if (opcode != stream::kGnStats && opcode != stream::kGnApply) continue;
    const std::string where = Where("command", i, stream::OpcodeName(opcode));
    uint32_t addr, groups, channels;
    bool fresh = false;
    if (opcode == stream::kGnStats) {
      const auto op = OperandsOf<stream::GnStatsOperands>(commands[i]);
      addr = op.stats_addr, groups = op.groups, channels = op.channels, fresh = op.first != 0;
    } else {
      const auto op = OperandsOf<stream::GnApplyOperands>(commands[i]);
      addr = op.stats_addr, groups = op.groups, channels = op.channels;
    }
    const auto it = started.find(addr);
    if (fresh) {
      started[addr] = {groups, channels};
      continue;
    }
    if (it == started.end()) {
      NPU_THROW(kBadStream) << where << ": the records at " << addr << " were not started by an "
                            << "earlier GN_STATS with first 1 (they would hold stale SRAM)";
    }
    if (it->second != std::make_pair(groups, channels)) {
      NPU_THROW(kBadStream) << where << ": groups " << groups << " / channels " << channels
                            << " differ from the GN_STATS that started the records at " << addr
                            << " (" << it->second.first << " / " << it->second.second << ")";
    }
  }
}

}  // namespace tvm_npu
