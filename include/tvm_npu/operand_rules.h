/*!
 * \file tvm_npu/operand_rules.h
 * \brief What some operand values mean beyond their layout (docs/npu.md section 6): the zeros that
 *        keep an older minor's meaning, the depthwise mapping, the requantization block's rows.
 *
 * The layouts themselves are generated into tvm_npu/stream_format.h from the contract spec; these
 * rules are code, so they are written here by hand.
 */
#ifndef TVM_NPU_OPERAND_RULES_H_
#define TVM_NPU_OPERAND_RULES_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {
namespace stream {

/*!
 * \brief The int8 requantization block a CONV2D's bias_addr points at: two rows of OC words,
 *        bias (int32) then S (fp32 bit patterns), align(OC * 4, alignment) bytes apart
 *        (docs/npu.md section 6). The configuration's alignment keeps the rule that every row
 *        stride is a multiple of it.
 */
constexpr uint32_t kRequantRows = 2;
inline uint64_t RequantRowStride(uint64_t oc, uint64_t alignment) {
  return (oc * 4 + alignment - 1) / alignment * alignment;
}

/*! \brief True for the depthwise mapping (groups == in_c == oc, checked at load); groups == 1 is
 *         always the dense mapping, also when in_c == oc == 1. */
inline bool IsDepthwise(const Conv2DOperands& op) { return op.groups != 1; }

/*! \brief Format 1.4: fp16 activations with int8 weight codes (w_dtype int8, checked at load);
 *         bias_addr is then the dequantization block, laid out as the requantization block
 *         (bias fp32, then the weights' scale fp32). */
inline bool IsW8A16(const Conv2DOperands& op) { return op.dtype == kFP16 && op.w_dtype == kInt8; }

/*! \brief Format 1.4, group-wise int4 weights: w_dtype = int4 (7) or uint4 (8) | g << 8. The
 *         group size g (32, 64 or 128), kh = kw = 1, groups 1 and in_c % g == 0 are checked at
 *         load; these read the word. */
inline uint32_t WeightCode(const Conv2DOperands& op) { return op.w_dtype & 0xFFu; }
inline uint32_t Int4Group(const Conv2DOperands& op) { return (op.w_dtype >> 8) & 0xFFu; }
inline bool IsInt4Weights(const Conv2DOperands& op) {
  return WeightCode(op) == kInt4 || WeightCode(op) == kUInt4;
}

/*! \brief Bytes of one weight element: the weights' own dtype (w_dtype) or the command's. Not for
 *         int4 weights (two a byte: WeightRowBytes). */
inline uint64_t WeightBytes(const Conv2DOperands& op) {
  return DTypeBytes(op.w_dtype != 0 ? op.w_dtype : op.dtype);
}

/*! \brief Bytes of one weight row: kh * kw * in_c elements (kh * kw depthwise), or in_c / 2 for
 *         int4 weights. The operands are u32, so the product fits 96 bits, not 64: callers that
 *         run before the load checks saturate themselves. */
inline uint64_t WeightRowBytes(const Conv2DOperands& op) {
  if (IsInt4Weights(op)) return op.in_c / 2;
  const uint64_t taps = uint64_t{op.kh} * op.kw * (IsDepthwise(op) ? 1 : op.in_c);
  return taps * WeightBytes(op);
}

/*! \brief True when bias_addr points at a two-row block (int8 requantization, or W8A16's
 *         dequantization) rather than OC fp32 biases. False for int4 weights (Int4BlockLayout). */
inline bool HasScaleBlock(const Conv2DOperands& op) {
  return !IsInt4Weights(op) && (op.dtype == kInt8 || IsW8A16(op));
}

/*!
 * \brief The int4 dequantization block at bias_addr (docs/npu.md section 6), offsets from
 *        bias_addr: the bias row (OC fp32), under int8 the requantization row S (OC fp32) one row
 *        stride later, then the fp16 scales [in_c / g][oc] packed, then (uint4) the zero points,
 *        in_c / g rows of ceil(oc / 2) bytes, from the next alignment boundary. No product
 *        overflows: in_c / g < 2^27 and oc < 2^32.
 */
struct Int4Block {
  uint64_t requant;      // the S row (int8 activations only)
  uint64_t scales;       // [G][oc] fp16
  uint64_t zero_points;  // [G][zp_row] uint4 pairs (uint4 only)
  uint64_t zp_row;       // bytes of one zero-point row: ceil(oc / 2)
  uint64_t bytes;        // the whole block
};
inline Int4Block Int4BlockLayout(const Conv2DOperands& op, uint64_t alignment) {
  const uint64_t row = RequantRowStride(op.oc, alignment);
  const uint64_t groups = op.in_c / Int4Group(op);
  Int4Block b;
  b.requant = row;
  b.scales = op.dtype == kInt8 ? 2 * row : row;
  const uint64_t scale_bytes = groups * op.oc * 2;
  b.zero_points = b.scales + (scale_bytes + alignment - 1) / alignment * alignment;
  b.zp_row = (uint64_t{op.oc} + 1) / 2;
  b.bytes = WeightCode(op) == kUInt4 ? b.zero_points + groups * b.zp_row : b.scales + scale_bytes;
  return b;
}

/*! \brief Bytes at bias_addr: none (kNoBias), OC fp32 biases, a two-row block, or an int4 block. */
inline uint64_t BiasBlockBytes(const Conv2DOperands& op, uint64_t alignment) {
  if (IsInt4Weights(op)) return Int4BlockLayout(op, alignment).bytes;
  if (HasScaleBlock(op)) return kRequantRows * RequantRowStride(op.oc, alignment);
  return op.bias_addr == kNoBias ? 0 : uint64_t{op.oc} * 4;
}

/*! \brief Bytes between consecutive pixels of a row: the pixel stride operand, or packed. */
inline uint64_t PixelStride(uint32_t pstride, uint64_t channels, uint64_t elem) {
  return pstride != 0 ? pstride : channels * elem;
}

/*! \brief Pixel strides in bytes of a CONV2D's input and output, and a POOL's. */
inline uint64_t InPixelStride(const Conv2DOperands& op) {
  return PixelStride(op.in_pstride, op.in_c, DTypeBytes(op.dtype));
}
inline uint64_t OutPixelStride(const Conv2DOperands& op) {
  return PixelStride(op.out_pstride, op.oc, DTypeBytes(op.dtype));
}
inline uint64_t InPixelStride(const PoolOperands& op) {
  return PixelStride(op.in_pstride, op.c, DTypeBytes(op.dtype));
}
inline uint64_t OutPixelStride(const PoolOperands& op) {
  return PixelStride(op.out_pstride, op.c, DTypeBytes(op.dtype));
}

/*! \brief The dtype of an ELTWISE operand field: its own, or the command's when 0. */
inline uint32_t OperandDType(uint32_t own, uint32_t dtype) { return own != 0 ? own : dtype; }

}  // namespace stream
}  // namespace tvm_npu

#endif  // TVM_NPU_OPERAND_RULES_H_
