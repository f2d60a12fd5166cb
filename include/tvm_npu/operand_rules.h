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

/*! \brief Bytes of one weight element: the weights' own dtype (w_dtype) or the command's. */
inline uint64_t WeightBytes(const Conv2DOperands& op) {
  return DTypeBytes(op.w_dtype != 0 ? op.w_dtype : op.dtype);
}

/*! \brief True when bias_addr points at a two-row block (int8 requantization, or W8A16's
 *         dequantization) rather than OC fp32 biases. */
inline bool HasScaleBlock(const Conv2DOperands& op) { return op.dtype == kInt8 || IsW8A16(op); }

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
