/*!
 * \file conv2d_int8_fast.cc
 * \brief Fast int8 CONV2D (conv2d_fast.h): dense as im2col + the level's GEMM tile, depthwise
 *        one output pixel at a time, vectorized across channels; both split into tiles of
 *        output pixels (and, for dense, of output channels) run by the thread pool.
 */
#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/conv_window.h"
#include "kernels/fast/gemm_int8.h"
#include "kernels/fast/thread_pool.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

size_t RoundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }

// Work below this many MACs per task is not worth a hand-off to another thread.
constexpr size_t kMinTaskMacs = 1 << 16;

// u = x + 128 as an unsigned byte is x with its sign bit flipped: 8 bytes per step.
inline void FlipSign(const uint8_t* src, size_t n, uint8_t* dst) {
  size_t c = 0;
  for (; c + 8 <= n; c += 8) {
    uint64_t v;
    std::memcpy(&v, src + c, sizeof(v));
    v ^= 0x8080808080808080ull;
    std::memcpy(dst + c, &v, sizeof(v));
  }
  for (; c < n; ++c) dst[c] = static_cast<uint8_t>(src[c] ^ 0x80u);
}

inline void FlipSign(const uint8_t* src, size_t n, int16_t* dst) {
  for (size_t c = 0; c < n; ++c) dst[c] = static_cast<int16_t>(src[c] ^ 0x80u);
}

// The window of output pixel p as one row of kp elements of u = x + 128. A tap in the padding
// holds z_x + 128, i.e. x - z_x = 0, so it adds nothing, as the reference skips it.
template <typename T>
void Im2ColRow(const stream::Conv2DOperands& op, const InteriorWindow& window, const uint8_t* in,
               uint64_t r, uint64_t q, size_t kp, T* row) {
  const T pad = static_cast<T>(static_cast<int32_t>(op.in_zp) + 128);
  const size_t ic = op.in_c;
  T* dst = row;
  if (window.Inside(r, q)) {
    const uint8_t* first = window.First(in, r, q);
    for (uint64_t off : window.run) {
      FlipSign(first + off, window.run_elems, dst);
      dst += window.run_elems;
    }
    std::fill(dst, row + kp, T{0});
    return;
  }
  for (uint64_t i = 0; i < op.kh; ++i) {
    uint64_t y;
    const bool row_in = ref::InputCoord(r, op.stride_h, i, op.dil_h, op.pad_top, op.in_h, &y);
    for (uint64_t j = 0; j < op.kw; ++j, dst += ic) {
      uint64_t x;
      if (!row_in || !ref::InputCoord(q, op.stride_w, j, op.dil_w, op.pad_left, op.in_w, &x)) {
        std::fill(dst, dst + ic, pad);
        continue;
      }
      FlipSign(in + y * op.in_stride + x * stream::InPixelStride(op), ic, dst);
    }
  }
  std::fill(dst, row + kp, T{0});
}

template <typename T>
void DenseTask(const stream::Conv2DOperands& op, const InteriorWindow& window, const uint8_t* in,
               uint8_t* out, GemmInt8Task t, size_t p0, size_t rows, int level) {
  const size_t tile = GemmTileM(level);
  thread_local std::vector<T> a;
  thread_local std::vector<int8_t*> out_rows;
  // Every row is written whole; only the rows that round the last tile up are zeroed.
  a.resize(RoundUp(rows, tile) * t.kp);
  std::fill(a.begin() + rows * t.kp, a.end(), T{0});
  out_rows.resize(rows);
  uint64_t r = p0 / op.out_w, q = p0 % op.out_w;
  for (size_t i = 0; i < rows; ++i) {
    Im2ColRow(op, window, in, r, q, t.kp, a.data() + i * t.kp);
    out_rows[i] = reinterpret_cast<int8_t*>(OutPixel(op, out, r, q));
    if (++q == op.out_w) q = 0, ++r;
  }
  t.a = a.data();
  t.m = rows;
  t.out_rows = out_rows.data();
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni) return GemmInt8Avx512Vnni(t);
  if (level == kLevelAvx2) return GemmInt8Avx2(t);
#endif
  GemmInt8Portable(t);
}

}  // namespace

void DenseRequant(const stream::Conv2DOperands& op, const PackedWeights& w, const int32_t* bias,
                  const float* scale, std::vector<int32_t>* bias_adj,
                  std::vector<float>* scale_pad) {
  const size_t oc = op.oc, oc_pad = RoundUp(oc, GemmBlockN(w.level));
  // bias - (z_x + 128) * sum_k w in wrapping uint32: with A = x - z_x + (z_x + 128) the GEMM's
  // sum then equals bias + sum (x - z_x) * w mod 2^32, the reference's accumulator.
  bias_adj->assign(oc_pad, 0);
  scale_pad->assign(oc_pad, 1.0f);
  const uint32_t shift = static_cast<uint32_t>(static_cast<int32_t>(op.in_zp) + 128);
  for (size_t o = 0; o < oc; ++o) {
    (*bias_adj)[o] = ref::WrapI32(static_cast<uint32_t>(bias[o]) - shift * w.wsum[o]);
    (*scale_pad)[o] = scale[o];
  }
}

