/*!
 * \file conv2d_fp16_avx2.cc
 * \brief The dense fp16 CONV2D pixel at the AVX2 level (AVX2 + F16C): a packed block of 16
 *        output channels at a time, as two ymm of fp32 sums (conv2d_fp16_tile.h), then the
 *        reference's bias, activation and rounding lane by lane.
 */
#include "kernels/fast/x86_intrinsics.h"
#if TVM_NPU_X86_64

#include <algorithm>

#include "kernels/fast/conv2d_fp16.h"
#include "kernels/ref/ref_common.h"
// The shared sums, compiled for AVX2 + F16C.
#define NPU_TILE_TARGET NPU_TARGET_AVX2_F16C
#include "kernels/fast/conv2d_fp16_tile.h"
#undef NPU_TILE_TARGET

namespace tvm_npu {
namespace fast {
namespace {

struct Avx2F16 {
  NPU_TARGET_AVX2_F16C static __m256 Set1(float v) { return _mm256_set1_ps(v); }
  NPU_TARGET_AVX2_F16C static __m256 LoadHalves(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // No FMA at this level: the product (exact), then the add.
  NPU_TARGET_AVX2_F16C static __m256 MulAdd(__m256 x, __m256 w, __m256 acc) {
    return _mm256_add_ps(acc, _mm256_mul_ps(x, w));
  }
};

}  // namespace

NPU_TARGET_AVX2_F16C void Conv2DFp16PixelAvx2(const Fp16Args& a, uint8_t* out_px) {
  const stream::Conv2DOperands& op = *a.op;
  for (size_t n = 0; n < op.oc; n += kFp16Lanes) {
    __m256 acc[2];
    SumProducts<Avx2F16>(a, n, acc);
    alignas(32) float lanes[kFp16Lanes];
    _mm256_store_ps(lanes, acc[0]);
    _mm256_store_ps(lanes + 8, acc[1]);
    const size_t left = std::min<size_t>(kFp16Lanes, op.oc - n);
    for (size_t i = 0; i < left; ++i) {
      float v = lanes[i];
      if (a.bias != nullptr) v += a.bias[n + i];
      ref::StoreHalf(out_px + (n + i) * 2, ref::Activate(v, op.act, a.lo, a.hi));
    }
  }
}

}  // namespace fast
}  // namespace tvm_npu
#endif  // TVM_NPU_X86_64
