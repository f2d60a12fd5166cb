/*!
 * \file state_checks.cc
 * \brief State and position descriptors, and DMAs into the state region (state_checks.h).
 */
#include "runtime/state_checks.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/command_checks.h"
#include "runtime/npu_error.h"
#include "runtime/sram_provenance.h"

namespace tvm_npu {
namespace {

using stream::TensorDesc;

uint64_t Footprint(const TensorDesc& t) {
  return SatMul(SatMul(t.view[0], t.view[1]), t.row_stride);
}

void CheckPosition(const std::string& where, const TensorDesc& t, ParsedStream* ps) {
  const bool host_ok = t.host_dtype == stream::kInt32 || t.host_dtype == stream::kInt64;
  const uint32_t one[4] = {1, 1, 1, 1}, shape[4] = {1, 0, 0, 0};
  if (t.dtype != stream::kInt32 || !host_ok || t.host_layout != stream::kLayoutRows ||
      t.host_rank != 1 || std::memcmp(t.host_shape, shape, sizeof(shape)) != 0 ||
      std::memcmp(t.view, one, sizeof(one)) != 0 || t.ddr_addr != 0 || t.row_stride != 0) {
    NPU_THROW(kBadStream) << where << ": a position is dtype int32 (3), host dtype int32 or int64 "
                          << "(6), host layout ROWS, host shape [1], view [1, 1, 1, 1], ddr_addr "
                          << "and row_stride 0 (a register, not memory)";
  }
  if (ps->position_input >= 0) {
    NPU_THROW(kBadStream) << where << ": a second position input (input " << ps->position_input
                          << " is one); a stream has one register";
  }
  if (t.io_index >= ps->inputs.size() || ps->inputs[t.io_index] != stream::kNoIoIndex) {
    NPU_THROW(kBadStream) << where << ": io_index " << t.io_index
                          << " is out of range or used twice (num_inputs " << ps->inputs.size()
                          << ")";
  }
  ps->position_input = t.io_index;
  ps->inputs[t.io_index] = static_cast<uint32_t>(&t - ps->tensors.data());
}

void CheckState(const std::string& where, const TensorDesc& t, size_t i, ParsedStream* ps) {
  const stream::Header& h = ps->header;
  const bool dtype_ok =
      t.dtype == stream::kFP16 || t.dtype == stream::kInt8 || t.dtype == stream::kInt16;
  uint64_t rows = 1;
  for (uint32_t k = 0; k + 1 < t.host_rank && k < 4; ++k) rows = SatMul(rows, t.host_shape[k]);
  bool shape_ok = t.host_rank >= 1 && t.host_rank <= ps->config.max_rank;
  for (uint32_t k = 0; k < 4; ++k)
    shape_ok = shape_ok && (k < t.host_rank) == (t.host_shape[k] != 0);
  shape_ok = shape_ok && t.view[0] == 1 && t.view[1] == rows && t.view[2] == 1 &&
             t.view[3] == t.host_shape[t.host_rank - 1];
  if (!dtype_ok || t.host_dtype != t.dtype || t.host_layout != stream::kLayoutRows || !shape_ok) {
    NPU_THROW(kBadStream) << where << ": a state tensor is fp16, int8 or int16 with host dtype its "
                          << "dtype, host layout ROWS and a view [1, rows, 1, last dim] of its "
                          << "host shape";
  }
  if (t.view[1] == 0 || t.view[3] == 0) NPU_THROW(kBadStream) << where << ": a zero dimension";
  if (t.role == stream::kRoleSramState) {  // format 1.5: its address is an SRAM address
    const uint64_t top = ps->config.sram_bytes;
    CheckBuffer(where, "SRAM state tensor", t.ddr_addr, t.view[1],
                SatMul(t.view[3], stream::DTypeBytes(t.dtype)), t.row_stride, ps->config,
                "the SRAM state area", top - std::min<uint64_t>(h.sram_state_bytes, top), top);
    ps->sram_state_tensors.push_back(static_cast<uint32_t>(i));
    return;
  }
  CheckBuffer(where, "state tensor", t.ddr_addr, t.view[1],
              SatMul(t.view[3], stream::DTypeBytes(t.dtype)), t.row_stride, ps->config,
              "the DDR state region", h.ddr_bytes, uint64_t{h.ddr_bytes} + h.state_bytes);
  ps->state_tensors.push_back(static_cast<uint32_t>(i));
}

}  // namespace

void CheckStateOrPosition(const std::string& where, size_t i, ParsedStream* ps) {
  const TensorDesc& t = ps->tensors[i];
  if (ps->header.version_minor < stream::kLlmMinor) {
    NPU_THROW(kBadStream) << where << ": role " << t.role << " needs stream format 1."
                          << stream::kLlmMinor << ", the stream says 1."
                          << ps->header.version_minor;
  }
  if (!ps->qparams.empty() && (ps->qparams[i].zero_point != 0 || ps->qparams[i].scale != 0.0f)) {
    NPU_THROW(kBadStream) << where << ": its quantization table entry must be two zero words";
  }
  if (t.role == stream::kRoleSramState && ps->header.version_minor < stream::kSramStateMinor) {
    NPU_THROW(kBadStream) << where << ": role " << t.role << " needs stream format 1."
                          << stream::kSramStateMinor << ", the stream says 1."
                          << ps->header.version_minor;
  }
  if (t.role == stream::kRolePosition) {
    CheckPosition(where, t, ps);
  } else {
    CheckState(where, t, i, ps);
  }
}

void CheckStatesDisjoint(const ParsedStream& ps) {
  for (const auto* list : {&ps.state_tensors, &ps.sram_state_tensors}) {
    std::vector<uint32_t> order = *list;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return ps.tensors[a].ddr_addr < ps.tensors[b].ddr_addr;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorDesc &a = ps.tensors[order[k - 1]], &b = ps.tensors[order[k]];
      if (uint64_t{a.ddr_addr} + Footprint(a) > b.ddr_addr) {
        NPU_THROW(kInvalidAddr) << "state tensors " << order[k - 1] << " and " << order[k]
                                << " overlap in the "
                                << (list == &ps.state_tensors ? "state region" : "SRAM state area");
      }
    }
  }
  std::vector<uint32_t> slots;
  for (uint32_t k : ps.state_tensors) slots.push_back(ps.tensors[k].io_index);
  for (uint32_t k : ps.sram_state_tensors) slots.push_back(ps.tensors[k].io_index);
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) {
    NPU_THROW(kBadStream) << "two state tensors of the stream have one slot (io_index)";
  }
}

