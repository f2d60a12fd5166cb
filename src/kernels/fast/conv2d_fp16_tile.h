/*!
 * \file conv2d_fp16_tile.h
 * \brief The sums of the dense fp16 CONV2D (conv2d_fp16.h), written once for the vector levels:
 *        NB vectors of output channels, each lane one channel's fp32 sum, take every product in
 *        the reference's order (kh, kw, ic; padding taps skipped). A level supplies its
 *        instructions as a struct `Isa` (conv2d_fp16_fast.cc: AVX-512, conv2d_fp16_avx2.cc):
 *
 *          Set1(v)            a vector of fp32 lanes, v in every lane
 *          LoadHalves(p)      a vector of halves from p, widened to fp32 (exact)
 *          MulAdd(x, w, acc)  acc + x * w with the reference's bits: the product of two halves
 *                             is exact in fp32, so only the add rounds, fused or not
 *
 * A level's file includes it once, with NPU_TILE_TARGET defined as its target attribute (with
 * F16C; x86_intrinsics.h says why); the templates are that file's own.
 */
#ifndef TVM_NPU_KERNELS_FAST_CONV2D_FP16_TILE_H_
#define TVM_NPU_KERNELS_FAST_CONV2D_FP16_TILE_H_

#ifndef NPU_TILE_TARGET
#error "define NPU_TILE_TARGET as the level's NPU_TARGET_* before including conv2d_fp16_tile.h"
#endif

#include <cstring>

#include "kernels/fast/conv2d_fp16.h"
#include "kernels/fast/x86_intrinsics.h"

namespace tvm_npu {
namespace fast {
namespace {

// acc[0, NB): the sums of output channels n.. of pixel a, a vector of them each. A vector holds
// part b % kParts of packed block b / kParts (AVX2: two ymm per block of 16).
template <typename Isa, int NB, typename Vec>
NPU_TILE_TARGET inline void SumProducts(const Fp16Args& a, size_t n, Vec (&acc)[NB]) {
  constexpr size_t kVecLanes = sizeof(Vec) / sizeof(float), kParts = kFp16Lanes / kVecLanes;
  const stream::Conv2DOperands& op = *a.op;
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) acc[b] = Isa::Set1(0.0f);  // +0.0, as the reference
  const uint16_t* wn = a.w + (n / kFp16Lanes) * a.k * kFp16Lanes;
  for (size_t t = 0; t < a.n_taps; ++t) {
    const uint8_t* px = a.px[t];
    const uint16_t* wk = wn + a.tap[t] * op.in_c * kFp16Lanes;
    for (uint64_t c = 0; c < op.in_c; ++c) {
      uint16_t h;
      std::memcpy(&h, px + c * 2, 2);
      const Vec xv = Isa::Set1(_cvtsh_ss(h));  // half -> fp32 is exact
#pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        const uint16_t* w = wk + (b / kParts) * a.k * kFp16Lanes + c * kFp16Lanes;
        acc[b] = Isa::MulAdd(xv, Isa::LoadHalves(w + (b % kParts) * kVecLanes), acc[b]);
      }
    }
  }
}

}  // namespace
}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_CONV2D_FP16_TILE_H_
