/*!
 * \file softmax_causal_ref.h
 * \brief Reference causal SOFTMAX at the run-time position (format 1.4, docs/npu.md sections 2-3).
 */
#ifndef TVM_NPU_KERNELS_REF_SOFTMAX_CAUSAL_REF_H_
#define TVM_NPU_KERNELS_REF_SOFTMAX_CAUSAL_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief `op` resolved at `position` (its row_elems is S + position for S query rows): row r keeps
 *        elements e <= position + r % S (format 1.6, with a window W: only those with
 *        e + W > position + r % S), which SOFTMAX normalizes as section 2 says (scale, max, exp,
 *        in-order sum, one division and rounding each); the masked elements are not read and their
 *        outputs are +0.0. `op` passed CheckSoftmax (causal: no mask).
 */
void SoftmaxCausalRef(const stream::SoftmaxOperands& op, uint32_t position, const uint8_t* in,
                      uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_SOFTMAX_CAUSAL_REF_H_
