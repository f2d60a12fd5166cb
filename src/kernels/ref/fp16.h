/*!
 * \file fp16.h
 * \brief Bit-exact IEEE binary16 <-> binary32 conversion (docs/npu.md section 2).
 *
 * Float -> half rounds to nearest even, saturates to +-inf past the fp16 range and keeps NaN a
 * NaN with the top payload bits, the same bits numpy's astype(float16) produces (including its
 * choice of keeping a signalling NaN signalling). Half -> float is exact. Done in integer
 * arithmetic so the result never depends on the host FPU's modes or F16C availability.
 */
#ifndef TVM_NPU_KERNELS_REF_FP16_H_
#define TVM_NPU_KERNELS_REF_FP16_H_

#include <cstdint>
#include <cstring>

namespace tvm_npu {

inline uint16_t FloatToHalfBits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t exp = (f >> 23) & 0xFFu;
  const uint32_t frac = f & 0x7FFFFFu;
  if (exp == 0xFF) {
    if (frac == 0) return sign | 0x7C00u;
    // A NaN whose payload lives only in the low 13 bits must not turn into inf.
    uint16_t nan = static_cast<uint16_t>(0x7C00u + (frac >> 13));
    return sign | (nan == 0x7C00u ? 0x7C01u : nan);
  }
  if (exp >= 143) return sign | 0x7C00u;  // >= 2^16: beyond the largest finite half
  if (exp >= 113) {
    // Normal half. A carry out of the mantissa correctly bumps the exponent (up to inf).
    uint32_t h = ((exp - 112) << 10) | (frac >> 13);
    const uint32_t rem = frac & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < 102) return sign;  // below 2^-25, half of the smallest subnormal: rounds to zero
  // Subnormal half: the value is k * 2^-24 with k = m * 2^(exp - 126), shift = 126 - exp in
  // [14, 24]. Rounding up from 0x3FF gives 0x400, which is the smallest normal: correct.
  const uint32_t m = frac | 0x800000u;
  const uint32_t shift = 126 - exp;
  uint32_t k = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (k & 1u))) ++k;
  return static_cast<uint16_t>(sign | k);
}

/*!
 * \brief The runtime's staging of a host fp32 value into fp16 (docs/npu.md section 2): as
 *        FloatToHalfBits, but a finite value beyond the fp16 range (abs above 65504, the largest
 *        finite half) becomes +-65504 instead of +-inf, and adds 1 to `*saturated`. inf and NaN
 *        stay themselves. Values in (65504, 65520) would round to 65504 anyway; they count too.
 */
inline uint16_t SaturatingFloatToHalfBits(float value, uint64_t* saturated) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  const uint32_t magnitude = f & 0x7FFFFFFFu;
  // Above 65504 (0x477FE000) and below inf (0x7F800000): finite and beyond the range.
  if (magnitude > 0x477FE000u && magnitude < 0x7F800000u) {
    ++*saturated;
    return static_cast<uint16_t>(((f >> 16) & 0x8000u) | 0x7BFFu);
  }
  return FloatToHalfBits(value);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t frac = h & 0x3FFu;
  uint32_t f;
  if (exp == 0x1F) {
    f = sign | 0x7F800000u | (frac << 13);
  } else if (exp != 0) {
    f = sign | ((exp + 112) << 23) | (frac << 13);
  } else if (frac == 0) {
    f = sign;
  } else {
    // Subnormal half: normalise, every one is a normal float.
    uint32_t e = 113;
    while ((frac & 0x400u) == 0) {
      frac <<= 1;
      --e;
    }
    f = sign | (e << 23) | ((frac & 0x3FFu) << 13);
  }
  float out;
  std::memcpy(&out, &f, sizeof(out));
  return out;
}

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_FP16_H_
