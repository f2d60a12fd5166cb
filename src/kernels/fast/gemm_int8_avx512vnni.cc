/*!
 * \file gemm_int8_avx512vnni.cc
 * \brief AVX-512 VNNI int8 tiles: vpdpbusd (64 u8 x s8 products summed into 16 int32 lanes,
 *        wrapping, not saturating — vpdpbusds would saturate) and a 16-lane requantization.
 *
 * Every function carries its own target attribute; the dispatcher calls them only when the CPU
 * has the instructions, so the rest of the library needs no -mavx512 flags.
 */
#include "kernels/fast/cpu_level.h"
#if TVM_NPU_X86_64

#include "kernels/fast/gemm_int8.h"
#include "kernels/fast/requant_x86.h"
// The shared GEMM tile, compiled for AVX-512 VNNI.
#define NPU_TILE_TARGET NPU_TARGET_AVX512_VNNI
#include "kernels/fast/gemm_int8_tile.h"
#undef NPU_TILE_TARGET

namespace tvm_npu {
namespace fast {
namespace {

// The VNNI instructions of gemm_int8_tile.h: A as u8, B as s8, vpdpbusd's four products per
// int32 lane, 16 lanes; the channels past n1 are masked.
struct Vnni {
  NPU_TARGET_AVX512_VNNI static __m512i Set1(int32_t v) { return _mm512_set1_epi32(v); }
  template <typename T>
  NPU_TARGET_AVX512_VNNI static __m512i Load(const T* p) {
    return _mm512_loadu_si512(p);
  }
  NPU_TARGET_AVX512_VNNI static __m512i Dot(__m512i acc, __m512i a, __m512i b) {
    return _mm512_dpbusd_epi32(acc, a, b);
  }

  struct Channels {
    __mmask16 mask;
    __m512i bias;
    __m512 scale;
  };
  NPU_TARGET_AVX512_VNNI static Channels LoadChannels(const int32_t* bias, const float* scale,
                                                      size_t left) {
    const __mmask16 mask = Lanes16(left);
    return {mask, _mm512_maskz_loadu_epi32(mask, bias),
            _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mask, scale)};
  }
  NPU_TARGET_AVX512_VNNI static void Store(int8_t* out, __m512i acc, const Channels& ch, __m512i zp,
                                           __m512i lo, __m512i hi) {
    const __m512i q = Requant16(_mm512_add_epi32(acc, ch.bias), ch.scale, zp, lo, hi, ch.mask);
    _mm512_mask_cvtepi32_storeu_epi8(out, ch.mask, q);
  }
};

}  // namespace

NPU_TARGET_AVX512_VNNI void GemmInt8Avx512Vnni(const GemmInt8Task& t) {
  GemmTiles<Vnni, uint8_t, int8_t, /*kFitRows=*/true>(t);
}

}  // namespace fast
}  // namespace tvm_npu
#endif  // TVM_NPU_X86_64
