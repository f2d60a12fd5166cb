/*!
 * \file pool_ref.h
 * \brief Reference POOL on the vector unit (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_POOL_REF_H_
#define TVM_NPU_KERNELS_REF_POOL_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*!
 * \brief Average (op.kind 0) or max (1) pooling of a KH x KW window over one NHWC tile.
 *
 * The tile follows CONV2D's tiling rules: pad_top / pad_left virtual rows / columns before it,
 * rows at or past in_h and columns at or past in_w outside it. Only taps inside the tile
 * contribute; average pooling still divides by (fp16) or scales for (int8) all KH * KW taps.
 * The *_addr fields are ignored (the caller resolves them); the operands passed
 * CheckPoolParams, which guarantees every max-pooling window has a tap inside the tile.
 */
void PoolRef(const stream::PoolOperands& op, const uint8_t* in, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_POOL_REF_H_
