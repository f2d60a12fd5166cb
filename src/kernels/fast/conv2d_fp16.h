/*!
 * \file conv2d_fp16.h
 * \brief Internal to the fast fp16 CONV2D (conv2d_fast.h): one output pixel's arguments, shared by
 *        the dispatch and AVX-512 kernels (conv2d_fp16_fast.cc) and the AVX2 one
 *        (conv2d_fp16_avx2.cc).
 */
#ifndef TVM_NPU_KERNELS_FAST_CONV2D_FP16_H_
#define TVM_NPU_KERNELS_FAST_CONV2D_FP16_H_

#include <tvm_npu/stream_format.h>

#include <cstddef>
#include <cstdint>

#include "kernels/fast/cpu_level.h"

namespace tvm_npu {
namespace fast {

constexpr size_t kFp16Lanes = 16;  // packing block: one zmm, or two ymm

struct Fp16Args {
  const stream::Conv2DOperands* op;
  const uint8_t* in;
  const uint16_t* w;   // PackFp16's layout: [oc_pad / 16][k][16] halves
  size_t k;
  const float* bias;   // oc_pad values, or nullptr
  float lo, hi;
  const uint8_t** px;  // the output pixel's valid taps (ValidTaps)
  const uint32_t* tap;
  size_t n_taps;
};

#if TVM_NPU_X86_64
/*! \brief One output pixel of a dense fp16 CONV2D with AVX2 + F16C, all its channels. */
void Conv2DFp16PixelAvx2(const Fp16Args& a, uint8_t* out_px);
#endif

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_CONV2D_FP16_H_
