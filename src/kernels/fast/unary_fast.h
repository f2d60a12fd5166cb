/*!
 * \file unary_fast.h
 * \brief Fast UNARY, bit-identical to UnaryRef (kernels/ref/eltwise_ref.h).
 *
 * fp16 sigmoid, tanh, hardswish, gelu, silu, gelu tanh: a function of one fp16 input has 65,536 inputs, so each
 * is a 65,536-entry table of the reference's own results (ref::UnaryFp32, rounded by
 * FloatToHalfBits), built once per process on first use, and each element is a lookup. Used at
 * every fast level, and only in the default FP environment (fp_env.h): the reference follows the
 * thread's rounding mode and FTZ / DAZ, a table cannot. fp16 leaky relu at the AVX-512 level:
 * 16 lanes with F16C conversions. int8 already is a table lookup: UnaryRef.
 */
#ifndef TVM_NPU_KERNELS_FAST_UNARY_FAST_H_
#define TVM_NPU_KERNELS_FAST_UNARY_FAST_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

#include "kernels/fast/cpu_level.h"

namespace tvm_npu {
namespace fast {

void Unary(const stream::UnaryOperands& op, const uint8_t* in, const uint8_t* table, uint8_t* out,
           Level level);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_UNARY_FAST_H_
