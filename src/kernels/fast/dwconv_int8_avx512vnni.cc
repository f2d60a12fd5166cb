/*!
 * \file dwconv_int8_avx512vnni.cc
 * \brief Depthwise int8 CONV2D with VNNI: four taps of 64 channels per vpdpbusd group.
 *
 * vpdpbusd sums four adjacent byte products per int32 lane, so each lane must see four taps of
 * ONE channel. The four taps' 64-channel vectors are interleaved by byte then by word
 * (unpack*_epi8, unpack*_epi16): the k-th result holds, in 128-bit lane L and dword j, the four
 * taps of channel L*16 + 4k + j. Weights, biases and scales are packed in that same order, and
 * the four requantized results are transposed back (a 4x4 dword transpose) before the store.
 * Every output pixel has all KH*KW taps (rounded up to a multiple of 4): a tap in the padding,
 * or past KH*KW, reads a pixel of z_x, whose u = x + 128 the bias folds out as in the dense GEMM
 * ((z_x + 128) * sum w), and the taps past KH*KW have zero weights.
 */
#include "kernels/fast/cpu_level.h"
#if TVM_NPU_X86_64
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/conv_window.h"
#include "kernels/fast/requant_x86.h"
#include "kernels/fast/thread_pool.h"

namespace tvm_npu {
namespace fast {
namespace {

constexpr size_t kBlock = 64;  // channels per group of four zmm accumulators

struct DwVnniArgs {
  const stream::Conv2DOperands* op;
  size_t c, taps_pad, blocks;
  const int8_t* w;       // [block][taps_pad / 4][k = 4][64 bytes]
  const int32_t* bias;   // [block][k][16], permuted as the accumulators
  const float* scale;    // likewise
  const uint8_t* pad;    // blocks * 64 bytes of z_x
};

// unpacklo (kHi false) or unpackhi, per 128-bit lane, of elements of kBits bits.
template <int kBits, bool kHi>
NPU_TARGET_AVX512_VNNI inline __m512i Unpack(__m512i a, __m512i b) {
  if constexpr (kBits == 8) return kHi ? _mm512_unpackhi_epi8(a, b) : _mm512_unpacklo_epi8(a, b);
  return kHi ? _mm512_unpackhi_epi16(a, b) : _mm512_unpacklo_epi16(a, b);
}

template <int kBits, bool kHi>
NPU_TARGET_AVX512_VNNI inline __m128i Unpack(__m128i a, __m128i b) {
  if constexpr (kBits == 32) return kHi ? _mm_unpackhi_epi32(a, b) : _mm_unpacklo_epi32(a, b);
  return kHi ? _mm_unpackhi_epi64(a, b) : _mm_unpacklo_epi64(a, b);
}

// Two rounds of unpacks (kBits, then 2 * kBits) interleave four vectors: in each 128-bit lane,
// out[k] holds the lane's elements k * n .. k * n + n - 1 (n = 32 / kBits), each as a group of
// four: its value in v[0], v[1], v[2], v[3].
template <int kBits, typename V>
NPU_TARGET_AVX512_VNNI inline void Interleave4(const V (&v)[4], V (&out)[4]) {
  const V lo01 = Unpack<kBits, false>(v[0], v[1]), hi01 = Unpack<kBits, true>(v[0], v[1]);
  const V lo23 = Unpack<kBits, false>(v[2], v[3]), hi23 = Unpack<kBits, true>(v[2], v[3]);
  out[0] = Unpack<2 * kBits, false>(lo01, lo23);
  out[1] = Unpack<2 * kBits, true>(lo01, lo23);
  out[2] = Unpack<2 * kBits, false>(hi01, hi23);
  out[3] = Unpack<2 * kBits, true>(hi01, hi23);
}

// The lanes of acc[k] that are channels below `left`: lane 4L + j holds channel 16L + 4k + j.
inline unsigned Interleaved(size_t left, int k) {
  if (left >= 64) return 0xFFFFu;
  unsigned bits = 0;
  for (unsigned i = 0; i < 16; ++i) {
    if ((i / 4) * 16 + 4 * static_cast<unsigned>(k) + i % 4 < left) bits |= 1u << i;
  }
  return bits;
}

NPU_TARGET_AVX512_VNNI void Pixel(const DwVnniArgs& a, const uint8_t* const* x, int8_t* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zp = _mm512_set1_epi32(static_cast<int32_t>(a.op->out_zp));
  const __m512i lo = _mm512_set1_epi32(static_cast<int32_t>(a.op->clip_lo));
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(a.op->clip_hi));
  for (size_t blk = 0; blk < a.blocks; ++blk) {
    const size_t c0 = blk * kBlock, left = a.c - c0;
    const __mmask64 mask = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
    const int8_t* w = a.w + blk * a.taps_pad * kBlock;
    for (size_t g = 0; g < a.taps_pad; g += 4, w += 4 * kBlock) {
      __m512i v[4];
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        v[m] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x[g + m] + c0), flip);
      }
      __m512i q[4];  // q[k] dword j of lane L: the four taps of channel L*16 + 4k + j
      Interleave4<8>(v, q);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        acc[k] = _mm512_dpbusd_epi32(acc[k], q[k], _mm512_loadu_si512(w + k * 64));
      }
    }
    __m128i b[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const size_t at = c0 + k * 16;
      const __m512i sum = _mm512_add_epi32(acc[k], _mm512_loadu_si512(a.bias + at));
      b[k] = _mm512_cvtepi32_epi8(
          Requant16(sum, _mm512_loadu_ps(a.scale + at), zp, lo, hi, Interleaved(left, k)));
    }
    // b[k] dword L = channels L*16 + 4k .. +3; channels L*16 .. +15 are dword L of b[0..3].
    __m128i r[4];
    Interleave4<32>(b, r);
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) {
      if (left <= static_cast<size_t>(l) * 16) break;
      _mm_mask_storeu_epi8(out + c0 + l * 16, Lanes16(left - l * 16), r[l]);
    }
  }
}

}  // namespace

