/*!
 * \file ref_common.h
 * \brief Arithmetic shared by the reference kernels (docs/npu.md section 2): fp16 loads and
 *        stores, the fp32 activation, tap -> input coordinate mapping, int8 requantization.
 *
 * Every kernel that needs one of these uses this one definition, so two ops cannot drift apart
 * on, say, how a clip treats NaN or how a tie rounds.
 */
#ifndef TVM_NPU_KERNELS_REF_REF_COMMON_H_
#define TVM_NPU_KERNELS_REF_REF_COMMON_H_

#include <tvm_npu/stream_format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/sat_count.h"

namespace tvm_npu {
namespace ref {

inline float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return HalfBitsToFloat(h);
}

inline void StoreHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalfBits(v);
  std::memcpy(p, &h, sizeof(h));
}

inline int32_t LoadI32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/*! \brief The fp32 activation. Written as comparisons so a NaN passes through unchanged ("NaN
 *         stays NaN"). */
inline float Activate(float x, uint32_t act, float lo, float hi) {
  if (act == stream::kActRelu) return x < 0.0f ? 0.0f : x;
  if (act == stream::kActClip) {
    if (x < lo) return lo;
    if (x > hi) return hi;
  }
  return x;
}

/*!
 * \brief Maps output coordinate `o`, tap `t` to an input coordinate; false for a padding tap.
 *
 * uint64 throughout: with u32 operands and stride 1 or 2 (checked by every caller),
 * o * stride + t * dil <= 2 * (2^32 - 1) + (2^32 - 1)^2 = 2^64 - 1 cannot wrap.
 */
inline bool InputCoord(uint64_t o, uint64_t stride, uint64_t t, uint64_t dil, uint64_t pad,
                       uint64_t extent, uint64_t* coord) {
  const uint64_t v = o * stride + t * dil;
  if (v < pad || v - pad >= extent) return false;
  *coord = v - pad;
  return true;
}

/*!
 * \brief The input coordinates [*first, *last) a dense window of `k` taps at output `o` covers
 *        (dilation 1), in tap order. Computed directly rather than by visiting every tap, so a
 *        window far larger than the tile (global pooling, or a hostile stream) costs nothing.
 */
inline void WindowRange(uint64_t o, uint64_t stride, uint64_t k, uint64_t pad, uint64_t extent,
                        uint64_t* first, uint64_t* last) {
  const uint64_t start = o * stride;  // window covers virtual [start, start + k) incl. padding
  const uint64_t lo = std::max(start, pad);
  const uint64_t hi = std::min(start + k, pad + extent);
  *first = lo - pad;
  *last = hi > lo ? hi - pad : *first;
}

/*! \brief Requantization parameter ranges (docs/npu.md section 2). */
inline bool ValidShift(int64_t n) { return n >= 1 && n <= 62; }
inline bool ValidInt8(int64_t v) { return v >= -128 && v <= 127; }
inline bool ValidInt16(int64_t v) { return v >= -32768 && v <= 32767; }
/*! \brief An fp32 requantization scale S must be finite and > 0 (false for NaN too). */
inline bool ValidScale(float s) { return std::isfinite(s) && s > 0.0f; }

/*!
 * \brief An int8 CONV2D's requantization block (docs/npu.md section 6): `oc` int32 biases, then `oc`
 *        fp32 scales `row` bytes later, read into `bias` and `scale`.
 * \return The first output channel whose scale is not finite and > 0, or `oc` when all are valid
 *         (the scales are data in SRAM, so the parser cannot check them).
 */
inline uint64_t LoadRequantBlock(const uint8_t* block, uint64_t oc, uint64_t row, int32_t* bias,
                                 float* scale) {
  uint64_t bad = oc;
  for (uint64_t o = 0; o < oc; ++o) {
    bias[o] = LoadI32(block + o * 4);
    scale[o] = BitsToFloat(static_cast<uint32_t>(LoadI32(block + row + o * 4)));
    if (bad == oc && !ValidScale(scale[o])) bad = o;
  }
  return bad;
}

/*!
 * \brief rshift_rne(p, n) of docs/npu.md section 2 (ADD): p / 2^n rounded to nearest, ties to
 *        even. q = p >> n (arithmetic), r = p - (q << n), q += 1 if r > 2^(n-1) or (r == 2^(n-1)
 *        and q is odd). 1 <= n <= 62.
 *
 * r is the low n bits of p (p - floor(p / 2^n) * 2^n in two's complement), taken through uint64
 * because shifting a negative q left is undefined in C++17. Nothing here can overflow.
 */
inline int64_t RoundShift(int64_t p, uint32_t n) {
  const int64_t q = p >> n;
  const uint64_t r = static_cast<uint64_t>(p) & ((uint64_t{1} << n) - 1);
  const uint64_t half = uint64_t{1} << (n - 1);
  return q + ((r > half || (r == half && (q & 1) != 0)) ? 1 : 0);
}

/*! \brief y = clamp(z_y + rounded, lo, hi) for a rounded value given in int64. */
inline int8_t ClampOut(int64_t rounded, int32_t zp, int32_t lo, int32_t hi) {
  const int64_t y = zp + rounded;
  CountIfSaturated(static_cast<double>(y), zp, lo, hi, -128, 127);
  return static_cast<int8_t>(std::min<int64_t>(std::max<int64_t>(y, lo), hi));
}

/*! \brief zp + rounded clamped to [lo, hi], for a result of either integer width (`wide`: int16). */
inline int32_t ClampInt(int64_t rounded, int32_t zp, int32_t lo, int32_t hi, bool wide) {
  CountIfSaturated(static_cast<double>(zp + rounded), zp, lo, hi, wide ? -32768 : -128,
                   wide ? 32767 : 127);
  return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(zp + rounded, lo), hi));
}

