/*!
 * \file add_ref.h
 * \brief Reference ADD on the vector unit (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_ADD_REF_H_
#define TVM_NPU_KERNELS_REF_ADD_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief out = a + b over op.rows rows of op.row_elems elements (strides in bytes per row).
 *
 * fp16: a + b in fp32, activation in fp32, one rounding to fp16. int8:
 * t = (a - z_a) * M_a + (b - z_b) * M_b in int64, y = clamp(z_y + rshift_rne(t, n), lo, hi).
 * The *_addr fields are ignored (the caller resolves them); the operands passed CheckAddParams.
 */
void AddRef(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_ADD_REF_H_
