/*!
 * \file vector_checks.cc
 * \brief Load-time validation of the format-1.1 vector commands ELTWISE, UNARY, SOFTMAX
 *        (docs/npu.md section 6), with the same code rules as command_checks.cc: an undecodable field is
 *        ERR_BAD_STREAM, a footprint outside SRAM or an output overlapping an operand is
 *        ERR_INVALID_ADDR.
 */
#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <cmath>

#include "kernels/ref/ref_common.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

constexpr uint64_t kTwo31 = uint64_t{1} << 31;

void CheckIntEltwise(const std::string& where, const stream::EltwiseOperands& op) {
  // Each operand is int8 or int16 (format 1.2); its zero point, and the result's clamp, lie in the
  // range of its own dtype.
  const uint32_t dts[3] = {op.a_dtype, op.b_dtype, op.out_dtype};
  const uint32_t zps[3] = {op.a_zp, op.b_zp, op.out_zp};
  const char* names[3] = {"a", "b", "output"};
  int bits[3];
  for (int k = 0; k < 3; ++k) {
    const uint32_t dt = stream::OperandDType(dts[k], op.dtype);
    if (dt != stream::kInt8 && dt != stream::kInt16) {
      NPU_THROW(kBadStream) << where << ": " << names[k] << " dtype " << dts[k]
                            << " is not 0 (the command's), int8 (2) or int16 (5)";
    }
    const bool wide = dt == stream::kInt16;
    bits[k] = wide ? 16 : 8;
    if (!(wide ? ref::ValidInt16(ref::WrapI32(zps[k])) : ref::ValidInt8(ref::WrapI32(zps[k])))) {
      NPU_THROW(kBadStream) << where << ": " << names[k] << " zero point " << ref::WrapI32(zps[k])
                            << " outside the range of " << (wide ? "int16" : "int8");
    }
  }
  if (op.act != stream::kActNone) {
    NPU_THROW(kBadStream) << where << ": integer ops take act 0 (the activation is the clamp "
                          << "[clip_lo, clip_hi]), got " << op.act;
  }
  const int32_t lo = ref::WrapI32(op.clip_lo), hi = ref::WrapI32(op.clip_hi);
  const bool out16 = bits[2] == 16;
  if (!(out16 ? ref::ValidInt16(lo) && ref::ValidInt16(hi)
              : ref::ValidInt8(lo) && ref::ValidInt8(hi)) ||
      lo > hi) {
    NPU_THROW(kBadStream) << where << ": clamp [" << lo << ", " << hi << "] must satisfy lo <= hi "
                          << "within the range of the output's " << (out16 ? "int16" : "int8");
  }
  // Below 2^31 keeps every intermediate exact in int64 (section 2); multiply has one multiplier,
  // and with |a - z_a| < 2^k_a, |b - z_b| < 2^k_b it must stay below 2^(62 - k_a - k_b).
  const uint64_t mul_bound = std::min(kTwo31, uint64_t{1} << (62 - bits[0] - bits[1]));
  if (op.a_mult >= kTwo31 || op.b_mult >= kTwo31 ||
      (op.kind == stream::kEltMul && (op.b_mult != 0 || op.a_mult >= mul_bound))) {
    NPU_THROW(kBadStream) << where << ": multipliers " << op.a_mult << ", " << op.b_mult
                          << " must be below 2^31 (multiply: b_mult 0, a_mult below 2^"
                          << std::min(31, 62 - bits[0] - bits[1]) << " for these dtypes)";
  }
  CheckShift(where, op.shift);
}

}  // namespace

uint64_t EltwiseBRowElems(const stream::EltwiseOperands& op) {
  if (op.b_mode == stream::kBSame) return op.row_elems;
  return op.b_mode == stream::kBChannel ? op.channels : 1;
}

uint64_t EltwiseElemBytes(uint32_t own, const stream::EltwiseOperands& op) {
  return stream::DTypeBytes(stream::OperandDType(own, op.dtype));
}

