/*!
 * \file matmul_ref.h
 * \brief Reference MATMUL, fp16 and int8 (docs/npu.md sections 2 and 4, format 1.4).
 */
#ifndef TVM_NPU_KERNELS_REF_MATMUL_REF_H_
#define TVM_NPU_KERNELS_REF_MATMUL_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief out[o] = A[o] x B[o / b_group] for every batch o, all three in `sram`: each output element an
 *        fp32 sum from +0.0 of the exact products in k order, rounded once to fp16; int8: the int32
 *        sum of (a - a_zp) * (b - b_zp), requantized with the scale S like CONV2D. The operands
 *        passed CheckMatmul (or CheckMatmulParams for the direct entry point).
 */
void MatmulRef(const stream::MatmulOperands& op, uint8_t* sram);

/*!
 * \brief MatmulRef with an int8 B (b_dtype int8): the exact products of A and B's codes summed as
 *        above, then one fp32 multiply by the B batch's scale (b_scale_addr), rounded once to fp16.
 *        Throws ERR_BAD_STREAM, before writing, for a scale that is not finite and > 0.
 */
void MatmulB8Ref(const stream::MatmulOperands& op, uint8_t* sram);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_MATMUL_REF_H_