void Conv2DInt8Dense(const stream::Conv2DOperands& op, const uint8_t* in, const PackedWeights& w,
                     const int32_t* bias_adj, const float* scale_pad, uint8_t* out) {
  const Level level = static_cast<Level>(w.level);
  const size_t k = w.k, kp = w.kp, oc = op.oc;
  const size_t block = GemmBlockN(level), oc_pad = RoundUp(oc, block);
  GemmInt8Task t{};
  t.kp = kp;
  t.b = w.packed.data();
  t.bias_adj = bias_adj;
  t.scale = scale_pad;
  t.zp = static_cast<int32_t>(op.out_zp);
  t.lo = static_cast<int32_t>(op.clip_lo);
  t.hi = static_cast<int32_t>(op.clip_hi);

  // Tiles: rows of output pixels times blocks of output channels, enough of them to keep every
  // thread busy, none so small that handing it over costs more than it computes.
  const size_t m = uint64_t{op.out_h} * op.out_w, tile = GemmTileM(level);
  const size_t threads = static_cast<size_t>(NumThreads());
  const size_t macs = std::max<size_t>(1, m * oc * k);
  const size_t want = std::max<size_t>(1, std::min(threads * 4, macs / kMinTaskMacs));
  size_t n_chunks =
      std::min(oc_pad / block, std::max<size_t>(1, want / std::max<size_t>(1, m / (8 * tile))));
  const size_t n_step = RoundUp(oc_pad / n_chunks, block);
  n_chunks = (oc_pad + n_step - 1) / n_step;
  const size_t m_chunks = std::max<size_t>(1, std::min((m + tile - 1) / tile, want / n_chunks));
  const size_t m_step = RoundUp((m + m_chunks - 1) / m_chunks, tile);
  const size_t m_tasks = (m + m_step - 1) / m_step;
  const InteriorWindow window(op);
  ParallelFor(m_tasks * n_chunks, [&](size_t task) {
    const size_t p0 = (task / n_chunks) * m_step, n0 = (task % n_chunks) * n_step;
    GemmInt8Task part = t;
    part.n0 = n0;
    part.n1 = std::min(oc, n0 + n_step);
    const size_t rows = std::min(m_step, m - p0);
    if (level == kLevelAvx2) {
      DenseTask<int16_t>(op, window, in, out, part, p0, rows, level);
    } else {
      DenseTask<uint8_t>(op, window, in, out, part, p0, rows, level);
    }
  });
}

void Conv2DInt8Depthwise(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                         const int32_t* bias, const float* scale, uint8_t* out, Level level) {
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni) return Conv2DInt8DepthwiseVnni(op, in, w, bias, scale, out);
#else
  (void)level;
#endif
  const size_t c = op.oc, c_pad = RoundUp(c, 16), taps = uint64_t{op.kh} * op.kw;
  // Weights [C][KH][KW][1] turned to [tap][c_pad] int32, so a tap's channels are contiguous.
  std::vector<int32_t> w32(taps * c_pad, 0), bias_pad(c_pad, 0);
  std::vector<float> scale_pad(c_pad, 1.0f);
  for (size_t o = 0; o < c; ++o) {
    const int8_t* row = reinterpret_cast<const int8_t*>(w) + o * op.w_stride;
    for (size_t tap = 0; tap < taps; ++tap) w32[tap * c_pad + o] = row[tap];
    bias_pad[o] = bias[o];
    scale_pad[o] = scale[o];
  }
  void (*pixel)(const DwPixel&) = DwPixelPortable;
#if TVM_NPU_X86_64
  if (level == kLevelAvx2) pixel = DwPixelAvx2;
#endif
  const size_t row_macs = std::max<size_t>(1, uint64_t{op.out_w} * c * taps);
  const size_t rows_per_task = std::max<size_t>(1, kMinTaskMacs / row_macs);
  const size_t tasks = (op.out_h + rows_per_task - 1) / rows_per_task;
  ParallelFor(tasks, [&](size_t task) {
    std::vector<const uint8_t*> xs(taps);
    std::vector<uint32_t> tap_ids(taps);
    DwPixel p{};
    p.x = xs.data();
    p.tap = tap_ids.data();
    p.w = w32.data();
    p.c = c;
    p.c_pad = c_pad;
    p.bias = bias_pad.data();
    p.scale = scale_pad.data();
    p.in_zp = static_cast<int32_t>(op.in_zp);
    p.zp = static_cast<int32_t>(op.out_zp);
    p.lo = static_cast<int32_t>(op.clip_lo);
    p.hi = static_cast<int32_t>(op.clip_hi);
    const size_t r_end = std::min<size_t>(op.out_h, (task + 1) * rows_per_task);
    for (size_t r = task * rows_per_task; r < r_end; ++r) {
      for (size_t q = 0; q < op.out_w; ++q) {
        p.n_taps = ValidTaps(op, in, r, q, xs.data(), tap_ids.data());
        p.out = reinterpret_cast<int8_t*>(OutPixel(op, out, r, q));
        pixel(p);
      }
    }
  });
}

}  // namespace fast
}  // namespace tvm_npu
