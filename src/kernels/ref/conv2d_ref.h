/*!
 * \file conv2d_ref.h
 * \brief Reference CONV2D over one SRAM tile (docs/npu.md sections 2 and 4).
 *
 * Simple and complete, not designed to be fast: it defines the bits every faster kernel must
 * reproduce.
 */
#ifndef TVM_NPU_KERNELS_REF_CONV2D_REF_H_
#define TVM_NPU_KERNELS_REF_CONV2D_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief Run one CONV2D command's arithmetic.
 *
 * \param op The command's operands. Only the shape, stride, padding and activation fields are
 *        read; the *_addr fields are ignored because the caller resolves them to pointers.
 * \param in The input tile: op.in_h rows of op.in_w * op.in_c elements, op.in_stride bytes apart.
 * \param w The weights [oc][kh][kw][in_c], rows op.w_stride bytes apart.
 * \param bias op.oc fp32 values, or nullptr for no bias.
 * \param out The output tile: op.out_h rows of op.out_w * op.oc elements, op.out_stride apart.
 *
 * Throws ERR_OP_NOT_SUPPORTED for a dtype this kernel does not implement (int8: issue 3).
 * The caller guarantees every footprint is in bounds (the stream parser checks it).
 */
void Conv2DRef(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
               const uint8_t* bias, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_CONV2D_REF_H_
