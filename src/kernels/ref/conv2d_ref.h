/*!
 * \file conv2d_ref.h
 * \brief Reference CONV2D over one SRAM tile (docs/npu.md sections 2 and 4), dense and depthwise,
 *        fp16 and int8.
 *
 * Simple and complete, not designed to be fast: it defines the bits every faster kernel must
 * reproduce.
 */
#ifndef TVM_NPU_KERNELS_REF_CONV2D_REF_H_
#define TVM_NPU_KERNELS_REF_CONV2D_REF_H_

#include <tvm_npu/operand_rules.h>
#include <tvm_npu/stream_format.h>

#include <cstdint>
#include <vector>

namespace tvm_npu {

/*!
 * \brief Run one CONV2D command's arithmetic.
 *
 * \param op The command's operands. Only the shape, stride, padding, activation and quantization
 *        fields are read; the *_addr fields are ignored because the caller resolves them to
 *        pointers.
 * \param in The input tile: op.in_h rows of op.in_w * op.in_c elements, op.in_stride bytes apart.
 * \param w The weights, one row per output channel, op.w_stride bytes apart: [oc][kh][kw][in_c],
 *        or [c][kh][kw][1] for depthwise (op.groups == op.in_c == op.oc).
 * \param bias fp16: op.oc fp32 values, or nullptr for no bias. int8: the requantization block,
 *        two rows of op.oc words, bias (int32) then S (fp32 bits),
 *        stream::RequantRowStride(op.oc, alignment) bytes apart. fp16 with int8 weights
 *        (stream::IsW8A16, format 1.4): the dequantization block, the same rows with an fp32 bias
 *        and the weights' scales. Group-wise int4 weights (stream::IsInt4Weights, format 1.4): the
 *        int4 dequantization block (stream::Int4BlockLayout).
 * \param out The output tile: op.out_h rows of op.out_w * op.oc elements, op.out_stride apart.
 * \param alignment The configuration's alignment (it sets the rows of a two-row bias block).
 *
 * The caller guarantees the operands passed the stream checks (CheckConv2DParams) and every
 * footprint is in bounds. An int8 (or W8A16) scale that is not finite and > 0 (data in SRAM, so only known
 * now) throws ERR_BAD_STREAM before anything is written.
 */
void Conv2DRef(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
               const uint8_t* bias, uint8_t* out, uint32_t alignment);

/*! \brief The int8 half of Conv2DRef (conv2d_int8_ref.cc). */
void Conv2DInt8Ref(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                   const uint8_t* requant, uint8_t* out, uint32_t alignment);

/*! \brief The int4 dequantization block (format 1.4), read and checked: the fp32 bias, under int8
 *         activations the requantization S, and per group j and output o (index j * oc + o) the
 *         fp16 scale (as fp32) and the zero point (0 for int4). */
struct Int4Dequant {
  std::vector<float> bias, requant, scale;
  std::vector<int8_t> zero_point;
};

/*! \brief Read the int4 dequantization block at `block`; a scale or S that is not finite and > 0,
 *         or (int8) a bias that is not finite, throws ERR_BAD_STREAM. */
Int4Dequant LoadInt4Block(const stream::Conv2DOperands& op, const uint8_t* block,
                          uint32_t alignment);

/*! \brief The code of weight k of a packed int4 row: the even k in the low nibble; int4 (not
 *         uint4) sign-extends. */
int32_t Int4Code(const stream::Conv2DOperands& op, const uint8_t* row, uint64_t k);

/*! \brief The group-wise int4 half of Conv2DRef (conv2d_int4_ref.cc): fp16 or int8 activations,
 *         bias_addr the int4 dequantization block (stream::Int4BlockLayout). */
void Conv2DInt4Ref(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                   const uint8_t* block, uint8_t* out, uint32_t alignment);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_CONV2D_REF_H_