bool CheckStateDma(const std::string& where, const stream::DmaOperands& op, bool load,
                   const ParsedStream& ps) {
  const uint64_t ddr = load ? op.src_addr : op.dst_addr;
  const uint64_t ddr_stride = load ? op.src_stride : op.dst_stride;
  if (ddr < ps.header.ddr_bytes || ps.state_tensors.empty()) return false;
  const uint64_t sram_addr = load ? op.dst_addr : op.src_addr;
  const uint64_t sram_stride = load ? op.dst_stride : op.src_stride;
  CheckBuffer(where, load ? "destination" : "source", sram_addr, op.rows, op.row_bytes, sram_stride,
              ps.config, "SRAM", 0, ps.config.sram_bytes);
  for (uint32_t k : ps.state_tensors) {
    const TensorDesc& t = ps.tensors[k];
    if (ddr < t.ddr_addr || ddr >= t.ddr_addr + Footprint(t)) continue;
    CheckBuffer(where, load ? "source" : "destination", ddr, op.rows, op.row_bytes, ddr_stride,
                ps.config, "its state tensor", t.ddr_addr, t.ddr_addr + Footprint(t));
    return true;
  }
  NPU_THROW(kInvalidAddr) << where << ": DDR address " << ddr << " is in the state region but in "
                          << "no state tensor";
}

void CheckSramStateArea(const std::string& where, const stream::Command& cmd,
                        const ParsedStream& ps) {
  const uint64_t top = ps.config.sram_bytes;
  const uint64_t area = top - std::min<uint64_t>(ps.header.sram_state_bytes, top);
  if (area == top) return;
  std::vector<ByteRange> ranges = SramReads(cmd, ps.config);
  ranges.push_back(SramWrites(cmd, top));
  for (const ByteRange& r : ranges) {
    if (r.end <= area || r.begin >= r.end) continue;
    const bool inside =
        std::any_of(ps.sram_state_tensors.begin(), ps.sram_state_tensors.end(), [&](uint32_t k) {
          const TensorDesc& t = ps.tensors[k];
          return r.begin >= t.ddr_addr && r.end <= uint64_t{t.ddr_addr} + Footprint(t);
        });
    if (!inside) {
      NPU_THROW(kInvalidAddr) << where << ": SRAM [" << r.begin << ", " << r.end
                              << ") reaches the SRAM state area [" << area << ", " << top
                              << ") outside its SRAM state tensors (the area is kept across "
                              << "calls: only an SRAM state tensor's rows live there)";
    }
  }
}

}  // namespace tvm_npu
