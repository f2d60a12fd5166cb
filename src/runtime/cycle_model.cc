/*!
 * \file cycle_model.cc
 * \brief docs/npu.md section 5. Change a formula here only together with the document and
 *        python/tvm_npu/cost_model.py, in a commit of its own.
 */
#include "runtime/cycle_model.h"

#include <tvm_npu/operand_rules.h>

#include <algorithm>

#include "runtime/stream_parser.h"

namespace tvm_npu {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace

const char* EngineName(uint32_t engine) {
  switch (engine) {
    case kEngineDma0: return "dma0";
    case kEngineDma1: return "dma1";
    case kEngineMac: return "mac";
    case kEngineVector: return "vector";
    default: return "";
  }
}

uint64_t CycleModel::DmaBusBytes(const NPUConfig& config, const stream::DmaOperands& op) {
  return uint64_t{op.rows} * CeilDiv(op.row_bytes, config.burst_bytes) * config.burst_bytes;
}

uint64_t CycleModel::Conv2DPasses(const NPUConfig& config, const stream::Conv2DOperands& op) {
  uint64_t p = SatMul(op.out_h, op.out_w);
  if (stream::IsDepthwise(op)) {
    // Channels on the columns, kernel taps on the rows.
    p = SatMul(p, CeilDiv(op.oc, config.mac_cols));
    return SatMul(p, CeilDiv(SatMul(op.kh, op.kw), config.mac_rows));
  }
  p = SatMul(p, SatMul(op.kh, op.kw));
  p = SatMul(p, CeilDiv(op.in_c, config.mac_rows));
  return SatMul(p, CeilDiv(op.oc, config.mac_cols));
}

uint64_t CycleModel::Conv2DCycles(const NPUConfig& config, const stream::Conv2DOperands& op) {
  const uint64_t rate_div = op.dtype == stream::kFP16 ? config.fp16_rate_div : 1;
  return config.op_overhead + SatMul(Conv2DPasses(config, op), rate_div);
}

uint64_t CycleModel::MatmulPasses(const NPUConfig& config, const stream::MatmulOperands& op) {
  // B holds the weights' place: k on the rows, n on the columns; A's rows stream like pixels.
  const uint64_t p = SatMul(SatMul(op.batch, op.m), CeilDiv(op.k, config.mac_rows));
  return SatMul(p, CeilDiv(op.n, config.mac_cols));
}

uint64_t CycleModel::MacCycles(const NPUConfig& config, const stream::Command& cmd) {
  if (cmd.opcode() ==
      stream::kMatmul) {  // rate_div as CONV2D's: fp16_rate_div for fp16, 1 for int8
    const stream::MatmulOperands op = OperandsOf<stream::MatmulOperands>(cmd);
    const uint64_t rate_div = op.dtype == stream::kFP16 ? config.fp16_rate_div : 1;
    return config.op_overhead + SatMul(MatmulPasses(config, op), rate_div);
  }
  return Conv2DCycles(config, OperandsOf<stream::Conv2DOperands>(cmd));
}

uint64_t CycleModel::VectorSteps(const stream::Command& cmd) {
  if (cmd.opcode() == stream::kAdd) {
    const stream::AddOperands op = OperandsOf<stream::AddOperands>(cmd);
    return SatMul(op.rows, op.row_elems);
  }
  if (cmd.opcode() == stream::kEltwise) {  // one step per element, whatever b's broadcast
    const stream::EltwiseOperands op = OperandsOf<stream::EltwiseOperands>(cmd);
    return SatMul(op.rows, op.row_elems);
  }
  if (cmd.opcode() == stream::kUnary) {  // a table lookup or an fp32 evaluation is one step
    const stream::UnaryOperands op = OperandsOf<stream::UnaryOperands>(cmd);
    return SatMul(op.rows, op.row_elems);
  }
  if (cmd.opcode() == stream::kSoftmax) {  // max, exp-and-sum, division: three passes
    const stream::SoftmaxOperands op = OperandsOf<stream::SoftmaxOperands>(cmd);
    return SatMul(3, SatMul(op.rows, op.row_elems));
  }
  if (cmd.opcode() == stream::kNorm) {  // layernorm: sum, deviations, normalize; rmsnorm: two
    const stream::NormOperands op = OperandsOf<stream::NormOperands>(cmd);
    return SatMul(op.kind == stream::kNormLayer ? 3 : 2, SatMul(op.rows, op.row_elems));
  }
  if (cmd.opcode() ==
      stream::kGnStats) {  // a sum pass, a squared-deviation pass; a merge per group
    const stream::GnStatsOperands op = OperandsOf<stream::GnStatsOperands>(cmd);
    return SatMul(2, SatMul(SatMul(op.rows, op.row_pixels), op.channels)) + op.groups;
  }
  if (cmd.opcode() == stream::kGnApply) {  // normalize (+ a SiLU step); a var / sqrt per group
    const stream::GnApplyOperands op = OperandsOf<stream::GnApplyOperands>(cmd);
    const uint64_t e = SatMul(SatMul(op.rows, op.row_pixels), op.channels);
    return SatMul(op.silu != 0 ? 2 : 1, e) + op.groups;
  }
  if (cmd.opcode() == stream::kRope) {  // a multiply step, then a multiply-and-add step
    const stream::RopeOperands op = OperandsOf<stream::RopeOperands>(cmd);
    return SatMul(2, SatMul(op.rows, op.row_elems));
  }
  const stream::PoolOperands op = OperandsOf<stream::PoolOperands>(cmd);
  return SatMul(SatMul(SatMul(op.out_h, op.out_w), op.c), SatMul(op.kh, op.kw));
}

// fp16, and an ELTWISE with an int16 operand or result, go through lanes twice as wide (section 5).
static bool TwoByteElements(const stream::Command& cmd) {
  if (cmd.words[1] == stream::kFP16) return true;
  if (cmd.opcode() != stream::kEltwise) return false;
  const stream::EltwiseOperands op = OperandsOf<stream::EltwiseOperands>(cmd);
  return op.a_dtype == stream::kInt16 || op.b_dtype == stream::kInt16 ||
         op.out_dtype == stream::kInt16;
}

uint64_t CycleModel::VectorCycles(const NPUConfig& config, const stream::Command& cmd) {
  // Every vector command (ADD, POOL, ELTWISE, UNARY, SOFTMAX, NORM, ROPE, GN_*) carries its dtype in word 1.
  const uint64_t lanes = TwoByteElements(cmd) ? config.vector_lanes / 2 : config.vector_lanes;
  return config.op_overhead + CeilDiv(VectorSteps(cmd), lanes);
}

CommandTiming CycleModel::OnCommand(const stream::Command& cmd) {
  CommandTiming t{kEngineNone, 0, 0, 0};
  const uint32_t opcode = cmd.opcode();
  if (opcode == stream::kDmaLoad || opcode == stream::kDmaStore) {
    t.engine = OperandsOf<stream::DmaOperands>(cmd).channel;
  } else if (opcode == stream::kConv2D || opcode == stream::kMatmul) {
    t.engine = kEngineMac;
  } else if (opcode == stream::kAdd || opcode == stream::kPool || opcode == stream::kEltwise ||
             opcode == stream::kUnary || opcode == stream::kSoftmax || opcode == stream::kNorm ||
             opcode == stream::kRope || opcode == stream::kGnStats || opcode == stream::kGnApply) {
    t.engine = kEngineVector;
  }
  // Issue rule: one command per cycle; a wait k on engine e holds the command until at most k of
  // e's commands are outstanding, i.e. until its (n_e - k)-th command has ended.
  uint64_t issue = next_issue_;
  for (uint32_t e = 0; e < kNumEngines; ++e) {
    const uint64_t k = cmd.wait(e), n = ends_[e].size();
    if (k != stream::kNoWait && k < n) issue = std::max(issue, ends_[e][n - k - 1]);
  }
  next_issue_ = issue + 1;
  t.issue = t.start = t.end = issue;
  if (t.engine == kEngineNone) return t;  // END occupies no engine

  // The engine's queue runs its commands in order, one at a time.
  t.start = std::max(issue, busy_until_[t.engine]);
  if (t.engine == kEngineMac) {
    t.end = t.start + MacCycles(config_, cmd);
  } else if (t.engine == kEngineVector) {
    t.end = t.start + VectorCycles(config_, cmd);
  } else {
    // Latency overlaps other transfers' data; data phases on the shared DDR bus do not.
    const uint64_t bus = DmaBusBytes(config_, OperandsOf<stream::DmaOperands>(cmd));
    const uint64_t t_data = std::max(t.start + config_.dma_latency, ddr_busy_until_);
    t.end = t_data + CeilDiv(bus, config_.ddr_bytes_per_cycle);
    ddr_busy_until_ = t.end;
  }
  busy_until_[t.engine] = t.end;
  busy_[t.engine] += t.end - t.start;
  ends_[t.engine].push_back(t.end);
  return t;
}

uint64_t CycleModel::TotalCycles() const {
  return *std::max_element(busy_until_.begin(), busy_until_.end());
}

}  // namespace tvm_npu