void CheckEltwiseParams(const std::string& where, const stream::EltwiseOperands& op) {
  CheckDType(where, op.dtype);
  if (op.kind > stream::kEltMin) {
    NPU_THROW(kBadStream) << where << ": kind " << op.kind << " is not 0 add, 1 subtract, "
                          << "2 multiply, 3 maximum or 4 minimum";
  }
  if (op.b_mode > stream::kBScalar) {
    NPU_THROW(kBadStream) << where << ": b_mode " << op.b_mode
                          << " is not 0 (same shape), 1 (per channel) or 2 (scalar)";
  }
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
  if (op.b_mode == stream::kBChannel ? (op.channels == 0 || op.row_elems % op.channels != 0)
                                     : op.channels != 0) {
    NPU_THROW(kBadStream) << where << ": channels " << op.channels << " with b_mode " << op.b_mode
                          << " and row_elems " << op.row_elems << "; a per-channel b needs "
                          << "row_elems a multiple of channels, other modes channels 0";
  }
  if (op.dtype == stream::kFP16) {
    CheckFp16Epilogue(where, op.act,
                      {op.a_zp, op.b_zp, op.out_zp, op.a_mult, op.b_mult, op.shift, op.a_dtype,
                       op.b_dtype, op.out_dtype});
    return;
  }
  CheckIntEltwise(where, op);
}

void CheckUnaryParams(const std::string& where, const stream::UnaryOperands& op) {
  CheckDType(where, op.dtype);
  if (op.func > stream::kUnaryGeluTanh) {
    NPU_THROW(kBadStream) << where << ": func " << op.func << " is not 0 sigmoid, 1 tanh, "
                          << "2 hardswish, 3 gelu, 4 leaky relu, 5 silu or 6 gelu tanh";
  }
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
  if (op.dtype == stream::kInt8) {
    if (op.table_addr == stream::kNoTable || op.alpha != 0) {
      NPU_THROW(kBadStream) << where << ": an int8 UNARY needs its table at table_addr and "
                            << "alpha 0 (the table holds the function)";
    }
    return;
  }
  if (op.table_addr != stream::kNoTable) {
    NPU_THROW(kBadStream) << where << ": an fp16 UNARY has no table (table_addr 0xFFFFFFFF)";
  }
  const float alpha = ref::BitsToFloat(op.alpha);
  if (op.func == stream::kUnaryLeakyRelu ? !std::isfinite(alpha) : op.alpha != 0) {
    NPU_THROW(kBadStream) << where << ": alpha 0x" << std::hex << op.alpha << std::dec
                          << " must be a finite slope for leaky relu and 0 otherwise";
  }
}

void CheckEltwise(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::EltwiseOperands op = OperandsOf<stream::EltwiseOperands>(cmd);
  CheckEltwiseParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t b_rows = op.b_mode == stream::kBSame ? op.rows : 1;
  const uint64_t a_row = SatMul(op.row_elems, EltwiseElemBytes(op.a_dtype, op));
  const uint64_t b_row = SatMul(EltwiseBRowElems(op), EltwiseElemBytes(op.b_dtype, op));
  const uint64_t out_row = SatMul(op.row_elems, EltwiseElemBytes(op.out_dtype, op));
  CheckBinaryBuffers(where, c, op, a_row, b_rows, b_row, out_row);
}

void CheckUnary(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::UnaryOperands op = OperandsOf<stream::UnaryOperands>(cmd);
  CheckUnaryParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t row = SatMul(op.row_elems, stream::DTypeBytes(op.dtype));
  bool overlap = OutputOverlapsInputs(where, c, {{"input", op.in_addr, op.rows, row, op.in_stride}},
                                      {"output", op.out_addr, op.rows, row, op.out_stride});
  if (op.dtype == stream::kInt8) {
    CheckAligned(where, "table", op.table_addr, c.alignment);
    CheckRange(where, "table", op.table_addr, stream::kUnaryTableBytes, "SRAM", 0, c.sram_bytes);
    overlap = overlap || Overlaps(op.out_addr, uint64_t{op.rows} * op.out_stride, op.table_addr,
                                  stream::kUnaryTableBytes);
  }
  if (overlap) NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
}

