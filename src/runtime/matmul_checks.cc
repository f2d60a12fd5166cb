/*!
 * \file matmul_checks.cc
 * \brief Load-time validation of MATMUL (format 1.4; head slices 1.8, docs/npu.md section 6), with the code rules of
 *        command_checks.cc: an undecodable field is ERR_BAD_STREAM, a datapath the NPU lacks
 *        ERR_OP_NOT_SUPPORTED, a footprint outside SRAM or an output overlapping an operand
 *        ERR_INVALID_ADDR.
 */
#include <tvm_npu/operand_rules.h>

#include <cstdlib>

#include "kernels/ref/ref_common.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

// One operand of every batch: `batches` blocks of `rows` rows, `bstride` bytes apart. Each block is
// checked as a 2-D buffer; the batch stride must keep blocks apart (a block may not overlap the next)
// or, format 1.8, interleave them within a row: attention's heads, each its columns of every row.
struct Batched {
  const char* what;
  uint64_t addr, batches, rows, row_bytes, stride, bstride;
  // One past the last byte of the last batch's last row (rows >= 1: checked first).
  uint64_t end() const { return addr + (batches - 1) * bstride + (rows - 1) * stride + row_bytes; }
  bool interleaved() const {
    return bstride >= row_bytes && (batches - 1) * bstride + row_bytes <= stride;
  }
};

void CheckBatched(const std::string& where, const NPUConfig& c, const Batched& t, bool heads) {
  // Format 1.8's head slices: addresses and batch strides on one SRAM beat, row strides as before.
  const uint32_t start = heads ? stream::kSliceAlignment : c.alignment;
  CheckBuffer(where, t.what, t.addr, t.rows, t.row_bytes, t.stride, c, "SRAM", 0, c.sram_bytes,
              false, start);
  if (t.batches > 1) {
    CheckAligned(where, t.what, t.bstride, start);
    if (t.bstride < SatMul(t.rows, t.stride) && !(heads && t.interleaved())) {
      NPU_THROW(kBadStream) << where << ": " << t.what << " batch stride " << t.bstride
                            << " is below one batch's " << t.rows << " rows x " << t.stride
                            << " bytes";
    }
    // The last batch's block, within SRAM too (sizes are bounded: no wrap-around below 2^64).
    CheckRange(where, t.what, t.addr, SatMul(t.batches - 1, t.bstride) + t.rows * t.stride, "SRAM",
               0, c.sram_bytes);
  }
}

// The int8 form (docs/npu.md section 2): zero points within int8, S a finite fp32 > 0, and a k whose
// int32 sum of (a - a_zp) * (b - b_zp) cannot wrap (|q - z| <= 128 + |z|). fp16 leaves them all 0.
void CheckMatmulQuant(const std::string& where, const stream::MatmulOperands& op) {
  if (op.dtype == stream::kFP16) {
    CheckFp16Epilogue(where, stream::kActNone, {op.a_zp, op.b_zp, op.out_zp, op.scale});
    return;
  }
  for (uint32_t zp : {op.a_zp, op.b_zp, op.out_zp}) {
    if (!ref::ValidInt8(ref::WrapI32(zp))) {
      NPU_THROW(kBadStream) << where << ": zero point " << ref::WrapI32(zp) << " outside -128..127";
    }
  }
  if (!ref::ValidScale(ref::BitsToFloat(op.scale))) {
    NPU_THROW(kBadStream) << where << ": scale 0x" << std::hex << op.scale << std::dec << " ("
                          << ref::BitsToFloat(op.scale) << ") must be a finite fp32 > 0";
  }
  const uint64_t ma = 128 + std::abs(int64_t{ref::WrapI32(op.a_zp)});
  const uint64_t mb = 128 + std::abs(int64_t{ref::WrapI32(op.b_zp)});
  if (SatMul(SatMul(op.k, ma), mb) >= (uint64_t{1} << 31)) {
    NPU_THROW(kOpNotSupported) << where << ": an int8 MATMUL's k " << op.k << " times "
                               << "(128 + |a_zp|) * (128 + |b_zp|) = " << ma * mb
                               << " could leave its int32 accumulator (at most 2^31 - 1)";
  }
}

}  // namespace

