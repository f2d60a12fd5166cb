/*!
 * \file norm_ref.h
 * \brief Reference NORM (LayerNorm, RMSNorm) on the vector unit (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_NORM_REF_H_
#define TVM_NPU_KERNELS_REF_NORM_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief fp16 layernorm or rmsnorm of every row, in fp32 in the order section 2 states (in-order
 *        sums, IEEE sqrt and division, then * gamma, then + beta), one rounding per element.
 *        `gamma` / `beta` are nullptr where the command has kNoParam. The operands passed
 *        CheckNormParams.
 */
void NormRef(const stream::NormOperands& op, const uint8_t* in, const uint8_t* gamma,
             const uint8_t* beta, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_NORM_REF_H_