void Conv2DInt8DepthwiseVnni(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                             const int32_t* bias, const float* scale, uint8_t* out) {
  const size_t c = op.oc, taps = uint64_t{op.kh} * op.kw, taps_pad = (taps + 3) / 4 * 4;
  const size_t blocks = (c + kBlock - 1) / kBlock;
  std::vector<int8_t> wp(blocks * taps_pad * kBlock, 0);
  std::vector<int32_t> bp(blocks * kBlock, 0);
  std::vector<float> sp(blocks * kBlock, 1.0f);
  const uint32_t shift = static_cast<uint32_t>(static_cast<int32_t>(op.in_zp) + 128);
  for (size_t ch = 0; ch < c; ++ch) {
    // Channel ch sits in block ch / 64, 128-bit lane L, accumulator k, dword j.
    const size_t blk = ch / kBlock, L = (ch % kBlock) / 16, k = (ch % 16) / 4, j = ch % 4;
    const int8_t* row = reinterpret_cast<const int8_t*>(w) + ch * op.w_stride;
    uint32_t wsum = 0;
    for (size_t t = 0; t < taps; ++t) {
      wp[((blk * taps_pad + t / 4 * 4) + k) * kBlock + (L * 4 + j) * 4 + t % 4] = row[t];
      wsum += static_cast<uint32_t>(int32_t{row[t]});
    }
    const size_t slot = blk * kBlock + k * 16 + L * 4 + j;
    bp[slot] = static_cast<int32_t>(static_cast<uint32_t>(bias[ch]) - shift * wsum);
    sp[slot] = scale[ch];
  }
  const std::vector<uint8_t> pad(blocks * kBlock, static_cast<uint8_t>(op.in_zp));
  const DwVnniArgs args{&op, c, taps_pad, blocks, wp.data(), bp.data(), sp.data(), pad.data()};
  const size_t row_work = std::max<size_t>(1, uint64_t{op.out_w} * c * taps);
  const size_t rows_per_task = std::max<size_t>(1, (size_t{1} << 16) / row_work);
  const size_t tasks = (op.out_h + rows_per_task - 1) / rows_per_task;
  const InteriorWindow window(op);
  ParallelFor(tasks, [&](size_t task) {
    std::vector<const uint8_t*> x(taps_pad, pad.data()), valid(taps);  // taps past KH*KW: pad
    std::vector<uint32_t> tap(taps);
    const size_t r_end = std::min<size_t>(op.out_h, (task + 1) * rows_per_task);
    for (size_t r = task * rows_per_task; r < r_end; ++r) {
      for (size_t q = 0; q < op.out_w; ++q) {
        if (window.Inside(r, q)) {
          const uint8_t* first = window.First(in, r, q);
          for (size_t t = 0; t < taps; ++t) x[t] = first + window.offset[t];
        } else {
          std::fill(x.begin(), x.begin() + taps, pad.data());
          const size_t n = ValidTaps(op, in, r, q, valid.data(), tap.data());
          for (size_t i = 0; i < n; ++i) x[tap[i]] = valid[i];
        }
        Pixel(args, x.data(), reinterpret_cast<int8_t*>(OutPixel(op, out, r, q)));
      }
    }
  });
}

}  // namespace fast
}  // namespace tvm_npu
#endif  // TVM_NPU_X86_64
