/*!
 * \file stream_parser.cc
 * \brief Validation at load (docs/npu.md section 6): a damaged stream is refused with a code,
 *        never executed.
 *
 * Order of checks: header, sizes (so a truncated blob says "truncated"), CRC (so a damaged blob
 * says "crc mismatch" rather than some field error), configuration, tensor table, commands.
 */
#include "runtime/stream_parser.h"

#include <cmath>
#include <cstddef>
#include <sstream>
#include <string>

#include "runtime/command_checks.h"
#include "runtime/npu_error.h"
#include "runtime/position.h"
#include "runtime/state_checks.h"

namespace tvm_npu {
namespace {

using stream::Command;
using stream::TensorDesc;

void CheckHeader(const stream::Header& h, size_t size) {
  if (h.magic != stream::kMagic) {
    NPU_THROW(kBadStream) << "bad magic 0x" << std::hex << h.magic << ", expected 0x"
                          << stream::kMagic << " (\"NPUS\"); this is not an NPU command stream";
  }
  // Minor versions only append operands whose 0 keeps the older meaning: read any minor up to ours.
  if (h.version_major != stream::kVersionMajor || h.version_minor > stream::kVersionMinor) {
    NPU_THROW(kBadStream) << "stream version " << h.version_major << "." << h.version_minor
                          << ", this runtime reads " << stream::kVersionMajor << ".0 to "
                          << stream::kVersionMajor << "." << stream::kVersionMinor
                          << "; recompile the model with this tvm_npu, or update the runtime";
  }
  // One message per field: a combined check once reported a non-zero reserved word as
  // "header_bytes must be 64 ... (got 64, flags 0)".
  if (h.header_bytes != stream::kHeaderBytes) {
    NPU_THROW(kBadStream) << "header_bytes is " << h.header_bytes << ", must be "
                          << stream::kHeaderBytes;
  }
  // Word 3 was `flags` (no flag defined, 0) before format 1.5 gave it to the SRAM state area.
  if (h.sram_state_bytes != 0 && h.version_minor < stream::kSramStateMinor) {
    NPU_THROW(kBadStream) << "header word 3 (sram_state_bytes, formerly flags) is "
                          << h.sram_state_bytes << ", must be 0 (the SRAM state area needs stream "
                          << "format 1." << stream::kSramStateMinor << ", the stream says 1."
                          << h.version_minor << ")";
  }
  // Words 14-15 were reserved (0) before format 1.4 gave them to the state region.
  if ((h.state_bytes != 0 || h.state_space != 0) && h.version_minor < stream::kLlmMinor) {
    NPU_THROW(kBadStream) << "reserved header word " << (h.state_bytes != 0 ? 14 : 15) << " is "
                          << (h.state_bytes != 0 ? h.state_bytes : h.state_space)
                          << ", must be 0 (state_bytes / state_space need stream format 1."
                          << stream::kLlmMinor << ", the stream says 1." << h.version_minor << ")";
  }
  if (uint64_t{h.ddr_bytes} + h.state_bytes > (uint64_t{1} << 32)) {
    NPU_THROW(kInvalidAddr) << "ddr_bytes " << h.ddr_bytes << " + state_bytes " << h.state_bytes
                            << " pass the 2^32 bytes a 32-bit DDR address reaches";
  }
  if (h.qparams_offset != 0 && h.version_minor < stream::kQuantIoMinor) {
    NPU_THROW(kBadStream) << "header word 13 (qparams_offset) is " << h.qparams_offset
                          << ": a quantization table needs stream format 1."
                          << stream::kQuantIoMinor << ", the stream says 1." << h.version_minor
                          << " (a reserved word there)";
  }
  const uint64_t tables_end = stream::kTensorTableOffset +
                              uint64_t{stream::kTensorBytes} * h.num_tensors +
                              uint64_t{stream::kCommandBytes} * h.num_commands;
  if (h.weights_offset % stream::kWeightsAlignment != 0 || h.weights_offset < tables_end) {
    NPU_THROW(kBadStream) << "weights_offset " << h.weights_offset
                          << " must be 128-aligned and at or after the command table end "
                          << tables_end;
  }
  if (h.qparams_offset != 0 &&
      (h.qparams_offset % 4 != 0 || h.qparams_offset < tables_end ||
       h.qparams_offset + uint64_t{stream::kQParamsBytes} * h.num_tensors > h.weights_offset)) {
    NPU_THROW(kBadStream) << "quantization table at " << h.qparams_offset << " (" << h.num_tensors
                          << " entries of 8 bytes) must be 4-byte aligned and lie "
                          << "between the command table end " << tables_end
                          << " and weights_offset " << h.weights_offset;
  }
  const uint64_t expected = uint64_t{h.weights_offset} + h.weights_bytes;
  if (size != expected) {
    NPU_THROW(kBadStream) << (size < expected ? "truncated" : "trailing bytes") << ": blob has "
                          << size << " bytes, the header describes " << expected;
  }
  if (h.num_commands == 0) NPU_THROW(kBadStream) << "no commands: a stream ends with END";
  // Bounds the I/O tables the parser allocates by the (size-checked) tensor table.
  if (uint64_t{h.num_inputs} + h.num_outputs > h.num_tensors) {
    NPU_THROW(kBadStream) << h.num_inputs << " inputs and " << h.num_outputs
                          << " outputs need more than the " << h.num_tensors
                          << " tensor descriptors";
  }
  if (h.ddr_bytes < h.weights_bytes) {
    NPU_THROW(kBadStream) << "ddr_bytes " << h.ddr_bytes << " is less than weights_bytes "
                          << h.weights_bytes;
  }
}

void CheckConfig(const NPUConfig& c, const stream::Header& h) {
  const std::pair<const char*, uint32_t> nonzero[] = {
      {"mac_rows", c.mac_rows},           {"mac_cols", c.mac_cols},
      {"fp16_rate_div", c.fp16_rate_div}, {"sram_bytes", c.sram_bytes},
      {"sram_banks", c.sram_banks},       {"ddr_bytes_per_cycle", c.ddr_bytes_per_cycle},
      {"burst_bytes", c.burst_bytes},     {"alignment", c.alignment},
      {"max_tensors", c.max_tensors}};
  for (const auto& [name, value] : nonzero) {
    if (value == 0) NPU_THROW(kBadStream) << "configuration field " << name << " is 0";
  }
  // Word 0 has wait fields for two DMA channels only; a descriptor has room for rank 4.
  if (c.dma_channels < 1 || c.dma_channels > 2 || c.max_rank < 1 || c.max_rank > 4) {
    NPU_THROW(kBadStream) << "configuration: dma_channels must be 1..2 and max_rank 1..4 (got "
                          << c.dma_channels << ", " << c.max_rank << ")";
  }
  if (h.num_tensors > c.max_tensors) {
    NPU_THROW(kTaskTooComplex) << "the stream references " << h.num_tensors
                               << " tensors, the NPU allows " << c.max_tensors
                               << "; split the region into smaller tasks";
  }
  if (h.sram_state_bytes > c.sram_bytes || h.sram_state_bytes % c.alignment != 0) {
    NPU_THROW(kBadStream) << "sram_state_bytes " << h.sram_state_bytes << " must be a multiple of "
                          << "the alignment " << c.alignment << " and at most sram_bytes "
                          << c.sram_bytes;
  }
  if (uint64_t{h.sram_bytes_used} + h.sram_state_bytes > c.sram_bytes) {
    NPU_THROW(kSramOverflow) << "the stream uses " << h.sram_bytes_used << " bytes of SRAM next "
                             << "to its SRAM state area of " << h.sram_state_bytes
                             << " bytes, the budget is " << c.sram_bytes
                             << "; tile the region smaller";
  }
}

// The device view an I/O tensor's host shape implies (docs/npu.md section 6, host_layout).
bool ViewMatchesHost(const TensorDesc& t) {
  const uint32_t* s = t.host_shape;
  switch (t.host_layout) {
    case stream::kLayoutNHWC:
      return t.host_rank == 4 && t.view[0] == s[0] && t.view[1] == s[1] && t.view[2] == s[2] &&
             t.view[3] == s[3];
    case stream::kLayoutNCHW:
      return t.host_rank == 4 && t.view[0] == s[0] && t.view[1] == s[2] && t.view[2] == s[3] &&
             t.view[3] == s[1];
    case stream::kLayoutRows: {
      uint64_t rows = 1;
      for (uint32_t i = 0; i + 1 < t.host_rank; ++i) rows = SatMul(rows, s[i]);
      return t.view[0] == 1 && t.view[1] == rows && t.view[2] == 1 &&
             t.view[3] == s[t.host_rank - 1];
    }
    default: return false;
  }
}

// A quantized scale is finite and positive, a zero point in the device dtype's range (int16: 0).
void CheckQParams(const std::string& where, const TensorDesc& t, const stream::QParams& q) {
  const bool scale_ok = std::isfinite(q.scale) && q.scale > 0.0f;
  const bool zp_ok =
      t.dtype == stream::kInt8 ? q.zero_point >= -128 && q.zero_point <= 127 : q.zero_point == 0;
  if (!scale_ok || !zp_ok) {
    NPU_THROW(kBadStream) << where << ": quantized staging with scale " << q.scale
                          << " and zero point " << q.zero_point << "; the scale must be finite and "
                          << "> 0, the zero point within -128..127 (int8) or 0 (int16)";
  }
}

void CheckIoTensor(const std::string& where, const TensorDesc& t, const ParsedStream& ps,
                   const stream::QParams* q) {
  // fp32 on the host staged as fp16, int8 / int16 on both sides (the runtime only re-lays it out),
  // or fp32 on the host quantized to int8 / int16 (format 1.3).
  const bool fp = t.host_dtype == stream::kFP32 && t.dtype == stream::kFP16;
  const bool integer = t.dtype == stream::kInt8 || t.dtype == stream::kInt16;
  const bool same_int = t.host_dtype == t.dtype && integer;
  const bool quant = t.host_dtype == stream::kFP32 && integer;
  if (!fp && !same_int && !quant) {
    NPU_THROW(kOpNotSupported) << where << ": host dtype " << t.host_dtype << " with device dtype "
                               << t.dtype << "; an input or output is fp32 (4) on the host and "
                               << "fp16 (1) on the device, int8 (2) or int16 (5) on both, or fp32 "
                               << "on the host and int8 or int16 on the device (format 1.3)";
  }
  if (quant) {
    if (ps.header.version_minor < stream::kQuantIoMinor) {
      NPU_THROW(kBadStream) << where << ": fp32 on the host and an integer dtype on the device "
                            << "(quantized staging) needs stream format 1." << stream::kQuantIoMinor
                            << ", the stream says 1." << ps.header.version_minor;
    }
    if (q == nullptr) {
      NPU_THROW(kBadStream) << where << ": quantized staging needs the quantization table "
                            << "(qparams_offset is 0)";
    }
    CheckQParams(where, t, *q);
  }
  const NPUConfig& c = ps.config;
  if (t.host_rank < 1 || t.host_rank > c.max_rank) {
    NPU_THROW(kBadStream) << where << ": host rank " << t.host_rank << " outside 1.." << c.max_rank;
  }
  for (uint32_t i = 0; i < 4; ++i) {
    if ((i < t.host_rank) != (t.host_shape[i] != 0)) {
      NPU_THROW(kBadStream) << where << ": host_shape must have " << t.host_rank
                            << " non-zero entries followed by zeros";
    }
  }
  if (!ViewMatchesHost(t)) {
    NPU_THROW(kBadStream) << where << ": device view does not match host shape and layout "
                          << t.host_layout;
  }
}

void CheckTensors(ParsedStream* ps) {
  const stream::Header& h = ps->header;
  const NPUConfig& c = ps->config;
  ps->inputs.assign(h.num_inputs, stream::kNoIoIndex);
  ps->outputs.assign(h.num_outputs, stream::kNoIoIndex);
  for (size_t i = 0; i < ps->tensors.size(); ++i) {
    const TensorDesc& t = ps->tensors[i];
    const bool is_io = t.role == stream::kRoleInput || t.role == stream::kRoleOutput;
    const std::string where = Where("tensor", i, std::string("role ") + std::to_string(t.role));
    if (t.role < stream::kRoleInput || t.role > stream::kRoleSramState) {
      NPU_THROW(kBadStream) << where << ": unknown role";
    }
    if (t.role == stream::kRoleState || t.role == stream::kRolePosition ||
        t.role == stream::kRoleSramState) {
      CheckStateOrPosition(where, i, ps);  // format 1.4 (an SRAM state tensor: 1.5)
      continue;
    }
    if (t.dtype == stream::kInt64 || t.host_dtype == stream::kInt64) {
      NPU_THROW(kBadStream) << where << ": dtype int64 is a position's host dtype only";
    }
    const uint32_t elem = stream::DTypeBytes(t.dtype);
    if (elem == 0) NPU_THROW(kBadStream) << where << ": unknown dtype " << t.dtype;
    if ((t.dtype == stream::kInt16 || t.host_dtype == stream::kInt16) &&
        h.version_minor < stream::kInt16Minor) {
      NPU_THROW(kBadStream) << where << ": dtype int16 needs stream format 1."
                            << stream::kInt16Minor << ", the stream says 1." << h.version_minor;
    }
    for (uint32_t d : t.view) {
      if (d == 0) NPU_THROW(kBadStream) << where << ": view has a zero dimension";
    }
    const stream::QParams* q = ps->qparams.empty() ? nullptr : &ps->qparams[i];
    if (is_io) {
      CheckIoTensor(where, t, *ps, q);
      std::vector<uint32_t>& slots = t.role == stream::kRoleInput ? ps->inputs : ps->outputs;
      if (t.io_index >= slots.size() || slots[t.io_index] != stream::kNoIoIndex) {
        NPU_THROW(kBadStream) << where << ": io_index " << t.io_index
                              << " is out of range or used twice (num_inputs " << h.num_inputs
                              << ", num_outputs " << h.num_outputs << ")";
      }
      slots[t.io_index] = static_cast<uint32_t>(i);
    } else if (t.io_index != stream::kNoIoIndex) {
      NPU_THROW(kBadStream) << where << ": a weight or bias must have io_index 0xFFFFFFFF";
    }
    uint32_t scale_bits = 0;
    if (q != nullptr) std::memcpy(&scale_bits, &q->scale, sizeof(scale_bits));
    if (q != nullptr && !IsQuantized(t) && (scale_bits != 0 || q->zero_point != 0)) {
      NPU_THROW(kBadStream) << where << ": its quantization table entry must be two zero words "
                            << "(it is not staged with quantization)";
    }
    // I/O lives in the per-call activation region; weights and biases in the weight region.
    const uint64_t lo = is_io ? h.weights_bytes : 0;
    const uint64_t hi = is_io ? h.ddr_bytes : h.weights_bytes;
    CheckBuffer(where, "tensor", t.ddr_addr, SatMul(t.view[0], t.view[1]),
                SatMul(SatMul(t.view[2], t.view[3]), elem), t.row_stride, c,
                is_io ? "the DDR activation region" : "the DDR weight region", lo, hi);
  }
  CheckStatesDisjoint(*ps);
  for (const auto* slots : {&ps->inputs, &ps->outputs}) {
    for (size_t k = 0; k < slots->size(); ++k) {
      if ((*slots)[k] == stream::kNoIoIndex) {
        NPU_THROW(kBadStream) << (slots == &ps->inputs ? "input " : "output ") << k
                              << " has no tensor descriptor";
      }
    }
  }
}

// The operand words a command of `opcode` uses; the words after them must be 0. A 1.1 stream has
// 21 ELTWISE operands: its words 22..24 fall under that zero check (a 1.3 SOFTMAX: words 8..12).
uint32_t UsedOperandWords(uint32_t opcode, uint32_t version_minor) {
  switch (opcode) {
    case stream::kDmaLoad:
    case stream::kDmaStore:  // pos_mode: format 1.4
      return version_minor < stream::kLlmMinor ? stream::kDmaOperandWords13
                                               : stream::kDmaOperandWords;
    case stream::kConv2D:  // w_dtype: format 1.4
      return version_minor < stream::kLlmMinor ? stream::kConv2DOperandWords13
                                               : stream::kConv2DOperandWords;
    case stream::kAdd: return stream::kAddOperandWords;
    case stream::kPool: return stream::kPoolOperandWords;
    case stream::kEltwise:
      return version_minor < stream::kInt16Minor ? stream::kEltwiseOperandWords11
                                                 : stream::kEltwiseOperandWords;
    case stream::kUnary: return stream::kUnaryOperandWords;
    case stream::kSoftmax:  // scale and mask: format 1.4
      if (version_minor < stream::kLlmMinor) return stream::kSoftmaxOperandWords13;
      return version_minor < stream::kBandMinor ? stream::kSoftmaxOperandWords15
                                                : stream::kSoftmaxOperandWords;  // window: 1.6
    case stream::kNorm: return stream::kNormOperandWords;
    case stream::kGnStats: return stream::kGnStatsOperandWords;  // format 1.7
    case stream::kGnApply: return stream::kGnApplyOperandWords;
    case stream::kMatmul: return stream::kMatmulOperandWords;
    case stream::kRope: return stream::kRopeOperandWords;
    default: return 0;  // END
  }
}

// One command's operands (with pos_mode: its effective operands at some position).
// `what` came in stream format 1.`minor`: a stream that says an older minor may not carry it (a reader of
// that minor would refuse it as unknown).
void RequireMinor(const std::string& where, const std::string& what, uint32_t minor,
                  const ParsedStream& ps) {
  if (ps.header.version_minor < minor) {
    NPU_THROW(kBadStream) << where << ": " << what << " needs stream format 1." << minor
                          << ", the stream says 1." << ps.header.version_minor;
  }
}

std::string OpcodeText(uint32_t opcode) {
  std::ostringstream text;
  text << "opcode 0x" << std::hex << opcode;
  return text.str();
}

void CheckCommand(const Command& cmd, size_t i, const ParsedStream& ps) {
  const size_t n = ps.commands.size();
  const uint32_t opcode = cmd.opcode();
  const std::string where = Where("command", i, stream::OpcodeName(opcode));
  switch (opcode) {
    case stream::kEnd:
      if (i + 1 != n) NPU_THROW(kBadStream) << where << ": END before the last command";
      break;
    case stream::kDmaLoad:
    case stream::kDmaStore: CheckDma(where, cmd, ps); break;
    case stream::kConv2D: CheckConv2D(where, cmd, ps.config); break;
    case stream::kAdd: CheckAdd(where, cmd, ps.config); break;
    case stream::kPool: CheckPool(where, cmd, ps.config); break;
    case stream::kEltwise:
    case stream::kUnary:
    case stream::kSoftmax:
      RequireMinor(where, OpcodeText(opcode), stream::kVectorOpsMinor, ps);
      if (opcode == stream::kEltwise) CheckEltwise(where, cmd, ps.config);
      if (opcode == stream::kUnary) {
        const uint32_t func = OperandsOf<stream::UnaryOperands>(cmd).func;
        if (func >= stream::kUnarySilu && func <= stream::kUnaryGeluTanh) {  // silu, gelu tanh: 1.4
          RequireMinor(where, "func " + std::to_string(func), stream::kLlmMinor, ps);
        }
        CheckUnary(where, cmd, ps.config);
      }
      if (opcode == stream::kSoftmax) CheckSoftmax(where, cmd, ps.config);
      break;
    case stream::kNorm:
    case stream::kMatmul:
    case stream::kRope:
      RequireMinor(where, OpcodeText(opcode), stream::kLlmMinor, ps);
      if (opcode == stream::kNorm) CheckNorm(where, cmd, ps.config);
      if (opcode == stream::kMatmul) CheckMatmul(where, cmd, ps.config, ps.header.version_minor);
      if (opcode == stream::kRope) CheckRope(where, cmd, ps.config);
      break;
    case stream::kGnStats:
    case stream::kGnApply:
      RequireMinor(where, OpcodeText(opcode), stream::kGroupNormMinor, ps);
      if (opcode == stream::kGnStats) CheckGnStats(where, cmd, ps.config);
      if (opcode == stream::kGnApply) CheckGnApply(where, cmd, ps.config);
      break;
    default: NPU_THROW(kBadStream) << where << ": unknown opcode 0x" << std::hex << opcode;
  }
  CheckSramStateArea(where, cmd, ps);  // format 1.5: only SRAM state tensors in the area
}

void CheckCommands(ParsedStream* out) {
  const ParsedStream& ps = *out;
  const size_t n = ps.commands.size();
  bool dynamic = false;
  for (size_t i = 0; i < n; ++i) {
    const Command& cmd = ps.commands[i];
    const uint32_t opcode = cmd.opcode();
    const std::string where = Where("command", i, stream::OpcodeName(opcode));
    if ((cmd.words[0] >> 24) != 0) {
      NPU_THROW(kBadStream) << where << ": word 0 = 0x" << std::hex << cmd.words[0]
                            << " has bits 24-31 set; only opcode and the 4 wait fields exist";
    }
    // The unused-word check below refuses a pos_mode in a stream that says 1.3 or older.
    CheckPosMode(where, cmd);
    const uint32_t mode = PosModeOf(cmd);
    if ((mode & 4u) != 0) {
      RequireMinor(where, "pos_mode " + std::to_string(mode) + " (bit 2)", stream::kSramStateMinor,
                   ps);
    }
    if (mode != 0 && ps.position_input < 0) {
      NPU_THROW(kBadStream) << where << ": pos_mode " << mode << " in a stream without a position "
                            << "input (a tensor descriptor of role position)";
    }
    dynamic = dynamic || mode != 0;
    CheckCommand(Resolve(cmd, 0), i, ps);
    const uint32_t used = UsedOperandWords(opcode, ps.header.version_minor);
    for (uint32_t k = 1 + used; k < stream::kCommandWords; ++k) {
      if (cmd.words[k] != 0) {
        NPU_THROW(kBadStream) << where << ": unused operand word " << k << " is not 0";
      }
    }
  }
  if (ps.commands.back().opcode() != stream::kEnd) {
    NPU_THROW(kBadStream) << "the last command must be END; the stream may be truncated";
  }
  CheckGnRecords(ps.commands);  // format 1.7: each record set started before it is read
  out->widest = ps.commands;
  if (!dynamic) return;
  out->position_limit = FindPositionLimit(
      ps.commands, [&](const Command& c, size_t i) { CheckCommand(c, i, ps); },
      &out->position_limit_reason);
  out->widest = ResolveAll(ps.commands, out->position_limit);
}

}  // namespace

uint32_t Crc32(const uint8_t* data, size_t size) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

ParsedStream ParseStream(const uint8_t* data, size_t size) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "streams are little-endian");
  ParsedStream ps;
  if (data == nullptr || size < stream::kHeaderBytes + stream::kConfigBytes) {
    NPU_THROW(kBadStream) << "truncated: " << size << " bytes, a stream has at least "
                          << stream::kHeaderBytes + stream::kConfigBytes;
  }
  std::memcpy(&ps.header, data, sizeof(ps.header));
  const stream::Header& h = ps.header;
  CheckHeader(h, size);  // from here on every table lies inside the blob
  const uint32_t crc = Crc32(data + stream::kHeaderBytes, size - stream::kHeaderBytes);
  if (crc != h.crc32) {
    NPU_THROW(kBadStream) << "crc mismatch: header says 0x" << std::hex << h.crc32
                          << ", the bytes give 0x" << crc << "; the artifact is damaged";
  }
  std::memcpy(&ps.config, data + stream::kConfigOffset, sizeof(ps.config));
  CheckConfig(ps.config, h);
  ps.tensors.resize(h.num_tensors);
  if (h.num_tensors > 0) {
    std::memcpy(ps.tensors.data(), data + stream::kTensorTableOffset,
                sizeof(stream::TensorDesc) * h.num_tensors);
  }
  ps.commands.resize(h.num_commands);
  std::memcpy(ps.commands.data(),
              data + stream::kTensorTableOffset + size_t{stream::kTensorBytes} * h.num_tensors,
              sizeof(stream::Command) * h.num_commands);
  ps.weights = data + h.weights_offset;
  if (h.qparams_offset != 0) {
    ps.qparams.resize(h.num_tensors);
    if (h.num_tensors > 0) {
      std::memcpy(ps.qparams.data(), data + h.qparams_offset,
                  sizeof(stream::QParams) * h.num_tensors);
    }
  }
  CheckTensors(&ps);
  CheckCommands(&ps);
  return ps;
}

}  // namespace tvm_npu
