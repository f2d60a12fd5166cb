/*!
 * \file eltwise_fast.h
 * \brief Fast ELTWISE, bit-identical to EltwiseRef (kernels/ref/eltwise_ref.h).
 *
 * fp16 at the AVX-512 level: 16 lanes with F16C conversions, every kind and b mode (eltwise_fast.cc).
 * Integer (int8 / int16 operands, format 1.2) at every fast level: the reference's int64 arithmetic
 * with its kind, dtype and b-mode switches taken once per command instead of per element
 * (eltwise_int_fast.cc). Everything else, and level ref, runs EltwiseRef.
 */
#ifndef TVM_NPU_KERNELS_FAST_ELTWISE_FAST_H_
#define TVM_NPU_KERNELS_FAST_ELTWISE_FAST_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

#include "kernels/fast/cpu_level.h"

namespace tvm_npu {
namespace fast {

void Eltwise(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
             Level level);

/*! \brief The integer ELTWISE at `level` (> kLevelRef); eltwise_int_fast.cc. */
void EltwiseInt(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
                Level level);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_ELTWISE_FAST_H_
