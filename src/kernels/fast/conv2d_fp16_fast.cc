/*!
 * \file conv2d_fp16_fast.cc
 * \brief Fast fp16 dense CONV2D: vectorized across output channels, never across the reduction.
 *
 * Each vector lane is one output channel's fp32 accumulator and receives, in the reference's
 * order (kh, kw, ic, padding taps skipped), the exact product of two halves and one rounded
 * fp32 add (the product of two halves is exact in fp32 -- 11 x 11 significant bits, and far
 * from fp32's exponent limits -- so only the add rounds, and the AVX-512 tile can use one fused
 * multiply-add for both), so every lane holds the reference's bits. The bias add, activation (comparisons written as
 * Activate's) and the fp16 rounding (vcvtps2ph, round to nearest even) follow. Two cases keep the
 * scalar conversion: NaN lanes (vcvtps2ph quiets a signalling NaN, FloatToHalfBits keeps it),
 * and an MXCSR with flush-to-zero / denormals-are-zero, which the integer conversion ignores.
 * Depthwise fp16 (AVX-512 only) is vectorized across channels, each lane adding its taps in the
 * reference's (kh, kw) order. The portable level runs the reference. The sums of the dense tile
 * are conv2d_fp16_tile.h's, shared with the AVX2 pixel (conv2d_fp16_avx2.cc).
 */
#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/conv2d_fp16.h"
#include "kernels/fast/conv_window.h"
#include "kernels/fast/fp16_avx512.h"
#include "kernels/fast/fp_env.h"
#include "kernels/fast/thread_pool.h"
#include "kernels/fast/x86_intrinsics.h"
#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/ref_common.h"
#if TVM_NPU_X86_64
// The shared sums, compiled for AVX-512 + F16C.
#define NPU_TILE_TARGET NPU_TARGET_AVX512_F16C
#include "kernels/fast/conv2d_fp16_tile.h"
#undef NPU_TILE_TARGET
#endif

namespace tvm_npu {
namespace fast {
namespace {

constexpr size_t kLanes = kFp16Lanes;  // packing block: one zmm, or two ymm

// Scalar store of lanes [0, n) of `v`: the reference's conversion, NaN payloads included.
inline void StoreScalar(const float* v, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) ref::StoreHalf(out + i * 2, v[i]);
}

#if TVM_NPU_X86_64
// [oc_pad / 16][k][16] halves: the 16 channels' weights of one reduction element are one vector,
// widened to fp32 as it is read (exact). Halves rather than fp32: an LSTM gate's 64 x 64 weights
// are 8 KB, so the four gates of a step stay in L1 from one step to the next.
std::shared_ptr<const PackedWeights> PackFp16(int tag, const uint8_t* w, size_t w_stride, size_t k,
                                              size_t oc) {
  std::shared_ptr<PackedWeights> e = NewEntry(tag, w, w_stride, k * 2, oc);
  e->k = e->kp = k;
  const size_t oc_pad = (oc + kLanes - 1) / kLanes * kLanes;
  e->packed.assign(oc_pad * k * sizeof(uint16_t), 0);
  for (size_t o = 0; o < oc; ++o) {
    for (size_t i = 0; i < k; ++i) {
      std::memcpy(e->packed.data() + (((o / kLanes) * k + i) * kLanes + o % kLanes) * 2,
                  w + o * w_stride + i * 2, 2);
    }
  }
  return e;
}

// Depthwise: [taps][oc_pad] halves, so one tap's 16 channels are one vector.
std::shared_ptr<const PackedWeights> PackFp16Depthwise(int tag, const uint8_t* w, size_t w_stride,
                                                       size_t taps, size_t oc) {
  std::shared_ptr<PackedWeights> e = NewEntry(tag, w, w_stride, taps * 2, oc);
  const size_t oc_pad = (oc + kLanes - 1) / kLanes * kLanes;
  e->k = taps;
  e->kp = oc_pad;
  e->packed.assign(taps * oc_pad * sizeof(uint16_t), 0);
  for (size_t o = 0; o < oc; ++o) {
    for (size_t t = 0; t < taps; ++t) {
      std::memcpy(e->packed.data() + (t * oc_pad + o) * 2, w + o * w_stride + t * 2, 2);
    }
  }
  return e;
}

// The bias, the activation (comparisons written as Activate's) and the fp16 rounding of the 16
// channels from c0 (fewer at the end), from their fp32 accumulators `v`.
NPU_TARGET_AVX512_F16C inline void Finish(const Fp16Args& a, __m512 v, size_t c0, uint8_t* out_px) {
  const stream::Conv2DOperands& op = *a.op;
  if (a.bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(a.bias + c0));
  if (op.act == stream::kActRelu) {
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v,
                             _mm512_setzero_ps());
  } else if (op.act == stream::kActClip) {
    const __m512 lo = _mm512_set1_ps(a.lo), hi = _mm512_set1_ps(a.hi);
    const __mmask16 below = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
    v = _mm512_mask_blend_ps(below, v, lo);
  }
  const size_t left = std::min<size_t>(kLanes, op.oc - c0);
  const __mmask16 mask = static_cast<__mmask16>(left == 16 ? 0xFFFF : (1u << left) - 1);
  if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & mask) {
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, v);
    StoreScalar(lanes, left, out_px + c0 * 2);
  } else {
    _mm256_mask_storeu_epi16(out_px + c0 * 2, mask, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
}

// The AVX-512 instructions of conv2d_fp16_tile.h: 16 lanes, one fused multiply-add.
struct Avx512F16 {
  NPU_TARGET_AVX512_F16C static __m512 Set1(float v) { return _mm512_set1_ps(v); }
  NPU_TARGET_AVX512_F16C static __m512 LoadHalves(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  NPU_TARGET_AVX512_F16C static __m512 MulAdd(__m512 x, __m512 w, __m512 acc) {
    return _mm512_fmadd_ps(x, w, acc);
  }
};

template <int NB>
NPU_TARGET_AVX512_F16C void BlockAvx512(const Fp16Args& a, size_t n, uint8_t* out_px) {
  const stream::Conv2DOperands& op = *a.op;
  __m512 acc[NB];
  SumProducts<Avx512F16>(a, n, acc);
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    const size_t c0 = n + b * kLanes;
    if (c0 >= op.oc) break;
    Finish(a, acc[b], c0, out_px);
  }
}

// Depthwise, one output pixel: each lane is one channel, adding its taps' exact products in the
// reference's (kh, kw) order (a.k holds the packed row length, oc_pad).
NPU_TARGET_AVX512_F16C void DwPixelAvx512(const Fp16Args& a, uint8_t* out_px) {
  const size_t oc = a.op->oc;
  for (size_t c0 = 0; c0 < oc; c0 += kLanes) {
    const __mmask16 mask = Lanes16(oc - c0);
    __m512 acc = _mm512_setzero_ps();  // +0.0, as the reference
    for (size_t t = 0; t < a.n_taps; ++t) {
      const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, a.px[t] + c0 * 2));
      const __m512 w = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.w + a.tap[t] * a.k + c0)));
      acc = _mm512_fmadd_ps(x, w, acc);  // exact product, one rounding: the reference's add
    }
    Finish(a, acc, c0, out_px);
  }
}

