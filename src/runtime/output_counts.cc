/*!
 * \file output_counts.cc
 * \brief CountOutputs (output_counts.h): where each compute command's results lie in SRAM.
 *
 * The fp16 counts look at the results themselves, after the command: every kernel, reference or
 * fast, writes the same bits, so they count alike by construction. An fp16 result is +-inf when it
 * overflowed (beyond +-65504, docs/npu.md section 2) or when an input already was; the first layer
 * with a count is where it started. The int8 / int16 counts need the value before the clamp, so
 * the requantizations count them as they run (kernels/ref/sat_count.h).
 */
#include "runtime/output_counts.h"

#include <tvm_npu/operand_rules.h>

#include <cstring>

#include "kernels/fast/cpu_level.h"
#include "kernels/fast/x86_intrinsics.h"

namespace tvm_npu {
namespace {

// Results as blocks x rows x pixels x elems: elems contiguous, the rest strided in bytes.
struct Layout {
  uint32_t dtype;
  uint64_t addr, blocks, block_stride, rows, row_stride, pixels, pixel_stride, elems;
};

template <typename Op>
Layout Rows(const Op& op, uint32_t dtype) {
  return {dtype, op.out_addr, 1, 0, op.rows, op.out_stride, 1, 0, op.row_elems};
}

// A row command whose result has the command's dtype (an int8 UNARY is a table lookup: it never
// saturates, and its results are counted as outputs only).
template <typename Op>
Layout RowsOf(const stream::Command& cmd) {
  const auto op = OperandsOf<Op>(cmd);
  return Rows(op, op.dtype);
}

// CONV2D and POOL: out_h rows of out_w pixels of `channels` (a member of Op) elements.
template <typename Op>
Layout Image(const stream::Command& cmd, uint32_t Op::* channels_of) {
  const auto op = OperandsOf<Op>(cmd);
  const uint64_t channels = op.*channels_of;
  const uint64_t pstride =
      op.out_pstride != 0 ? op.out_pstride : channels * stream::DTypeBytes(op.dtype);
  return {op.dtype, op.out_addr, 1, 0, op.out_h, op.out_stride, op.out_w, pstride, channels};
}

bool LayoutOf(const stream::Command& cmd, Layout* l) {
  switch (cmd.opcode()) {
    case stream::kConv2D: *l = Image(cmd, &stream::Conv2DOperands::oc); return true;
    case stream::kPool: *l = Image(cmd, &stream::PoolOperands::c); return true;
    case stream::kEltwise: {
      const auto op = OperandsOf<stream::EltwiseOperands>(cmd);
      *l = Rows(op, stream::OperandDType(op.out_dtype, op.dtype));
      return true;
    }
    case stream::kMatmul: {
      const auto op = OperandsOf<stream::MatmulOperands>(cmd);
      *l = {op.dtype, op.out_addr, op.batch, op.out_bstride, op.m, op.out_stride, 1, 0, op.n};
      return true;
    }
    case stream::kAdd: *l = RowsOf<stream::AddOperands>(cmd); return true;
    case stream::kUnary: *l = RowsOf<stream::UnaryOperands>(cmd); return true;
    case stream::kSoftmax: *l = RowsOf<stream::SoftmaxOperands>(cmd); return true;
    case stream::kNorm: *l = RowsOf<stream::NormOperands>(cmd); return true;
    case stream::kGnApply: {  // format 1.7: rows of row_pixels * channels fp16 results
      const auto op = OperandsOf<stream::GnApplyOperands>(cmd);
      *l = {op.dtype, op.out_addr, 1,
            0,        op.rows,     op.out_stride,
            1,        0,           uint64_t{op.row_pixels} * op.channels};
      return true;
    }
    case stream::kRope: *l = RowsOf<stream::RopeOperands>(cmd); return true;
    default: return false;
  }
}

// Adds the non-finite halves of the 4 in `w` to *special and the NaNs among them to *nan. Per
// 16-bit lane, x + 0x7FFF sets bit 15 exactly when x (at most 0x7FFF) is not 0, without a carry
// into the next lane: so the exponent field is all ones where (w & 0x7C00) ^ 0x7C00 is 0, and the
// mantissa is not 0 where w & 0x03FF is not 0.
inline void Special(uint64_t w, uint64_t* special, uint64_t* nan) {
  constexpr uint64_t kExp = 0x7C007C007C007C00ull, kMant = 0x03FF03FF03FF03FFull;
  constexpr uint64_t kLow = 0x7FFF7FFF7FFF7FFFull, kTop = 0x8000800080008000ull;
  const uint64_t all_ones = ~(((w & kExp) ^ kExp) + kLow) & kTop;
  if (all_ones == 0) return;
  *special += static_cast<uint64_t>(__builtin_popcountll(all_ones));
  *nan += static_cast<uint64_t>(__builtin_popcountll(all_ones & (((w & kMant) + kLow) & kTop)));
}

// Special over n halves at p: 16 a step where the CPU has AVX2, the rest 4 a word.
#if TVM_NPU_X86_64
NPU_TARGET_AVX2 void ScanAvx2(const uint8_t* p, uint64_t n, uint64_t* special, uint64_t* nan) {
  const __m256i exp = _mm256_set1_epi16(0x7C00), mant = _mm256_set1_epi16(0x03FF);
  const __m256i zero = _mm256_setzero_si256();
  uint64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + e * 2));
    const __m256i ones = _mm256_cmpeq_epi16(_mm256_and_si256(v, exp), exp);
    if (_mm256_testz_si256(ones, ones)) continue;
    const __m256i nans =
        _mm256_andnot_si256(_mm256_cmpeq_epi16(_mm256_and_si256(v, mant), zero), ones);
    // movemask gives two bits per 16-bit lane.
    *special += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_epi8(ones))) / 2;
    *nan += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_epi8(nans))) / 2;
  }
  for (; e < n; e += 4) {
    uint64_t w = 0;  // zeros past the end are finite
    std::memcpy(&w, p + e * 2, (n - e < 4 ? n - e : 4) * 2);
    Special(w, special, nan);
  }
}
#endif

