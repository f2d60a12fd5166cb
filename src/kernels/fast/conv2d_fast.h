/*!
 * \file conv2d_fast.h
 * \brief Fast CONV2D, bit-identical to Conv2DRef (kernels/ref/conv2d_ref.h) for every input.
 *
 * int8, dense: the window of each output pixel is gathered into a row of K = KH*KW*IC bytes
 * (im2col; taps in the padding hold the input zero point, so they add (z_x - z_x) * w = 0), then
 * a blocked GEMM against the weights with int32 accumulation (any order: integer sums are exact,
 * and wrap-around is the same mod 2^32), then the fp32 requantization vectorized with explicit
 * round-to-nearest-even. int8 depthwise: vectorized across channels. fp16: vectorized across
 * output channels only, so every accumulator still adds its products in the reference's
 * (kh, kw, ic) order with one fp32 rounding per add (docs/npu.md section 2). Group-wise int4
 * weights (format 1.4): vectorized across output channels the same way.
 */
#ifndef TVM_NPU_KERNELS_FAST_CONV2D_FAST_H_
#define TVM_NPU_KERNELS_FAST_CONV2D_FAST_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>
#include <vector>

#include "kernels/fast/cpu_level.h"
#include "kernels/fast/weight_cache.h"

namespace tvm_npu {
namespace fast {

/*!
 * \brief Conv2DRef's contract and bits, at `level` (kLevelRef runs Conv2DRef itself).
 *
 * \param cache Where packed int8 weights are kept between calls (nullptr: pack every time),
 *        under `key`, which must name the command within the cache.
 */
void Conv2D(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
            const uint8_t* bias, uint8_t* out, uint32_t alignment, Level level,
            WeightCache* cache = nullptr, size_t key = 0);

/*! \brief The dense int8 GEMM's bias (the block's, adjusted for the input zero point and the
 *         weights' row sums) and scales, both padded to whole channel blocks. */
void DenseRequant(const stream::Conv2DOperands& op, const PackedWeights& w, const int32_t* bias,
                  const float* scale, std::vector<int32_t>* bias_adj,
                  std::vector<float>* scale_pad);

/*! \brief The int8 halves (conv2d_int8_fast.cc, dwconv_int8_fast.cc) and fp16 (conv2d_fp16_fast.cc). */
void Conv2DInt8Dense(const stream::Conv2DOperands& op, const uint8_t* in, const PackedWeights& w,
                     const int32_t* bias_adj, const float* scale_pad, uint8_t* out);
void Conv2DInt8Depthwise(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                         const int32_t* bias, const float* scale, uint8_t* out, Level level);
#if TVM_NPU_X86_64
void Conv2DInt8DepthwiseVnni(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                             const int32_t* bias, const float* scale, uint8_t* out);
#endif
void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out, Level level, WeightCache* cache, size_t key);
/*! \brief Group-wise int4 weights, fp16 or int8 activations (conv2d_int4_fast.cc): the codes
 *         unpacked once (cached under `key`), the reference's sums lane by lane. */
void Conv2DInt4(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out, uint32_t alignment, WeightCache* cache,
                size_t key);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_CONV2D_FAST_H_
