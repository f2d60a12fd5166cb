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

#include <cstring>

#include "kernels/fast/avx512_requant.h"
#include "kernels/fast/gemm_int8.h"


namespace tvm_npu {
namespace fast {
namespace {

// MR rows x NB blocks of 16 channels starting at channel n; rows [0, m) are written.
template <int MR, int NB>
NPU_TARGET_AVX512_VNNI void Tile(const GemmInt8Task& t, const uint8_t* a, size_t m, size_t n) {
  const int8_t* b = static_cast<const int8_t*>(t.b) + (n / 16) * t.kp * 16;
  __m512i acc[MR][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    #pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (size_t k = 0; k < t.kp; k += 4) {
    __m512i bv[NB];
    #pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) bv[j] = _mm512_loadu_si512(b + j * t.kp * 16 + k * 16);
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * t.kp + k, sizeof(quad));
      const __m512i av = _mm512_set1_epi32(quad);
      #pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], av, bv[j]);
    }
  }
  const __m512i zp = _mm512_set1_epi32(t.zp), lo = _mm512_set1_epi32(t.lo);
  const __m512i hi = _mm512_set1_epi32(t.hi);
  #pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    const size_t c = n + j * 16;
    if (c >= t.n1) break;
    const __mmask16 mask = TailMask(t.n1 - c);
    const __m512i bias = _mm512_maskz_loadu_epi32(mask, t.bias_adj + c);
    const __m512 scale = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mask, t.scale + c);
    #pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      if (static_cast<size_t>(r) >= m) break;
      const __m512i q = Requant16(_mm512_add_epi32(acc[r][j], bias), scale, zp, lo, hi);
      _mm512_mask_cvtepi32_storeu_epi8(t.out_rows[r] + c, mask, q);
    }
  }
}

// A tile of MR rows holding only m of them: the smallest MR >= m, so a one-pixel GEMM (an LSTM
// step's matmul) does not compute five zero rows.
template <int NB>
NPU_TARGET_AVX512_VNNI void Rows(const GemmInt8Task& t, const uint8_t* a, size_t m, size_t n) {
  if (m == 1) return Tile<1, NB>(t, a, m, n);
  if (m == 2) return Tile<2, NB>(t, a, m, n);
  if (m <= 4) return Tile<4, NB>(t, a, m, n);
  Tile<6, NB>(t, a, m, n);
}

}  // namespace

NPU_TARGET_AVX512_VNNI void GemmInt8Avx512Vnni(const GemmInt8Task& t) {
  const uint8_t* a = static_cast<const uint8_t*>(t.a);
  ForEachTile(t, 6, 16, [a](const GemmInt8Task& rows, size_t i, size_t m, size_t n, bool wide) {
    if (wide) {
      Rows<2>(rows, a + i * rows.kp, m, n);
    } else {
      Rows<1>(rows, a + i * rows.kp, m, n);
    }
  });
}

}  // namespace fast
}  // namespace tvm_npu
#endif  // TVM_NPU_X86_64