void Scan(const uint8_t* p, uint64_t n, uint64_t* special, uint64_t* nan) {
#if TVM_NPU_X86_64
  static const bool avx2 = fast::BestLevel() >= fast::kLevelAvx2;
  if (avx2) return ScanAvx2(p, n, special, nan);
#endif
  for (uint64_t e = 0; e < n; e += 4) {
    uint64_t w = 0;
    std::memcpy(&w, p + e * 2, (n - e < 4 ? n - e : 4) * 2);
    Special(w, special, nan);
  }
}

}  // namespace

void CountOutputs(const stream::Command& cmd, const uint8_t* sram, size_t i,
                  CommandCounts* counts) {
  Layout l;
  if (!LayoutOf(cmd, &l)) return;
  counts->outputs[i] = l.blocks * l.rows * l.pixels * l.elems;
  if (l.dtype != stream::kFP16) return;
  // Packed pixels are one run of pixels * elems, scanned by Scan: a scan per
  // command must stay small next to the command itself.
  const bool packed = l.pixel_stride == l.elems * 2;
  const uint64_t run = packed ? l.pixels * l.elems : l.elems, runs = packed ? 1 : l.pixels;
  uint64_t special = 0, nan = 0;
  for (uint64_t b = 0; b < l.blocks; ++b) {
    for (uint64_t r = 0; r < l.rows; ++r) {
      for (uint64_t p = 0; p < runs; ++p) {
        const uint8_t* px =
            sram + l.addr + b * l.block_stride + r * l.row_stride + p * l.pixel_stride;
        Scan(px, run, &special, &nan);
      }
    }
  }
  const uint64_t inf = special - nan;
  counts->fp16_overflow[i] = inf;
  counts->nan[i] = nan;
}

}  // namespace tvm_npu
