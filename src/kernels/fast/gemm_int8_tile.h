/*!
 * \file gemm_int8_tile.h
 * \brief The int8 GEMM tile of gemm_int8.h, written once for the vector levels: MR rows x NB
 *        vectors of output channels stay in registers while K is walked, then each gets its
 *        bias, the requantization and the store. A level supplies its instructions as a struct
 *        `Isa` (gemm_int8_avx2.cc, gemm_int8_avx512vnni.cc):
 *
 *          Set1(v)    a vector of int32 lanes (one output channel each), v in every lane
 *          Load(p)    one vector from p
 *          Dot(acc, a, b)   acc + per lane the products of its 4 bytes of A in a and of the
 *                     packed weights in b (their element types: GemmTiles' A and B)
 *          Channels LoadChannels(bias, scale, left)   the bias and scale of a vector of channels,
 *                     `left` of which exist (the padded loads of gemm_int8.h, or masked ones)
 *          Store(out, acc, channels, zp, lo, hi)   requantizes acc + bias, stores its channels
 *
 * A level's file includes it once, with NPU_TILE_TARGET defined as its target attribute
 * (x86_intrinsics.h says why); the templates are that file's own.
 */
#ifndef TVM_NPU_KERNELS_FAST_GEMM_INT8_TILE_H_
#define TVM_NPU_KERNELS_FAST_GEMM_INT8_TILE_H_

#ifndef NPU_TILE_TARGET
#error "define NPU_TILE_TARGET as the level's NPU_TARGET_* before including gemm_int8_tile.h"
#endif

#include <cstring>

#include "kernels/fast/gemm_int8.h"

namespace tvm_npu {
namespace fast {
namespace {

// The level's vector and its int32 lanes, one output channel each.
template <typename Isa>
using Vec = decltype(Isa::Set1(0));
template <typename Isa>
constexpr size_t kLanes = sizeof(Vec<Isa>) / sizeof(int32_t);

// MR rows x NB vectors of channels starting at channel n; rows [0, m) are written. b: the
// packed weights of channel 0.
template <typename Isa, int MR, int NB, typename A, typename B>
NPU_TILE_TARGET void Tile(const GemmInt8Task& t, const A* a, const B* b, size_t m, size_t n) {
  constexpr size_t kStepK = sizeof(int32_t) / sizeof(A);  // per Dot
  b += (n / kLanes<Isa>)*t.kp * kLanes<Isa>;
  Vec<Isa> acc[MR][NB];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) acc[r][j] = Isa::Set1(0);
  }
  for (size_t k = 0; k < t.kp; k += kStepK) {
    Vec<Isa> bv[NB];
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) bv[j] = Isa::Load(b + j * t.kp * kLanes<Isa> + k * kLanes<Isa>);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t group;  // row r's kStepK elements from k, for every lane
      std::memcpy(&group, a + r * t.kp + k, sizeof(group));
      const Vec<Isa> av = Isa::Set1(group);
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) acc[r][j] = Isa::Dot(acc[r][j], av, bv[j]);
    }
  }
  const Vec<Isa> zp = Isa::Set1(t.zp), lo = Isa::Set1(t.lo), hi = Isa::Set1(t.hi);
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    const size_t c = n + j * kLanes<Isa>;
    if (c >= t.n1) break;
    const typename Isa::Channels channels =
        Isa::LoadChannels(t.bias_adj + c, t.scale + c, t.n1 - c);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      if (static_cast<size_t>(r) >= m) break;
      Isa::Store(t.out_rows[r] + c, acc[r][j], channels, zp, lo, hi);
    }
  }
}

// A tile holding m rows: with kFitRows the smallest MR >= m, so a one-pixel GEMM (an LSTM
// step's matmul) does not compute five zero rows; else always 6.
template <typename Isa, bool kFitRows, int NB, typename A, typename B>
NPU_TILE_TARGET void Rows(const GemmInt8Task& t, const A* a, const B* b, size_t m, size_t n) {
  if constexpr (kFitRows) {
    if (m == 1) return Tile<Isa, 1, NB>(t, a, b, m, n);
    if (m == 2) return Tile<Isa, 2, NB>(t, a, b, m, n);
    if (m <= 4) return Tile<Isa, 4, NB>(t, a, b, m, n);
  }
  Tile<Isa, 6, NB>(t, a, b, m, n);
}

// The whole task, with A's and the packed weights' elements of the level: tiles of 6 rows (or
// fewer, kFitRows) and two vectors of channels, or one where no more are left.
template <typename Isa, typename A, typename B, bool kFitRows>
NPU_TILE_TARGET void GemmTiles(const GemmInt8Task& t) {
  const A* a = static_cast<const A*>(t.a);
  const B* b = static_cast<const B*>(t.b);
  ForEachTile(t, 6, kLanes<Isa>,
              [a, b](const GemmInt8Task& rows, size_t i, size_t m, size_t n, bool wide) {
                if (wide) {
                  Rows<Isa, kFitRows, 2>(rows, a + i * rows.kp, b, m, n);
                } else {
                  Rows<Isa, kFitRows, 1>(rows, a + i * rows.kp, b, m, n);
                }
              });
}

}  // namespace
}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_GEMM_INT8_TILE_H_
