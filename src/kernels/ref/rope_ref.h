/*!
 * \file rope_ref.h
 * \brief Reference ROPE, rotary position embedding in the rotate-half form, fp16 (docs/npu.md
 *        sections 2 and 6, format 1.4).
 */
#ifndef TVM_NPU_KERNELS_REF_ROPE_REF_H_
#define TVM_NPU_KERNELS_REF_ROPE_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief Every row r of x, with c / s the table rows (cs_row0 + r) % cs_rows and h = row_elems / 2:
 *        y[i] = x[i] * c[i] - x[i + h] * s[i] (i < h), x[i] * c[i] + x[i - h] * s[i] (i >= h); the
 *        products exact in fp32, one fp32 add or subtract, one rounding to fp16. Every operand is in
 *        `sram`; the operands passed CheckRope.
 */
void RopeRef(const stream::RopeOperands& op, uint8_t* sram);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_ROPE_REF_H_
