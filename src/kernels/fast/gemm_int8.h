/*!
 * \file gemm_int8.h
 * \brief The int8 tiles of each instruction-set level, internal to the fast int8 convolution:
 *        the GEMM + requantization tile of dense convolution, the depthwise pixel, and the
 *        requantization of a row.
 *
 * GEMM: C[i][o] = bias_adj[o] + sum_k A[i][k] * B[o][k] (int32, wrap-around), then
 * out_rows[i][o] = clamp(z_y + round_half_even(fp32(fp32(C) * scale[o])), lo, hi).
 * A holds u = x + 128 (0..255) so that VNNI's unsigned-by-signed product applies; bias_adj
 * folds in -(z_x + 128) * sum_k B[o][k], which leaves sum_k (x - z_x) * w exactly (mod 2^32).
 *
 * The tiles unroll their loops over the register block (#pragma GCC unroll): left as loops,
 * GCC keeps the accumulator array in memory and the tile runs 3x slower.
 */
#ifndef TVM_NPU_KERNELS_FAST_GEMM_INT8_H_
#define TVM_NPU_KERNELS_FAST_GEMM_INT8_H_

#include <cstddef>
#include <cstdint>

#include "kernels/fast/cpu_level.h"

namespace tvm_npu {
namespace fast {

struct GemmInt8Task {
  const void* a;      // rows of kp elements, a multiple of GemmTileM rows: uint8 (portable,
                      // VNNI) or int16 (AVX2)
  size_t m;           // rows to write
  size_t kp;          // K rounded up to a multiple of 4; A and B are zero past K
  const void* b;      // weights packed for the level (PackWeightsInt8)
  size_t n0, n1;      // output channels [n0, n1); n0 a multiple of GemmBlockN
  const int32_t* bias_adj;  // per output channel
  const float* scale;       // per output channel, finite and > 0
  int32_t zp, lo, hi;       // all within int8 (checked at load)
  int8_t* const* out_rows;  // m pointers, each to channel 0 of an output pixel
};

/*! \brief One output pixel of a depthwise convolution: acc[c] = bias[c] + sum over the n_taps
 *         valid taps t of (x_t[c] - z_x) * w[tap_t][c], requantized into out[0, c). */
struct DwPixel {
  const uint8_t* const* x;  // n_taps pointers to channel 0 of an input pixel (int8 data)
  const uint32_t* tap;     // their tap indices (kh * KW + kw)
  size_t n_taps;
  const int32_t* w;        // [taps][c_pad] weights widened to int32
  size_t c, c_pad;
  const int32_t* bias;
  const float* scale;
  int32_t in_zp, zp, lo, hi;
  int8_t* out;
};

/*!
 * \brief Visits the tiles of task `t`: tile(rows_task, a_offset_rows, m, n, wide) for blocks of
 *        `mr` rows and `2 * nr` channels; `wide` is false when at most `nr` channels are left.
 *        rows_task is `t` with out_rows advanced to the tile's first row.
 */
template <typename F>
inline void ForEachTile(const GemmInt8Task& t, size_t mr, size_t nr, F&& tile) {
  for (size_t n = t.n0; n < t.n1; n += 2 * nr) {
    // Rows innermost: the tile's weight block stays hot in L1 across them.
    for (size_t i = 0; i < t.m; i += mr) {
      GemmInt8Task rows = t;
      rows.out_rows = t.out_rows + i;
      tile(rows, i, t.m - i < mr ? t.m - i : mr, n, t.n1 - n > nr);
    }
  }
}

/*! \brief Output channels per task block (a multiple of the packing) and rows per tile. */
size_t GemmBlockN(int level);
size_t GemmTileM(int level);

/*! \brief Packs `oc` weight rows of K int8 (w_stride bytes apart) for `level`; `dst` holds
 *         PackedWeightsBytes(level, oc, kp) bytes. */
size_t PackedWeightsBytes(int level, size_t oc, size_t kp);
void PackWeightsInt8(int level, const int8_t* w, size_t w_stride, size_t k, size_t kp, size_t oc,
                     void* dst);

void GemmInt8Portable(const GemmInt8Task& t);
void DwPixelPortable(const DwPixel& p);
#if TVM_NPU_X86_64
void GemmInt8Avx2(const GemmInt8Task& t);
void DwPixelAvx2(const DwPixel& p);
void GemmInt8Avx512Vnni(const GemmInt8Task& t);  // depthwise: dwconv_int8_avx512vnni.cc
#endif

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_GEMM_INT8_H_
