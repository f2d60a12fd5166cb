/*!
 * \file rope_checks.cc
 * \brief Load-time validation of ROPE (format 1.4, docs/npu.md section 6), with the code rules of
 *        command_checks.cc: an undecodable field is ERR_BAD_STREAM, what the unit cannot run is
 *        ERR_OP_NOT_SUPPORTED, a footprint outside SRAM or an output overlapping an operand is
 *        ERR_INVALID_ADDR.
 */
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {

void CheckRopeParams(const std::string& where, const stream::RopeOperands& op) {
  CheckDType(where, op.dtype);
  if (op.dtype != stream::kFP16) {
    NPU_THROW(kOpNotSupported) << where << ": ROPE runs on the fp16 datapath only; an int8 "
                               << "rotation has no requantization operands (keep it fp16)";
  }
  if (op.rows == 0 || op.row_elems == 0 || op.cs_rows == 0) {
    NPU_THROW(kBadStream) << where << ": a size is 0";
  }
  if (op.row_elems % 2 != 0) {
    NPU_THROW(kBadStream) << where << ": row_elems " << op.row_elems
                          << " is odd; the rotate-half form pairs element i with i + row_elems / 2";
  }
  if (op.cs_row0 >= op.cs_rows) {
    NPU_THROW(kBadStream) << where << ": cs_row0 " << op.cs_row0 << " is not below cs_rows "
                          << op.cs_rows;
  }
}

void CheckRope(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::RopeOperands op = OperandsOf<stream::RopeOperands>(cmd);
  CheckRopeParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t row = SatMul(op.row_elems, 2);
  if (OutputOverlapsInputs(where, c,
                           {{"input", op.in_addr, op.rows, row, op.in_stride},
                            {"cos", op.cos_addr, op.cs_rows, row, op.cs_stride},
                            {"sin", op.sin_addr, op.cs_rows, row, op.cs_stride}},
                           {"output", op.out_addr, op.rows, row, op.out_stride})) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps its input or a table in SRAM";
  }
}

}  // namespace tvm_npu
