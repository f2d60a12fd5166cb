/*!
 * \file gemm_int8_avx2.cc
 * \brief AVX2 int8 tiles. Without VNNI the exact product is vpmaddwd on int16 (two products
 *        summed into an int32 lane, never saturating); vpmaddubsw would saturate its int16 sums
 *        (2 * 255 * 128 > 32767), which the contract does not allow.
 */
#include "kernels/fast/x86_intrinsics.h"
#if TVM_NPU_X86_64

#include <cstring>

#include "kernels/fast/gemm_int8.h"
#include "kernels/fast/requant_x86.h"
// The shared GEMM tile, compiled for AVX2.
#define NPU_TILE_TARGET NPU_TARGET_AVX2
#include "kernels/fast/gemm_int8_tile.h"
#undef NPU_TILE_TARGET

namespace tvm_npu {
namespace fast {
namespace {

// The lanes of the first min(n, 8) elements, a bit each.
inline unsigned Lanes8(size_t n) { return n >= 8 ? 0xFFu : (1u << n) - 1; }

NPU_TARGET_AVX2 inline void Store8(int8_t* out, __m256i q, size_t n) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), q);
  for (size_t i = 0; i < n && i < 8; ++i) out[i] = static_cast<int8_t>(lanes[i]);
}

// The AVX2 instructions of gemm_int8_tile.h: A and B as int16, vpmaddwd's two products per
// int32 lane, 8 lanes.
struct Avx2 {
  NPU_TARGET_AVX2 static __m256i Set1(int32_t v) { return _mm256_set1_epi32(v); }
  template <typename T>
  NPU_TARGET_AVX2 static __m256i Load(const T* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  NPU_TARGET_AVX2 static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }

  struct Channels {
    __m256i bias;
    __m256 scale;
    size_t left;
  };
  // bias and scale are padded to whole vectors (0 and 1.0), so whole loads are in bounds.
  NPU_TARGET_AVX2 static Channels LoadChannels(const int32_t* bias, const float* scale,
                                               size_t left) {
    return {Load(bias), _mm256_loadu_ps(scale), left};
  }
  NPU_TARGET_AVX2 static void Store(int8_t* out, __m256i acc, const Channels& ch, __m256i zp,
                                    __m256i lo, __m256i hi) {
    Store8(out, Requant8(_mm256_add_epi32(acc, ch.bias), ch.scale, zp, lo, hi, Lanes8(ch.left)),
           ch.left);
  }
};

}  // namespace

NPU_TARGET_AVX2 void GemmInt8Avx2(const GemmInt8Task& t) {
  GemmTiles<Avx2, int16_t, int16_t, /*kFitRows=*/false>(t);
}

NPU_TARGET_AVX2 void DwPixelAvx2(const DwPixel& p) {
  const __m256i zx = _mm256_set1_epi32(p.in_zp), zp = _mm256_set1_epi32(p.zp);
  const __m256i lo = _mm256_set1_epi32(p.lo), hi = _mm256_set1_epi32(p.hi);
  for (size_t c = 0; c < p.c; c += 8) {
    __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.bias + c));
    for (size_t t = 0; t < p.n_taps; ++t) {
      // The last 8 channels may end before 8 bytes do: copy only the channels that exist.
      int64_t bytes = 0;
      std::memcpy(&bytes, p.x[t] + c, p.c - c < 8 ? p.c - c : 8);
      const __m256i x = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes));
      const __m256i w =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w + p.tap[t] * p.c_pad + c));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_sub_epi32(x, zx), w));
    }
    Store8(p.out + c, Requant8(acc, _mm256_loadu_ps(p.scale + c), zp, lo, hi, Lanes8(p.c - c)),
           p.c - c);
  }
}

}  // namespace fast
}  // namespace tvm_npu
#endif  // TVM_NPU_X86_64
