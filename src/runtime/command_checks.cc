/*!
 * \file command_checks.cc
 * \brief Per-command validation at load (docs/npu.md section 6): DMA, CONV2D, ADD, POOL.
 *
 * Codes: a field that cannot be decoded (unknown dtype, kind or activation, a zero size, a
 * quantization operand out of its documented range) is ERR_BAD_STREAM; a well-formed request the
 * hardware does not implement (stride 3, a group count other than 1 or the channel count) is
 * ERR_OP_NOT_SUPPORTED; an address, stride or footprint outside its space, or an output that
 * overlaps its operands, is ERR_INVALID_ADDR.
 */
#include "runtime/command_checks.h"

#include <tvm_npu/operand_rules.h>

#include <sstream>

#include "kernels/ref/ref_common.h"
#include "runtime/npu_error.h"
#include "runtime/state_checks.h"

namespace tvm_npu {
namespace {

constexpr uint64_t kTwo31 = uint64_t{1} << 31;

int32_t AsI32(uint32_t bits) { return ref::WrapI32(bits); }

}  // namespace

void CheckDType(const std::string& where, uint32_t dtype) {
  if (dtype != stream::kFP16 && dtype != stream::kInt8) {
    NPU_THROW(kBadStream) << where << ": dtype " << dtype << " is neither fp16 (1) nor int8 (2)";
  }
}

void CheckStrides(const std::string& where, uint32_t stride_h, uint32_t stride_w) {
  if (stride_h < 1 || stride_h > 2 || stride_w < 1 || stride_w > 2) {
    NPU_THROW(kOpNotSupported) << where << ": stride " << stride_h << "x" << stride_w
                               << ", the NPU supports strides 1 and 2";
  }
}

// The epilogue of an fp16 op: an fp32 activation; the integer fields must be 0 (section 6).
void CheckFp16Epilogue(const std::string& where, uint32_t act,
                       std::initializer_list<uint32_t> int_fields) {
  if (act > stream::kActClip) NPU_THROW(kBadStream) << where << ": activation " << act;
  for (uint32_t v : int_fields) {
    if (v != 0) {
      NPU_THROW(kBadStream) << where << ": an fp16 op's zero points, multipliers, shifts and "
                            << "scales must be 0 (got " << v << ")";
    }
  }
}

// The epilogue of an int8 op: act 0 (the activation is folded into the clamp), clamp bounds and
// zero points within int8, lo <= hi.
void CheckInt8Epilogue(const std::string& where, uint32_t act, uint32_t lo, uint32_t hi,
                       std::initializer_list<uint32_t> zero_points) {
  if (act != stream::kActNone) {
    NPU_THROW(kBadStream) << where << ": int8 ops take act 0 (the activation is the clamp "
                          << "[clip_lo, clip_hi]), got " << act;
  }
  if (!ref::ValidInt8(AsI32(lo)) || !ref::ValidInt8(AsI32(hi)) || AsI32(lo) > AsI32(hi)) {
    NPU_THROW(kBadStream) << where << ": int8 clamp [" << AsI32(lo) << ", " << AsI32(hi)
                          << "] must satisfy -128 <= lo <= hi <= 127";
  }
  for (uint32_t zp : zero_points) {
    if (!ref::ValidInt8(AsI32(zp))) {
      NPU_THROW(kBadStream) << where << ": zero point " << AsI32(zp) << " outside -128..127";
    }
  }
}

void CheckShift(const std::string& where, uint32_t shift) {
  if (!ref::ValidShift(shift)) {
    NPU_THROW(kBadStream) << where << ": shift " << shift << " outside 1..62";
  }
}

std::string Where(const char* kind, size_t index, const std::string& detail) {
  std::ostringstream os;
  os << kind << " " << index << " (" << detail << ")";
  return os.str();
}

void CheckRange(const std::string& where, const char* what, uint64_t addr, uint64_t bytes,
                const char* space, uint64_t lo, uint64_t hi) {
  // `bytes` may be saturated; never add first.
  if (addr < lo || addr > hi || bytes > hi - addr) {
    NPU_THROW(kInvalidAddr) << where << ": " << what << " at " << addr << " spanning " << bytes
                            << " bytes lies outside " << space << " [" << lo << ", " << hi
                            << "); fix the compiler's address allocation for this buffer";
  }
}

void CheckAligned(const std::string& where, const char* what, uint64_t value, uint32_t alignment) {
  if (value % alignment != 0) {
    NPU_THROW(kInvalidAddr) << where << ": " << what << " = " << value
                            << " is not a multiple of the alignment " << alignment;
  }
}

void CheckBuffer(const std::string& where, const char* what, uint64_t addr, uint64_t rows,
                 uint64_t row_bytes, uint64_t stride, const NPUConfig& cfg, const char* space,
                 uint64_t lo, uint64_t hi, bool packed_rows, uint32_t addr_align) {
  CheckAligned(where, what, addr, addr_align != 0 ? addr_align : cfg.alignment);
  // Weight rows are packed (docs/npu.md section 3): only the block start is aligned.
  if (!packed_rows)
    CheckAligned(where, (std::string(what) + " row stride").c_str(), stride, cfg.alignment);
  if (stride < row_bytes) {
    NPU_THROW(kBadStream) << where << ": " << what << " row stride " << stride
                          << " is less than its row of " << row_bytes << " bytes";
  }
  CheckRange(where, what, addr, SatMul(rows, stride), space, lo, hi);
}

bool OutputOverlapsInputs(const std::string& where, const NPUConfig& c,
                          std::initializer_list<SramRows> inputs, const SramRows& output) {
  for (const SramRows& b : inputs) {
    CheckBuffer(where, b.what, b.addr, b.rows, b.row_bytes, b.stride, c, "SRAM", 0, c.sram_bytes,
                false, b.addr_align);
  }
  CheckBuffer(where, output.what, output.addr, output.rows, output.row_bytes, output.stride, c,
              "SRAM", 0, c.sram_bytes, false, output.addr_align);
  // Every footprint is bounded by SRAM now: the products below cannot wrap.
  for (const SramRows& b : inputs) {
    if (Overlaps(output.addr, output.rows * output.stride, b.addr, b.rows * b.stride)) return true;
  }
  return false;
}

uint64_t PixelRowBytes(const std::string& where, const char* what, uint64_t width,
                       uint64_t channel_bytes, uint32_t pixel_stride, uint64_t elem) {
  if (pixel_stride == 0) return SatMul(width, channel_bytes);
  if (pixel_stride < channel_bytes || pixel_stride % elem != 0) {
    NPU_THROW(kBadStream) << where << ": " << what << " pixel stride " << pixel_stride
                          << " must be 0 (packed) or a multiple of " << elem
                          << " of at least the pixel's " << channel_bytes << " bytes";
  }
  return SatMul(width - 1, pixel_stride) + channel_bytes;  // width >= 1: checked before
}

namespace {

// Group-wise int4 weights (format 1.4): a dense layer whose K splits into groups of 32, 64 or 128,
// with its dequantization block (the scales live there, so there is always one).
void CheckInt4Weights(const std::string& where, const stream::Conv2DOperands& op) {
  const uint32_t g = stream::Int4Group(op);
  const char* name = stream::WeightCode(op) == stream::kInt4 ? "int4" : "uint4";
  if ((op.w_dtype >> 16) != 0 || (g != 32 && g != 64 && g != 128)) {
    NPU_THROW(kBadStream) << where << ": w_dtype 0x" << std::hex << op.w_dtype << std::dec << " ("
                          << name << ") has group size " << g << " in bits 8-15 and "
                          << (op.w_dtype >> 16) << " in bits 16-31; the group is 32, 64 or 128 and "
                          << "bits 16-31 are 0 (format 1.4)";
  }
  if (op.kh != 1 || op.kw != 1 || op.groups != 1) {
    NPU_THROW(kBadStream) << where << ": " << name << " weights with kh " << op.kh << ", kw "
                          << op.kw << ", groups " << op.groups
                          << "; int4 weights are dense only: kh = kw = groups = 1";
  }
  if (op.in_c % g != 0) {
    NPU_THROW(kBadStream) << where << ": " << name << " weights with in_c " << op.in_c
                          << " and group size " << g << "; in_c must be a multiple of the group";
  }
  if (op.bias_addr == stream::kNoBias) {
    NPU_THROW(kBadStream) << where << ": " << name << " weights need their dequantization block "
                          << "(bias, scales) at bias_addr";
  }
}

}  // namespace

void CheckConv2DParams(const std::string& where, const stream::Conv2DOperands& op) {
  CheckDType(where, op.dtype);
  if (op.groups != 1 && !(op.groups == op.in_c && op.in_c == op.oc)) {
    NPU_THROW(kOpNotSupported) << where << ": groups " << op.groups << " with in_c " << op.in_c
                               << " and oc " << op.oc << "; version 1.0 has groups 1 and "
                               << "depthwise (groups == in_c == oc)";
  }
  CheckStrides(where, op.stride_h, op.stride_w);
  if (op.in_h == 0 || op.in_w == 0 || op.in_c == 0 || op.kh == 0 || op.kw == 0 || op.oc == 0 ||
      op.out_h == 0 || op.out_w == 0 || op.dil_h == 0 || op.dil_w == 0) {
    NPU_THROW(kBadStream) << where << ": a size or dilation is 0";
  }
  if (stream::IsInt4Weights(op)) {
    CheckInt4Weights(where, op);
  } else if (op.w_dtype != 0 && !stream::IsW8A16(op)) {
    NPU_THROW(kBadStream)
        << where << ": w_dtype " << op.w_dtype << " with dtype " << op.dtype
        << "; it is 0 (the weights have dtype), int8 (2) under fp16, or int4 (7) / uint4 (8) | "
        << "group << 8 (format 1.4)";
  }
  if (op.dtype == stream::kFP16) {
    CheckFp16Epilogue(where, op.act, {op.in_zp, op.out_zp});
    if (stream::IsW8A16(op) && op.bias_addr == stream::kNoBias) {
      NPU_THROW(kBadStream) << where << ": int8 weights need their dequantization block (bias, "
                            << "scale) at bias_addr";
    }
    return;
  }
  CheckInt8Epilogue(where, op.act, op.clip_lo, op.clip_hi, {op.in_zp, op.out_zp});
  if (op.bias_addr == stream::kNoBias) {
    NPU_THROW(kBadStream) << where << ": an int8 CONV2D needs its requantization block (bias, "
                          << "S) at bias_addr";
  }
}

void CheckAddParams(const std::string& where, const stream::AddOperands& op) {
  CheckDType(where, op.dtype);
  if (op.rows == 0 || op.row_elems == 0) NPU_THROW(kBadStream) << where << ": a size is 0";
  if (op.dtype == stream::kFP16) {
    CheckFp16Epilogue(where, op.act, {op.a_zp, op.b_zp, op.out_zp, op.a_mult, op.b_mult, op.shift});
    return;
  }
  CheckInt8Epilogue(where, op.act, op.clip_lo, op.clip_hi, {op.a_zp, op.b_zp, op.out_zp});
  // Each multiplier is round(s / s_y * 2^n) below 2^31; the smaller of the two may be anything
  // below that (even 0), so only the upper bound is a format rule.
  if (op.a_mult >= kTwo31 || op.b_mult >= kTwo31) {
    NPU_THROW(kBadStream) << where << ": multipliers " << op.a_mult << ", " << op.b_mult
                          << " must be below 2^31";
  }
  CheckShift(where, op.shift);
}

void CheckPoolParams(const std::string& where, const stream::PoolOperands& op) {
  CheckDType(where, op.dtype);
  if (op.kind != stream::kPoolAvg && op.kind != stream::kPoolMax) {
    NPU_THROW(kBadStream) << where << ": pooling kind " << op.kind << " is neither 0 (average) "
                          << "nor 1 (max)";
  }
  CheckStrides(where, op.stride_h, op.stride_w);
  if (op.in_h == 0 || op.in_w == 0 || op.c == 0 || op.out_h == 0 || op.out_w == 0 || op.kh == 0 ||
      op.kw == 0) {
    NPU_THROW(kBadStream) << where << ": a size or window dimension is 0";
  }
  // The maximum over no taps has no value: every window must reach into the tile. Windows are
  // contiguous, so the first and last output row / column are the ones to check.
  if (op.kind == stream::kPoolMax &&
      (op.pad_top >= op.kh || op.pad_left >= op.kw ||
       uint64_t{op.out_h - 1} * op.stride_h >= uint64_t{op.pad_top} + op.in_h ||
       uint64_t{op.out_w - 1} * op.stride_w >= uint64_t{op.pad_left} + op.in_w)) {
    NPU_THROW(kBadStream) << where << ": a max-pooling window lies entirely in the padding";
  }
  if (op.dtype == stream::kFP16) {
    CheckFp16Epilogue(where, op.act, {op.in_zp, op.out_zp, op.scale});
    return;
  }
  CheckInt8Epilogue(where, op.act, op.clip_lo, op.clip_hi, {op.in_zp, op.out_zp});
  // Unlike a CONV2D's per-channel scales (data in SRAM), POOL's S is an operand: check it here.
  if (!ref::ValidScale(ref::BitsToFloat(op.scale))) {
    NPU_THROW(kBadStream) << where << ": scale 0x" << std::hex << op.scale << std::dec << " ("
                          << ref::BitsToFloat(op.scale) << ") must be a finite fp32 > 0";
  }
}

void CheckDma(const std::string& where, const stream::Command& cmd, const ParsedStream& ps) {
  const stream::DmaOperands op = OperandsOf<stream::DmaOperands>(cmd);
  const NPUConfig& c = ps.config;
  if (op.channel >= c.dma_channels) {
    NPU_THROW(kBadStream) << where << ": DMA channel " << op.channel << ", the NPU has "
                          << c.dma_channels;
  }
  if (op.rows == 0 || op.row_bytes == 0) NPU_THROW(kBadStream) << where << ": moves no data";
  const bool load = cmd.opcode() == stream::kDmaLoad;
  if (CheckStateDma(where, op, load, ps)) return;  // format 1.4: a state tensor's rows
  const uint64_t sram = c.sram_bytes;
  const uint64_t ddr_lo = load ? 0 : ps.header.weights_bytes;  // the weight region is read-only
  const uint64_t ddr = ps.header.ddr_bytes;
  CheckBuffer(where, "source", op.src_addr, op.rows, op.row_bytes, op.src_stride, c,
              load ? "DDR" : "SRAM", 0, load ? ddr : sram);
  CheckBuffer(where, "destination", op.dst_addr, op.rows, op.row_bytes, op.dst_stride, c,
              load ? "SRAM" : "the writable DDR activation region", load ? 0 : ddr_lo,
              load ? sram : ddr);
}

void CheckConv2D(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::Conv2DOperands op = OperandsOf<stream::Conv2DOperands>(cmd);
  CheckConv2DParams(where, op);
  const uint64_t elem = stream::DTypeBytes(op.dtype);
  const uint64_t sram = c.sram_bytes;
  const uint64_t w_tap = stream::IsDepthwise(op) ? 1 : op.in_c;  // depthwise: [C][KH][KW][1]
  const uint64_t in_row =
      PixelRowBytes(where, "input", op.in_w, SatMul(op.in_c, elem), op.in_pstride, elem);
  const uint64_t w_row = stream::IsInt4Weights(op)
                             ? stream::WeightRowBytes(op)  // in_c / 2: kh = kw = 1, checked
                             : SatMul(SatMul(SatMul(op.kh, op.kw), w_tap), stream::WeightBytes(op));
  const uint64_t out_row =
      PixelRowBytes(where, "output", op.out_w, SatMul(op.oc, elem), op.out_pstride, elem);
  // Input and output may start at a channel slice of a tensor (section 3): beat-aligned.
  CheckBuffer(where, "input", op.in_addr, op.in_h, in_row, op.in_stride, c, "SRAM", 0, sram, false,
              stream::kSliceAlignment);
  CheckBuffer(where, "weights", op.w_addr, op.oc, w_row, op.w_stride, c, "SRAM", 0, sram,
              /*packed_rows=*/true);
  CheckBuffer(where, "output", op.out_addr, op.out_h, out_row, op.out_stride, c, "SRAM", 0, sram,
              false, stream::kSliceAlignment);
  const uint64_t out_bytes = uint64_t{op.out_h} * op.out_stride;  // bounded by the check above
  uint64_t bias_bytes = 0;
  if (stream::IsInt4Weights(op)) {
    // Bias row (and S row under int8), fp16 scales, uint4 zero points: one aligned block.
    bias_bytes = stream::BiasBlockBytes(op, c.alignment);
    CheckAligned(where, "int4 dequantization block", op.bias_addr, c.alignment);
    CheckRange(where, "int4 dequantization block", op.bias_addr, bias_bytes, "SRAM", 0, sram);
  } else if (stream::HasScaleBlock(op)) {
    // Two rows (bias int32 or fp32, scale fp32) of OC words, align(OC * 4, alignment) bytes apart.
    const uint64_t row = stream::RequantRowStride(op.oc, c.alignment);
    CheckBuffer(where, op.dtype == stream::kInt8 ? "requantization block" : "dequantization block",
                op.bias_addr, stream::kRequantRows, uint64_t{op.oc} * 4, row, c, "SRAM", 0, sram);
    bias_bytes = stream::kRequantRows * row;
  } else if (op.bias_addr != stream::kNoBias) {
    bias_bytes = uint64_t{op.oc} * 4;
    CheckAligned(where, "bias", op.bias_addr, c.alignment);
    CheckRange(where, "bias", op.bias_addr, bias_bytes, "SRAM", 0, sram);
  }
  // The kernel writes outputs while it still reads its operands: an overlap would make the
  // result depend on the loop order of the kernel, which no faster kernel could reproduce.
  if (Overlaps(op.out_addr, out_bytes, op.in_addr, uint64_t{op.in_h} * op.in_stride) ||
      Overlaps(op.out_addr, out_bytes, op.w_addr, uint64_t{op.oc} * op.w_stride) ||
      (bias_bytes != 0 && Overlaps(op.out_addr, out_bytes, op.bias_addr, bias_bytes))) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an operand in SRAM";
  }
}

