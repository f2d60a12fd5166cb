/*!
 * \file position.cc
 * \brief Commands resolved at the run-time position, and the position limit (position.h).
 */
#include "runtime/position.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

uint32_t SatAdd(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>(std::min<uint64_t>(a + b, 0xFFFFFFFFull));
}

template <typename Op>
stream::Command WithOperands(const stream::Command& cmd, const Op& op) {
  stream::Command out = cmd;
  std::memcpy(&out.words[1], &op, sizeof(op));
  return out;
}

}  // namespace

uint32_t PosModeOf(const stream::Command& cmd) {
  switch (cmd.opcode()) {
    case stream::kDmaLoad:
    case stream::kDmaStore: return OperandsOf<stream::DmaOperands>(cmd).pos_mode;
    case stream::kSoftmax: return OperandsOf<stream::SoftmaxOperands>(cmd).pos_mode;
    case stream::kMatmul: return OperandsOf<stream::MatmulOperands>(cmd).pos_mode;
    default: return 0;
  }
}

void CheckPosMode(const std::string& where, const stream::Command& cmd) {
  const uint32_t mode = PosModeOf(cmd);
  const bool dma = cmd.opcode() == stream::kDmaLoad || cmd.opcode() == stream::kDmaStore;
  const uint32_t defined = cmd.opcode() == stream::kSoftmax ? 1u : dma ? 7u : 3u;
  if ((mode & ~defined) != 0) {
    NPU_THROW(kBadStream) << where << ": pos_mode " << mode << " sets a bit "
                          << stream::OpcodeName(cmd.opcode()) << " does not define ("
                          << (defined == 1 ? "bit 0"
                              : dma        ? "bits 0 to 2"
                                           : "bits 0 and 1")
                          << ")";
  }
}

stream::Command Resolve(const stream::Command& cmd, uint64_t p) {
  const uint32_t mode = PosModeOf(cmd);
  if (mode == 0) return cmd;
  switch (cmd.opcode()) {
    case stream::kDmaLoad:
    case stream::kDmaStore: {
      stream::DmaOperands op = OperandsOf<stream::DmaOperands>(cmd);
      const bool load = cmd.opcode() == stream::kDmaLoad;
      uint32_t& ddr = load ? op.src_addr : op.dst_addr;
      const uint32_t ddr_stride = load ? op.src_stride : op.dst_stride;
      if (mode & 1u) ddr = SatAdd(ddr, SatMul(p, ddr_stride));
      if (mode & 2u) op.rows = SatAdd(op.rows, p);
      uint32_t& sram = load ? op.dst_addr : op.src_addr;  // format 1.5: a row of an SRAM cache
      if (mode & 4u) sram = SatAdd(sram, SatMul(p, load ? op.dst_stride : op.src_stride));
      op.pos_mode = 0;
      return WithOperands(cmd, op);
    }
    case stream::kSoftmax: {
      stream::SoftmaxOperands op = OperandsOf<stream::SoftmaxOperands>(cmd);
      op.row_elems = SatAdd(op.row_elems, p);  // pos_mode stays: the kernel masks by it
      return WithOperands(cmd, op);
    }
    case stream::kMatmul: {
      stream::MatmulOperands op = OperandsOf<stream::MatmulOperands>(cmd);
      if (mode & 1u) op.n = SatAdd(op.n, p);
      if (mode & 2u) op.k = SatAdd(op.k, p);
      op.pos_mode = 0;
      return WithOperands(cmd, op);
    }
    default: return cmd;
  }
}

std::vector<stream::Command> ResolveAll(const std::vector<stream::Command>& commands, uint64_t p) {
  std::vector<stream::Command> out;
  out.reserve(commands.size());
  for (const stream::Command& cmd : commands) out.push_back(Resolve(cmd, p));
  return out;
}

uint32_t FindPositionLimit(const std::vector<stream::Command>& commands,
                           const std::function<void(const stream::Command&, size_t)>& check,
                           std::string* reason) {
  // The first command with pos_mode whose effective operands fail at p, and what it says.
  auto first_failure = [&](uint64_t p, std::string* what) {
    for (size_t i = 0; i < commands.size(); ++i) {
      if (PosModeOf(commands[i]) == 0) continue;
      try {
        check(Resolve(commands[i], p), i);
      } catch (const std::exception& e) {
        if (what != nullptr) {  // the check's message without its code: the call's code leads
          *what = e.what();
          const size_t colon = what->find(": ");
          if (colon != std::string::npos && what->rfind("ERR_", 0) == 0) what->erase(0, colon + 2);
        }
        return true;
      }
    }
    return false;
  };
  reason->clear();
  if (!first_failure(kMaxPosition, nullptr)) return kMaxPosition;
  uint64_t lo = 0, hi = kMaxPosition;  // passes at lo (checked at load), fails at hi
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (first_failure(mid, nullptr) ? hi : lo) = mid;
  }
  first_failure(hi, reason);
  return static_cast<uint32_t>(lo);
}

uint32_t CallPosition(const ParsedStream& ps, const std::vector<const DLTensor*>& inputs) {
  if (ps.position_input < 0) return 0;
  const DLTensor* t = inputs[static_cast<size_t>(ps.position_input)];
  const char* data = static_cast<const char*>(t->data) + t->byte_offset;
  int64_t p;
  if (t->dtype.bits == 64) {
    std::memcpy(&p, data, sizeof(p));
  } else {
    int32_t v;
    std::memcpy(&v, data, sizeof(v));
    p = v;
  }
  if (p < 0 || p > int64_t{ps.position_limit}) {
    NPU_THROW(kPositionRange) << "position " << p << " (input " << ps.position_input
                              << ") is outside 0.." << ps.position_limit
                              << ", the positions this stream accepts: at " << ps.position_limit + 1
                              << " " << ps.position_limit_reason
                              << ". Nothing ran and the state (the KV cache) is unchanged; start a "
                              << "new sequence (reset), or compile with a larger max_context";
  }
  return static_cast<uint32_t>(p);
}

}  // namespace tvm_npu
