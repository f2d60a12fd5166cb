/*!
 * \file gemm_int8_portable.cc
 * \brief Weight packing for every level, and the portable (plain C++) int8 GEMM tile and
 *        requantization. Compiled on every architecture.
 */
#include <algorithm>
#include <cstring>

#include "kernels/fast/cpu_level.h"
#include "kernels/fast/gemm_int8.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

size_t RoundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }

// Channels per packed block (nr) and reduction elements per channel within it (kr).
void Geometry(int level, size_t* nr, size_t* kr, size_t* elem) {
  if (level == kLevelAvx512Vnni) {
    *nr = 16, *kr = 4, *elem = 1;  // one zmm: 16 channels x 4 bytes, for vpdpbusd
  } else if (level == kLevelAvx2) {
    *nr = 8, *kr = 2, *elem = 2;  // one ymm: 8 channels x 2 int16, for vpmaddwd
  } else {
    *nr = 1, *kr = 4, *elem = 1;  // plain rows [oc][kp]
  }
}

}  // namespace

size_t GemmBlockN(int level) { return level == kLevelAvx512Vnni ? 32 : 16; }

size_t GemmTileM(int level) { return level == kLevelPortable ? 1 : 6; }

size_t PackedWeightsBytes(int level, size_t oc, size_t kp) {
  size_t nr, kr, elem;
  Geometry(level, &nr, &kr, &elem);
  return RoundUp(oc, GemmBlockN(level)) * kp * elem;
}

namespace {

// Layout [oc / nr][kp / kr][nr][kr]: the kr reduction elements of one channel are adjacent, the
// way one vector instruction consumes them. Padding channels and k >= K are zero. Written in
// destination order, kr elements at a time: this runs for every CONV2D of every call.
template <typename T>
void Pack(const int8_t* w, size_t w_stride, size_t k, size_t kp, size_t oc, size_t oc_pad,
          size_t nr, size_t kr, T* dst) {
  for (size_t block = 0; block < oc_pad / nr; ++block) {
    for (size_t k0 = 0; k0 < kp; k0 += kr) {
      for (size_t lane = 0; lane < nr; ++lane, dst += kr) {
        const size_t o = block * nr + lane;
        const size_t n = o < oc && k0 < k ? std::min(kr, k - k0) : 0;
        for (size_t i = 0; i < n; ++i) dst[i] = w[o * w_stride + k0 + i];
        for (size_t i = n; i < kr; ++i) dst[i] = 0;
      }
    }
  }
}

}  // namespace

void PackWeightsInt8(int level, const int8_t* w, size_t w_stride, size_t k, size_t kp, size_t oc,
                     void* dst) {
  size_t nr, kr, elem;
  Geometry(level, &nr, &kr, &elem);
  const size_t oc_pad = RoundUp(oc, GemmBlockN(level));
  if (elem == 2) return Pack(w, w_stride, k, kp, oc, oc_pad, nr, kr, static_cast<int16_t*>(dst));
  if (nr == 1) {  // plain rows
    for (size_t o = 0; o < oc_pad; ++o) {
      int8_t* row = static_cast<int8_t*>(dst) + o * kp;
      const size_t n = o < oc ? k : 0;
      if (n != 0) std::memcpy(row, w + o * w_stride, n);
      std::memset(row + n, 0, kp - n);
    }
    return;
  }
  Pack(w, w_stride, k, kp, oc, oc_pad, nr, kr, static_cast<int8_t*>(dst));
}

void DwPixelPortable(const DwPixel& p) {
  for (size_t c = 0; c < p.c; ++c) {
    uint32_t s = static_cast<uint32_t>(p.bias[c]);  // int32 wrap-around, defined in C++
    for (size_t t = 0; t < p.n_taps; ++t) {
      const int32_t x = static_cast<int8_t>(p.x[t][c]);
      s += static_cast<uint32_t>((x - p.in_zp) * p.w[p.tap[t] * p.c_pad + c]);
    }
    p.out[c] = ref::RequantizeFp32(ref::WrapI32(s), p.scale[c], p.zp, p.lo, p.hi);
  }
}

void GemmInt8Portable(const GemmInt8Task& t) {
  const uint8_t* a = static_cast<const uint8_t*>(t.a);
  const int8_t* b = static_cast<const int8_t*>(t.b);
  int32_t acc[16];
  for (size_t i = 0; i < t.m; ++i) {
    const uint8_t* ar = a + i * t.kp;
    for (size_t n = t.n0; n < t.n1; n += 16) {
      const size_t nb = t.n1 - n < 16 ? t.n1 - n : 16;
      for (size_t j = 0; j < nb; ++j) {
        const int8_t* br = b + (n + j) * t.kp;
        // uint32: the accumulator's int32 wrap-around, defined in C++.
        uint32_t s = static_cast<uint32_t>(t.bias_adj[n + j]);
        for (size_t k = 0; k < t.kp; ++k) s += static_cast<uint32_t>(int32_t{ar[k]} * br[k]);
        acc[j] = ref::WrapI32(s);
      }
      for (size_t j = 0; j < nb; ++j) {
        t.out_rows[i][n + j] = ref::RequantizeFp32(acc[j], t.scale[n + j], t.zp, t.lo, t.hi);
      }
    }
  }
}

}  // namespace fast
}  // namespace tvm_npu