/*! \brief Element e of an int8 or int16 (little-endian) row. */
inline int32_t LoadInt(const uint8_t* row, uint64_t e, bool wide) {
  if (!wide) return static_cast<int8_t>(row[e]);
  int16_t v;
  std::memcpy(&v, row + 2 * e, sizeof(v));
  return v;
}

/*! \brief Store v (already within the dtype's range) as element e of an int8 or int16 row. */
inline void StoreInt(uint8_t* row, uint64_t e, bool wide, int32_t v) {
  if (!wide) {
    row[e] = static_cast<uint8_t>(static_cast<int8_t>(v));
    return;
  }
  const int16_t h = static_cast<int16_t>(v);
  std::memcpy(row + 2 * e, &h, sizeof(h));
}

/*!
 * \brief round_half_even(v) for a finite or infinite fp32 v, independent of the FPU's current
 *        rounding mode (std::nearbyint would follow fesetround; the contract fixes ties to even).
 *
 * From 2^23 up every fp32 is already an integer (and inf stays inf). Below, floor is exact and
 * so is the fraction v - floor(v) (both operands share v's exponent range), so the comparisons
 * with 0.5 decide the rounding without a second rounding error.
 */
inline float RoundHalfEven(float v) {
  if (!(std::fabs(v) < 8388608.0f)) return v;  // 2^23
  const float f = std::floor(v);
  const float frac = v - f;
  if (frac > 0.5f) return f + 1.0f;
  if (frac < 0.5f) return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;  // a tie: the even neighbour
}

/*!
 * \brief The int8 requantization of CONV2D and POOL (docs/npu.md section 2):
 *        y = clamp(z_y + round_half_even(fp32(fp32(acc) * S)), lo, hi).
 *
 * fp32(acc) is the nearest fp32 (exact below 2^24); the product is ONE fp32 multiply, never
 * widened to double or fused (the build uses -ffp-contract=off), because onnxruntime computes it
 * that way and a different rounding at a near-tie changes an LSB. The clamp runs in double: the
 * rounded value may be huge or inf (S up to FLT_MAX), and z_y + r is exact for |r| < 2^53 while
 * anything larger is clamped anyway. S is finite and > 0 (checked by every caller), so no NaN.
 * RequantizeFloat takes the fp32 sum itself (int4 weights under int8 activations: the groups add
 * in fp32, docs/npu.md section 2); the caller keeps it finite.
 */
inline int8_t RequantizeFloat(float sum, float scale, int32_t zp, int32_t lo, int32_t hi) {
  const float prod = sum * scale;
  const double y = static_cast<double>(zp) + static_cast<double>(RoundHalfEven(prod));
  CountIfSaturated(y, zp, lo, hi, -128, 127);
  if (y <= lo) return static_cast<int8_t>(lo);
  if (y >= hi) return static_cast<int8_t>(hi);
  return static_cast<int8_t>(static_cast<int32_t>(y));
}
inline int8_t RequantizeFp32(int64_t acc, float scale, int32_t zp, int32_t lo, int32_t hi) {
  return RequantizeFloat(static_cast<float>(acc), scale, zp, lo, hi);
}

/*!
 * \brief An fp32 value to int8 codes as quantized staging in does (docs/npu.md section 2):
 *        clamp(round_half_even(fp32(x / s)) + z, -128, 127), a NaN giving 127. The quotient is first
 *        clamped by compare-and-select to [-128 - z - 1, 127 - z + 1] (a NaN fails the compare and
 *        becomes the upper bound), which leaves the final clamp unchanged and the rounding exact.
 */
inline int8_t QuantizeInt8(float x, float scale, int32_t zp) {
  float v = x / scale;
  const float vlo = static_cast<float>(-129 - zp), vhi = static_cast<float>(128 - zp);
  v = v < vhi ? v : vhi;
  v = v > vlo ? v : vlo;
  const int32_t r = static_cast<int32_t>(RoundHalfEven(v)) + zp;
  CountIfSaturated(r, zp, -128, 127, -128, 127);
  return static_cast<int8_t>(r < -128 ? -128 : (r > 127 ? 127 : r));
}

/*! \brief int8 code q to fp32 as quantized staging out does: fp32(q - z) * s, one rounding. */
inline float DequantizeInt8(int8_t q, float scale, int32_t zp) {
  return static_cast<float>(int32_t{q} - zp) * scale;
}

/*!
 * \brief The elements of a vector command's input and output rows computed in fp32 (SOFTMAX, NORM):
 *        fp16, or int8 codes (format 1.4) dequantized on the way in and quantized on the way out as
 *        quantized staging does; the arithmetic between is the same fp32.
 */
struct RowIo {
  bool int8;
  float in_scale, out_scale;
  int32_t in_zp, out_zp;
  float Load(const uint8_t* row, uint64_t e) const {
    if (!int8) return LoadHalf(row + e * 2);
    return DequantizeInt8(static_cast<int8_t>(row[e]), in_scale, in_zp);
  }
  void Store(uint8_t* row, uint64_t e, float y) const {
    if (!int8) {
      StoreHalf(row + e * 2, y);
      return;
    }
    row[e] = static_cast<uint8_t>(QuantizeInt8(y, out_scale, out_zp));
  }
};

/*! \brief Two's-complement wrap-around to int32, the int8 datapath's accumulator width. */
inline int32_t WrapI32(uint32_t bits) {
  int32_t v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

}  // namespace ref
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_REF_COMMON_H_
