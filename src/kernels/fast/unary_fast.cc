/*!
 * \file unary_fast.cc
 * \brief Fast UNARY (unary_fast.h).
 */
#include "kernels/fast/unary_fast.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/fast/fp16_avx512.h"
#include "kernels/fast/fp_env.h"
#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/fp16.h"

namespace tvm_npu {
namespace fast {
namespace {

// Every function but leaky relu has no operand but x: a 65,536-entry table each.
constexpr uint32_t kTableFuncs = stream::kUnaryGeluTanh + 1;
constexpr uint32_t kHalves = 65536;

// Entry h is the reference's result for input bits h. The caller checked the FP environment is
// the default, so the table is built in it (MXCSR is per thread: the building thread's counts).
// 128 KB a function, built on first use (a few ms each), then shared by all threads. `ready` is
// the per-call check: std::call_once costs more than the lookups of a 64-element command.
const uint16_t* Fp16Table(uint32_t func) {
  static std::atomic<const uint16_t*> ready[kTableFuncs];
  const uint16_t* table = ready[func].load(std::memory_order_acquire);
  if (table != nullptr) return table;
  static std::once_flag once[kTableFuncs];
  static std::vector<uint16_t> tables[kTableFuncs];
  std::call_once(once[func], [func] {
    std::vector<uint16_t>& t = tables[func];
    t.resize(kHalves);
    for (uint32_t h = 0; h < kHalves; ++h) {
      t[h] = FloatToHalfBits(ref::UnaryFp32(func, HalfBitsToFloat(static_cast<uint16_t>(h)), 0.0f));
    }
    ready[func].store(t.data(), std::memory_order_release);
  });
  return tables[func].data();
}

void LookUp(const stream::UnaryOperands& op, const uint16_t* table, const uint8_t* in,
            uint8_t* out) {
  const uint64_t n = op.row_elems;  // a local: the stores below could alias `op` for the compiler
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    for (uint64_t e = 0; e < n; ++e) {
      uint16_t h;
      std::memcpy(&h, ir + e * 2, sizeof(h));
      std::memcpy(outr + e * 2, &table[h], sizeof(h));
    }
  }
}

#if TVM_NPU_X86_64
// ref::UnaryFp32's `x < 0 ? x * alpha : x` on 16 lanes: the ordered compare is false for NaN,
// which passes through.
NPU_TARGET_AVX512_F16C void LeakyReluAvx512(const stream::UnaryOperands& op, const uint8_t* in,
                                            uint8_t* out) {
  const __m512 alpha = _mm512_set1_ps(ref::BitsToFloat(op.alpha));
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    for (uint64_t e = 0; e < op.row_elems; e += 16) {
      const __mmask16 mask = Lanes16(op.row_elems - e);
      const __m512 x = LoadHalves16(ir + e * 2, mask);
      const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
      const __m512 y = _mm512_mask_mul_ps(x, neg, x, alpha);
      StoreHalves16(outr + e * 2, y, mask, op.row_elems - e);
    }
  }
}

// The int8 table on 64 lanes (VBMI, which the AVX-512 level does not imply: checked apart).
// vpermi2b looks an index's low 7 bits up in 128 table bytes; once in each half of the table, and
// the index's top bit picks the half. The index is x + 128, x with its sign bit flipped.
NPU_TARGET_AVX512_VBMI void Int8TableVbmi(const stream::UnaryOperands& op, const uint8_t* table,
                                          const uint8_t* in, uint8_t* out) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ir = in + r * op.in_stride;
    uint8_t* outr = out + r * op.out_stride;
    for (uint64_t e = 0; e < op.row_elems; e += 64) {
      const uint64_t left = op.row_elems - e;
      const __mmask64 mask = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
      const __m512i idx = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, ir + e), flip);
      const __m512i low = _mm512_permutex2var_epi8(t0, idx, t1);
      const __m512i high = _mm512_permutex2var_epi8(t2, idx, t3);
      _mm512_mask_storeu_epi8(outr + e, mask,
                              _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high));
    }
  }
}

bool HasVbmi() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
}
#endif

}  // namespace

void Unary(const stream::UnaryOperands& op, const uint8_t* in, const uint8_t* table, uint8_t* out,
           Level level) {
  if (level != kLevelRef && op.dtype == stream::kFP16) {
    if (op.func != stream::kUnaryLeakyRelu && op.func < kTableFuncs && DefaultFpEnvironment())
      return LookUp(op, Fp16Table(op.func), in, out);
#if TVM_NPU_X86_64
    if (op.func == stream::kUnaryLeakyRelu && level == kLevelAvx512Vnni && NoFlushToZero()) {
      return LeakyReluAvx512(op, in, out);
    }
#endif
  }
#if TVM_NPU_X86_64
  if (level == kLevelAvx512Vnni && op.dtype == stream::kInt8 && HasVbmi()) {
    return Int8TableVbmi(op, table, in, out);
  }
#endif
  UnaryRef(op, in, table, out);
}

}  // namespace fast
}  // namespace tvm_npu
