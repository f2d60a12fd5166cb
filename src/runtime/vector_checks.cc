/*!
 * \file vector_checks.cc
 * \brief Load-time validation of the format-1.1 vector commands ELTWISE, UNARY, SOFTMAX
 *        (docs/npu.md section 6), with the same code rules as command_checks.cc: an undecodable field is
 *        ERR_BAD_STREAM, a footprint outside SRAM or an output overlapping an operand is
 *        ERR_INVALID_ADDR.
 */
#include <cmath>

#include "kernels/ref/ref_common.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

constexpr uint64_t kTwo31 = uint64_t{1} << 31;

// b's elements per row: the whole row, the channel vector, or one scalar.
uint64_t BRowElems(const stream::EltwiseOperands& op) {
  if (op.b_mode == stream::kBSame) return op.row_elems;
  return op.b_mode == stream::kBChannel ? op.channels : 1;
}

}  // namespace

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
    CheckFp16Epilogue(where, op.act, {op.a_zp, op.b_zp, op.out_zp, op.a_mult, op.b_mult, op.shift});
    return;
  }
  CheckInt8Epilogue(where, op.act, op.clip_lo, op.clip_hi, {op.a_zp, op.b_zp, op.out_zp});
  // Below 2^31 keeps every intermediate exact in int64 (section 2); multiply has one multiplier.
  if (op.a_mult >= kTwo31 || op.b_mult >= kTwo31 || (op.kind == stream::kEltMul && op.b_mult)) {
    NPU_THROW(kBadStream) << where << ": multipliers " << op.a_mult << ", " << op.b_mult
                          << " must be below 2^31 (b_mult 0 for multiply)";
  }
  CheckShift(where, op.shift);
}

void CheckUnaryParams(const std::string& where, const stream::UnaryOperands& op) {
  CheckDType(where, op.dtype);
  if (op.func > stream::kUnaryLeakyRelu) {
    NPU_THROW(kBadStream) << where << ": func " << op.func << " is not 0 sigmoid, 1 tanh, "
                          << "2 hardswish, 3 gelu or 4 leaky relu";
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
  const uint64_t sram = c.sram_bytes, elem = stream::DTypeBytes(op.dtype);
  const uint64_t row = SatMul(op.row_elems, elem);
  const uint64_t b_rows = op.b_mode == stream::kBSame ? op.rows : 1;
  CheckBuffer(where, "a", op.a_addr, op.rows, row, op.a_stride, c, "SRAM", 0, sram);
  CheckBuffer(where, "b", op.b_addr, b_rows, SatMul(BRowElems(op), elem), op.b_stride, c, "SRAM", 0,
              sram);
  CheckBuffer(where, "output", op.out_addr, op.rows, row, op.out_stride, c, "SRAM", 0, sram);
  const uint64_t out_bytes = uint64_t{op.rows} * op.out_stride;  // bounded by the checks above
  if (Overlaps(op.out_addr, out_bytes, op.a_addr, uint64_t{op.rows} * op.a_stride) ||
      Overlaps(op.out_addr, out_bytes, op.b_addr, b_rows * op.b_stride)) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
  }
}

void CheckUnary(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::UnaryOperands op = OperandsOf<stream::UnaryOperands>(cmd);
  CheckUnaryParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t sram = c.sram_bytes;
  const uint64_t row = SatMul(op.row_elems, stream::DTypeBytes(op.dtype));
  CheckBuffer(where, "input", op.in_addr, op.rows, row, op.in_stride, c, "SRAM", 0, sram);
  CheckBuffer(where, "output", op.out_addr, op.rows, row, op.out_stride, c, "SRAM", 0, sram);
  const uint64_t out_bytes = uint64_t{op.rows} * op.out_stride;
  bool overlap = Overlaps(op.out_addr, out_bytes, op.in_addr, uint64_t{op.rows} * op.in_stride);
  if (op.dtype == stream::kInt8) {
    CheckAligned(where, "table", op.table_addr, c.alignment);
    CheckRange(where, "table", op.table_addr, stream::kUnaryTableBytes, "SRAM", 0, sram);
    overlap = overlap || Overlaps(op.out_addr, out_bytes, op.table_addr, stream::kUnaryTableBytes);
  }
  if (overlap) NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
}

void CheckSoftmaxParams(const std::string& where, const stream::SoftmaxOperands& op) {
  CheckDType(where, op.dtype);
  if (op.dtype != stream::kFP16) {
    NPU_THROW(kOpNotSupported) << where << ": SOFTMAX runs on the fp16 datapath only; an int8 "
                               << "softmax needs exp and a division the integer datapath lacks";
  }
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
}

void CheckSoftmax(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::SoftmaxOperands op = OperandsOf<stream::SoftmaxOperands>(cmd);
  CheckSoftmaxParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t sram = c.sram_bytes, row = SatMul(op.row_elems, 2);
  CheckBuffer(where, "input", op.in_addr, op.rows, row, op.in_stride, c, "SRAM", 0, sram);
  CheckBuffer(where, "output", op.out_addr, op.rows, row, op.out_stride, c, "SRAM", 0, sram);
  if (Overlaps(op.out_addr, uint64_t{op.rows} * op.out_stride, op.in_addr,
               uint64_t{op.rows} * op.in_stride)) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps its input in SRAM";
  }
}

}  // namespace tvm_npu
