/*!
 * \file group_norm_ref.cc
 * \brief Reference GN_STATS and GN_APPLY, fp16 (docs/npu.md section 2, "GroupNorm").
 *
 * Every fp32 operation is its own statement (the build's -ffp-contract=off keeps them out of an
 * FMA), in the order section 2 writes them: the numpy model (tests/npu_ref/group_norm.py) follows
 * the same text and the two agree bit for bit.
 */
#include "kernels/ref/group_norm_ref.h"

#include <cmath>
#include <cstring>

#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace {

struct Record {
  uint32_t count;
  float mean, m2;
};

Record LoadRecord(const uint8_t* p) {
  Record r;
  std::memcpy(&r.count, p, 4);
  std::memcpy(&r.mean, p + 4, 4);
  std::memcpy(&r.m2, p + 8, 4);
  return r;
}

void StoreRecord(uint8_t* p, const Record& r) {
  std::memcpy(p, &r.count, 4);
  std::memcpy(p + 4, &r.mean, 4);
  std::memcpy(p + 8, &r.m2, 4);
}

float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Chan, Golub and LeVeque's pairwise update, a = the record, b = the tile (section 2's order).
Record Merge(const Record& a, const Record& b) {
  Record m;
  m.count = a.count + b.count;  // u32, modulo 2^32 (a stream keeps a group's total below 2^24)
  const float fa = static_cast<float>(a.count);
  const float fb = static_cast<float>(b.count);
  const float fn = static_cast<float>(m.count);
  const float delta = b.mean - a.mean;
  const float t = fb / fn;
  const float u = delta * t;
  m.mean = a.mean + u;
  const float s = a.m2 + b.m2;
  const float dd = delta * delta;
  const float w = fa * t;
  const float q = dd * w;
  m.m2 = s + q;
  return m;
}

}  // namespace

void GnStatsRef(const stream::GnStatsOperands& op, const uint8_t* in, uint8_t* stats) {
  const uint64_t k = op.channels / op.groups;  // channels per group
  const uint64_t pixel_bytes = uint64_t{op.channels} * 2;
  for (uint64_t g = 0; g < op.groups; ++g) {
    const uint8_t* base = in + g * k * 2;
    Record b;
    b.count = static_cast<uint32_t>(uint64_t{op.rows} * op.row_pixels * k);  // < 2^24, checked
    float s = 0.0f;
    for (uint64_t r = 0; r < op.rows; ++r) {
      for (uint64_t p = 0; p < op.row_pixels; ++p) {
        const uint8_t* px = base + r * op.in_stride + p * pixel_bytes;
        for (uint64_t j = 0; j < k; ++j) s += ref::LoadHalf(px + j * 2);
      }
    }
    b.mean = s / static_cast<float>(b.count);
    float m2 = 0.0f;
    for (uint64_t r = 0; r < op.rows; ++r) {
      for (uint64_t p = 0; p < op.row_pixels; ++p) {
        const uint8_t* px = base + r * op.in_stride + p * pixel_bytes;
        for (uint64_t j = 0; j < k; ++j) {
          const float d = ref::LoadHalf(px + j * 2) - b.mean;
          const float sq = d * d;
          m2 += sq;
        }
      }
    }
    b.m2 = m2;
    uint8_t* rec = stats + g * kGnRecordBytes;
    const Record a = LoadRecord(rec);
    StoreRecord(rec, op.first != 0 || a.count == 0 ? b : Merge(a, b));
  }
}

void GnApplyRef(const stream::GnApplyOperands& op, const uint8_t* in, const uint8_t* stats,
                const uint8_t* gamma, const uint8_t* beta, uint8_t* out) {
  const uint64_t k = op.channels / op.groups;
  const float eps = ref::BitsToFloat(op.eps);
  const uint64_t pixel_bytes = uint64_t{op.channels} * 2;
  for (uint64_t g = 0; g < op.groups; ++g) {
    const Record a = LoadRecord(stats + g * kGnRecordBytes);
    const float var = a.m2 / static_cast<float>(a.count);  // biased; a count of 0 gives NaN
    const float d = std::sqrt(var + eps);
    for (uint64_t r = 0; r < op.rows; ++r) {
      for (uint64_t p = 0; p < op.row_pixels; ++p) {
        const uint64_t at = p * pixel_bytes + g * k * 2;
        const uint8_t* px = in + r * op.in_stride + at;
        uint8_t* py = out + r * op.out_stride + at;
        for (uint64_t j = 0; j < k; ++j) {
          const uint64_t c = g * k + j;
          float y = (ref::LoadHalf(px + j * 2) - a.mean) / d;
          if (gamma != nullptr) y = y * LoadF32(gamma + c * 4);
          if (beta != nullptr) y = y + LoadF32(beta + c * 4);
          if (op.silu != 0) {
            const float den = 1.0f + std::exp(-y);
            y = y / den;
          }
          ref::StoreHalf(py + j * 2, y);
        }
      }
    }
  }
}

}  // namespace tvm_npu