NPU_TARGET_AVX512_F16C void PixelAvx512(const Fp16Args& a, uint8_t* out_px) {
  for (size_t n = 0; n < a.op->oc; n += 4 * kLanes) {
    const size_t left = a.op->oc - n;
    if (left > 3 * kLanes) {
      BlockAvx512<4>(a, n, out_px);
    } else if (left > 2 * kLanes) {
      BlockAvx512<3>(a, n, out_px);
    } else if (left > kLanes) {
      BlockAvx512<2>(a, n, out_px);
    } else {
      BlockAvx512<1>(a, n, out_px);
    }
  }
}

#endif

}  // namespace

void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out, Level level, WeightCache* cache, size_t key) {
  const bool depthwise = stream::IsDepthwise(op);
  bool vector = level >= (depthwise ? kLevelAvx512Vnni : kLevelAvx2);  // depthwise: AVX-512 only
#if TVM_NPU_X86_64
  vector = vector && NoFlushToZero();  // FTZ or DAZ set: reference
#else
  vector = false;
  (void)cache, (void)key;
#endif
  if (!vector) return Conv2DRef(op, in, w, bias, out, 0);
#if TVM_NPU_X86_64
  const size_t k = uint64_t{op.kh} * op.kw * (depthwise ? 1 : op.in_c);
  const int tag = level + kFp16Tag;
  auto pack = [&] {
    return depthwise ? PackFp16Depthwise(tag, w, op.w_stride, k, op.oc)
                     : PackFp16(tag, w, op.w_stride, k, op.oc);
  };
  const std::shared_ptr<const PackedWeights> packed =
      cache != nullptr ? cache->Get(key, tag, w, op.w_stride, k * 2, op.oc, pack) : pack();
  // The bias padded to whole vectors; kept per thread, so a call allocates nothing once warm.
  thread_local std::vector<float> bias_pad;
  if (bias != nullptr) {
    bias_pad.assign((op.oc + kLanes - 1) / kLanes * kLanes, 0.0f);
    std::memcpy(bias_pad.data(), bias, uint64_t{op.oc} * 4);
  }
  const Fp16Args args{&op,
                      in,
                      reinterpret_cast<const uint16_t*>(packed->packed.data()),
                      depthwise ? packed->kp : k,
                      bias != nullptr ? bias_pad.data() : nullptr,
                      ref::BitsToFloat(op.clip_lo),
                      ref::BitsToFloat(op.clip_hi),
                      nullptr,
                      nullptr,
                      0};
  void (*pixel)(const Fp16Args&, uint8_t*) = depthwise                   ? DwPixelAvx512
                                             : level == kLevelAvx512Vnni ? PixelAvx512
                                                                         : Conv2DFp16PixelAvx2;
  // One task per output row: rows are independent and each is at least one pixel of work.
  const bool split = uint64_t{op.out_h} * op.out_w * op.oc * k >= (1u << 16);
  ParallelFor(split ? op.out_h : 1, [&](size_t task) {
    const size_t r0 = split ? task : 0, r1 = split ? task + 1 : op.out_h;
    thread_local std::vector<const uint8_t*> px;
    thread_local std::vector<uint32_t> tap;
    px.resize(uint64_t{op.kh} * op.kw);
    tap.resize(px.size());
    Fp16Args a = args;
    a.px = px.data();
    a.tap = tap.data();
    for (size_t r = r0; r < r1; ++r) {
      for (size_t q = 0; q < op.out_w; ++q) {
        a.n_taps = ValidTaps(op, in, r, q, px.data(), tap.data());
        pixel(a, OutPixel(op, out, r, q));
      }
    }
  });
#endif
}

}  // namespace fast
}  // namespace tvm_npu