void CheckMatmulParams(const std::string& where, const stream::MatmulOperands& op) {
  CheckDType(where, op.dtype);
  if (op.batch == 0 || op.m == 0 || op.k == 0 || op.n == 0) {
    NPU_THROW(kBadStream) << where << ": a size is 0 (batch " << op.batch << ", m " << op.m
                          << ", k " << op.k << ", n " << op.n << ")";
  }
  if (op.b_group == 0) NPU_THROW(kBadStream) << where << ": b_group is 0 (at least 1)";
  // An int8 B (an int8 KV cache) under fp16 A: codes and one fp32 scale per B batch.
  if (op.b_dtype != 0 && op.b_dtype != stream::kInt8) {
    NPU_THROW(kBadStream) << where << ": b_dtype " << op.b_dtype << " is neither 0 nor int8 (2)";
  }
  if (op.b_dtype != 0 && op.dtype != stream::kFP16) {
    NPU_THROW(kOpNotSupported)
        << where << ": b_dtype " << op.b_dtype
        << " under an int8 MATMUL: an int8 B with a scale per batch is the fp16 "
           "form's (an int8 MATMUL's B is int8 by its dtype)";
  }
  if (op.b_dtype == 0 && op.b_scale_addr != 0) {
    NPU_THROW(kBadStream) << where << ": b_scale_addr " << op.b_scale_addr
                          << " without an int8 B (b_dtype 0)";
  }
  if (op.b_transposed > 1) {
    NPU_THROW(kBadStream) << where << ": b_transposed " << op.b_transposed << " is not 0 or 1";
  }
  CheckMatmulQuant(where, op);
}

void CheckMatmul(const std::string& where, const stream::Command& cmd, const NPUConfig& c,
                 uint32_t version_minor) {
  const stream::MatmulOperands op = OperandsOf<stream::MatmulOperands>(cmd);
  CheckMatmulParams(where, op);
  const uint64_t b_batches = (uint64_t{op.batch} - 1) / op.b_group + 1;
  const uint64_t b_rows = op.b_transposed ? op.n : op.k, b_cols = op.b_transposed ? op.k : op.n;
  const uint64_t elem = op.dtype == stream::kFP16 ? 2 : 1;
  const uint64_t b_elem = op.b_dtype == stream::kInt8 ? 1 : elem;
  const Batched a{"a", op.a_addr, op.batch, op.m, uint64_t{op.k} * elem, op.a_stride, op.a_bstride};
  const Batched b{"b", op.b_addr, b_batches, b_rows, b_cols * b_elem, op.b_stride, op.b_bstride};
  const Batched out{"output",      op.out_addr,   op.batch, op.m, uint64_t{op.n} * elem,
                    op.out_stride, op.out_bstride};
  const bool heads = version_minor >= stream::kHeadSlicesMinor;
  for (const Batched& t : {a, b, out}) CheckBatched(where, c, t, heads);
  // The kernel writes out while it reads a and b: their spans may not meet (a and b may alias).
  for (const Batched& t : {a, b}) {
    if (Overlaps(out.addr, out.end() - out.addr, t.addr, t.end() - t.addr)) {
      NPU_THROW(kInvalidAddr) << where << ": the output overlaps " << t.what << " in SRAM";
    }
  }
  if (op.b_dtype == stream::kInt8) {  // the scale table: one fp32 word per B batch
    CheckAligned(where, "b scales", op.b_scale_addr, c.alignment);
    CheckRange(where, "b scales", op.b_scale_addr, b_batches * 4, "SRAM", 0, c.sram_bytes);
    if (Overlaps(out.addr, out.end() - out.addr, op.b_scale_addr, b_batches * 4)) {
      NPU_THROW(kInvalidAddr) << where << ": the output overlaps the b scales in SRAM";
    }
  }
}

}  // namespace tvm_npu
