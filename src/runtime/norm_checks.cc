/*!
 * \file norm_checks.cc
 * \brief Load-time validation of NORM (format 1.4, docs/npu.md section 6), with the code rules of
 *        command_checks.cc: an undecodable field is ERR_BAD_STREAM, what the unit cannot run is
 *        ERR_OP_NOT_SUPPORTED, a footprint outside SRAM or an output overlapping an operand is
 *        ERR_INVALID_ADDR.
 */
#include <cmath>

#include "kernels/ref/ref_common.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {

void CheckNormParams(const std::string& where, const stream::NormOperands& op) {
  CheckDType(where, op.dtype);
  CheckRowIo(where, op.dtype, op.in_zp, op.in_scale, op.out_zp, op.out_scale);
  if (op.kind > stream::kNormRms) {
    NPU_THROW(kBadStream) << where << ": kind " << op.kind << " is not 0 layernorm or 1 rmsnorm";
  }
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
  if (op.kind == stream::kNormRms && op.beta_addr != stream::kNoParam) {
    NPU_THROW(kBadStream) << where << ": an rmsnorm has no shift (beta_addr 0xFFFFFFFF)";
  }
  const float eps = ref::BitsToFloat(op.eps);
  if (!std::isfinite(eps) || eps < 0.0f) {
    NPU_THROW(kBadStream) << where << ": eps 0x" << std::hex << op.eps << std::dec
                          << " must be the fp32 bits of a finite value >= 0";
  }
}

void CheckNorm(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::NormOperands op = OperandsOf<stream::NormOperands>(cmd);
  CheckNormParams(where, op);
  CheckVectorConfig(where, c);
  if (op.row_elems > c.max_width) {
    NPU_THROW(kOpNotSupported) << where << ": a row of " << op.row_elems << " elements is longer "
                               << "than max_width " << c.max_width << "; the vector unit keeps "
                               << "one row's statistics (split the row or use a wider config)";
  }
  const uint64_t row = SatMul(op.row_elems, stream::DTypeBytes(op.dtype));
  // gamma and beta: one row of fp32 each, its footprint padded to the alignment.
  const uint64_t prm = SatMul(op.row_elems, 4);
  const uint64_t prm_span = (prm + c.alignment - 1) / c.alignment * c.alignment;  // prm < 2^34
  const SramRows input{"input", op.in_addr, op.rows, row, op.in_stride};
  const SramRows output{"output", op.out_addr, op.rows, row, op.out_stride};
  const SramRows gamma{"gamma", op.gamma_addr, 1, prm, prm_span};
  const SramRows beta{"beta", op.beta_addr, 1, prm, prm_span};
  const bool has_g = op.gamma_addr != stream::kNoParam, has_b = op.beta_addr != stream::kNoParam;
  bool overlap;
  if (has_g && has_b) {
    overlap = OutputOverlapsInputs(where, c, {input, gamma, beta}, output);
  } else if (has_g || has_b) {
    overlap = OutputOverlapsInputs(where, c, {input, has_g ? gamma : beta}, output);
  } else {
    overlap = OutputOverlapsInputs(where, c, {input}, output);
  }
  if (overlap) NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
}

}  // namespace tvm_npu