void CheckRowIo(const std::string& where, uint32_t dtype, uint32_t in_zp, uint32_t in_scale,
                uint32_t out_zp, uint32_t out_scale) {
  if (dtype == stream::kFP16) {
    CheckFp16Epilogue(where, stream::kActNone, {in_zp, in_scale, out_zp, out_scale});
    return;
  }
  CheckInt8Epilogue(where, stream::kActNone, static_cast<uint32_t>(-128), 127, {in_zp, out_zp});
  for (uint32_t s : {in_scale, out_scale}) {
    if (!ref::ValidScale(ref::BitsToFloat(s))) {
      NPU_THROW(kBadStream) << where << ": scale 0x" << std::hex << s << std::dec << " ("
                            << ref::BitsToFloat(s) << ") must be a finite fp32 > 0";
    }
  }
}

void CheckSoftmaxParams(const std::string& where, const stream::SoftmaxOperands& op) {
  CheckDType(where, op.dtype);
  CheckRowIo(where, op.dtype, op.in_zp, op.in_scale, op.out_zp, op.out_scale);
  if (op.dtype == stream::kInt8 && op.pos_mode != 0) {
    NPU_THROW(kOpNotSupported) << where << ": a causal SOFTMAX (pos_mode " << op.pos_mode
                               << ") runs on fp16 only";
  }
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
  // Format 1.4: scale 0 means none; any other word is a finite fp32 factor (inf * 0 would be NaN).
  if (op.scale != 0 && !std::isfinite(ref::BitsToFloat(op.scale))) {
    NPU_THROW(kBadStream) << where << ": scale 0x" << std::hex << op.scale << std::dec
                          << " must be 0 (no scale) or the bits of a finite fp32 factor";
  }
  if (op.mask_rows == 0 && (op.mask_addr != 0 || op.mask_stride != 0 || op.mask_row0 != 0)) {
    NPU_THROW(kBadStream) << where << ": without a mask (mask_rows 0) mask_addr, mask_stride and "
                          << "mask_row0 must be 0";
  }
  if (op.pos_mode != 0 && op.mask_rows != 0) {  // format 1.4: the register gives the mask
    NPU_THROW(kBadStream) << where << ": a causal softmax (pos_mode 1) takes no mask (mask_rows "
                          << op.mask_rows << ")";
  }
  if (op.window != 0 && op.pos_mode == 0) {  // format 1.6: a band of the causal mask only
    NPU_THROW(kBadStream) << where << ": window " << op.window << " needs a causal softmax "
                          << "(pos_mode 1); a static mask goes in mask_rows";
  }
  if (op.mask_rows != 0 && op.mask_row0 >= op.mask_rows) {
    NPU_THROW(kBadStream) << where << ": mask_row0 " << op.mask_row0 << " must be below mask_rows "
                          << op.mask_rows;
  }
}

void CheckSoftmax(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::SoftmaxOperands op = OperandsOf<stream::SoftmaxOperands>(cmd);
  CheckSoftmaxParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t row = SatMul(op.row_elems, stream::DTypeBytes(op.dtype)),
                 mask_row = op.row_elems * 2;
  const SramRows out{"output", op.out_addr, op.rows, row, op.out_stride};
  bool overlap =
      OutputOverlapsInputs(where, c, {{"input", op.in_addr, op.rows, row, op.in_stride}}, out);
  if (op.mask_rows != 0) {  // format 1.4: mask_rows fp16 rows of row_elems, checked like an input
    overlap =
        OutputOverlapsInputs(
            where, c, {{"mask", op.mask_addr, op.mask_rows, mask_row, op.mask_stride}}, out) ||
        overlap;
  }
  if (overlap) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps its input or mask in SRAM";
  }
}

}  // namespace tvm_npu