// lanes = vector_lanes / 2 for fp16 is a divisor of the cycle model (section 5).
void CheckVectorConfig(const std::string& where, const NPUConfig& c) {
  if (c.vector_lanes < 2) {
    NPU_THROW(kBadStream) << where << ": configuration vector_lanes " << c.vector_lanes
                          << " leaves the vector unit no fp16 lane (vector_lanes / 2 = 0)";
  }
}

void CheckAdd(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::AddOperands op = OperandsOf<stream::AddOperands>(cmd);
  CheckAddParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t row = SatMul(op.row_elems, stream::DTypeBytes(op.dtype));
  CheckBinaryBuffers(where, c, op, row, op.rows, row, row);
}

void CheckPool(const std::string& where, const stream::Command& cmd, const NPUConfig& c) {
  const stream::PoolOperands op = OperandsOf<stream::PoolOperands>(cmd);
  CheckPoolParams(where, op);
  CheckVectorConfig(where, c);
  const uint64_t elem = stream::DTypeBytes(op.dtype);
  const uint64_t px = SatMul(op.c, elem);
  const uint64_t in_row = PixelRowBytes(where, "input", op.in_w, px, op.in_pstride, elem);
  const uint64_t out_row = PixelRowBytes(where, "output", op.out_w, px, op.out_pstride, elem);
  if (OutputOverlapsInputs(
          where, c, {{"input", op.in_addr, op.in_h, in_row, op.in_stride, stream::kSliceAlignment}},
          {"output", op.out_addr, op.out_h, out_row, op.out_stride, stream::kSliceAlignment})) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps its input in SRAM";
  }
}

}  // namespace tvm_npu
