/*!
 * \file add_fast.h
 * \brief Fast ADD, bit-identical to AddRef (kernels/ref/add_ref.h).
 *
 * At the AVX-512 level ADD runs as ELTWISE add with b of a's shape (eltwise_fast.h): int8 on 8
 * int64 lanes, fp16 on 16 fp32 lanes with F16C conversions, the same arithmetic.
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
