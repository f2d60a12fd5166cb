/*!
 * \file add_fast.h
 * \brief Fast ADD, bit-identical to AddRef (kernels/ref/add_ref.h).
 *
 * int8 at the AVX-512 level: the contract's int64 arithmetic, 8 lanes at a time
 * ((a - z_a) * M_a is a 32 x 32 -> 64-bit product, exact), the same rshift_rne and clamp.
 * fp16 at the AVX-512 level: ELTWISE's fp16 add kernel (eltwise_fast.h), the same arithmetic.
 * Other levels run AddRef, whose scalar loop is already the portable form.
 */
#ifndef TVM_NPU_KERNELS_FAST_ADD_FAST_H_
#define TVM_NPU_KERNELS_FAST_ADD_FAST_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

#include "kernels/fast/cpu_level.h"

namespace tvm_npu {
namespace fast {

void Add(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
         Level level);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_ADD_FAST_H_
