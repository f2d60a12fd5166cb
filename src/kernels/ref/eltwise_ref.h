/*!
 * \file eltwise_ref.h
 * \brief Reference ELTWISE, UNARY and SOFTMAX on the vector unit (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_ELTWISE_REF_H_
#define TVM_NPU_KERNELS_REF_ELTWISE_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief out = a (kind) b over op.rows rows of op.row_elems elements, b broadcast per op.b_mode.
 *
 * fp16: the op in fp32, activation in fp32, one rounding to fp16. int8: the integer rule of
 * section 2 (ta, tb scaled by the multipliers, one rshift_rne). The *_addr fields are ignored (the
 * caller resolves them); the operands passed CheckEltwiseParams.
 */
void EltwiseRef(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                uint8_t* out);

/*!
 * \brief out = f(in): fp16 evaluates f in fp32 as section 2's table orders it; int8 looks the
 *        code up in the 256-entry `table` (ignored for fp16). The operands passed
 *        CheckUnaryParams.
 */
void UnaryRef(const stream::UnaryOperands& op, const uint8_t* in, const uint8_t* table,
              uint8_t* out);

/*!
 * \brief fp16 softmax of every row: max, exp(x - max) and their in-order sum in fp32, one division
 *        and one rounding per element (section 2). The operands passed CheckSoftmaxParams.
 */
void SoftmaxRef(const stream::SoftmaxOperands& op, const uint8_t* in, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_ELTWISE_REF_H_
