/*!
 * \file conv2d_int4_fast.cc
 * \brief Fast CONV2D with group-wise int4 weights (format 1.4), bit-identical to Conv2DInt4Ref:
 *        the codes unpacked once into blocks of kLanes output channels ([block][k][lane], kept
 *        in the weight cache), then every lane (one output channel) runs the reference's
 *        sums in the reference's order -- per group in k order, then groups in order -- so the
 *        lanes vectorize without reassociating any fp32 add. Blocks run on the thread pool.
 */
#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/thread_pool.h"
#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

constexpr size_t kLanes = 8;

// int4 sign-extends and uint4 does not: the two unpack the same bytes differently.
int Int4Tag(const stream::Conv2DOperands& op) {
  return kInt4Tag + static_cast<int>(stream::WeightCode(op));
}

// [ceil(oc / kLanes)][k][kLanes] int8 codes (int4 sign-extended, uint4 as 0..15); lanes past oc
// hold 0 and are never stored.
std::shared_ptr<PackedWeights> UnpackInt4(const stream::Conv2DOperands& op, const uint8_t* w) {
  const size_t k = op.in_c, oc = op.oc, blocks = (oc + kLanes - 1) / kLanes;
  std::shared_ptr<PackedWeights> e = NewEntry(Int4Tag(op), w, op.w_stride, k / 2, oc);
  e->k = e->kp = k;
  e->packed.assign(blocks * k * kLanes, 0);
  for (size_t o = 0; o < oc; ++o) {
    const uint8_t* row = w + o * op.w_stride;
    int8_t* dst = reinterpret_cast<int8_t*>(e->packed.data()) + (o / kLanes) * k * kLanes;
    for (size_t i = 0; i < k; ++i) {
      dst[i * kLanes + o % kLanes] = static_cast<int8_t>(Int4Code(op, row, i));
    }
  }
  return e;
}

// One pixel's kLanes outputs from output channel o0: the reference's arithmetic lane by lane.
template <bool kInt8>
void Block(const stream::Conv2DOperands& op, const Int4Dequant& d, const int8_t* wb,
           const float* xf, const int32_t* xi, size_t o0, float* y) {
  const size_t oc = op.oc, g = stream::Int4Group(op), groups = op.in_c / g;
  const size_t lanes = std::min(kLanes, oc - o0);
  for (size_t l = 0; l < kLanes; ++l) y[l] = 0.0f;
  for (size_t j = 0; j < groups; ++j) {
    int32_t z[kLanes] = {};
    float s[kLanes] = {};
    for (size_t l = 0; l < lanes; ++l) {
      z[l] = d.zero_point[j * oc + o0 + l];
      s[l] = d.scale[j * oc + o0 + l];
    }
    float part[kLanes];
    if (kInt8) {
      int32_t a[kLanes] = {};
      if (xi != nullptr) {
        for (size_t k = j * g; k < (j + 1) * g; ++k) {
          const int8_t* wk = wb + k * kLanes;
          for (size_t l = 0; l < kLanes; ++l) a[l] += xi[k] * (int32_t{wk[l]} - z[l]);
        }
      }
      for (size_t l = 0; l < kLanes; ++l) part[l] = static_cast<float>(a[l]) * s[l];
    } else {
      float a[kLanes] = {};
      if (xf != nullptr) {
        float zf[kLanes];
        for (size_t l = 0; l < kLanes; ++l) zf[l] = static_cast<float>(z[l]);
        for (size_t k = j * g; k < (j + 1) * g; ++k) {
          const int8_t* wk = wb + k * kLanes;
          // (q - z) is a small integer, exact; the product is exact; only the add rounds.
          for (size_t l = 0; l < kLanes; ++l) a[l] += xf[k] * (static_cast<float>(wk[l]) - zf[l]);
        }
      }
      for (size_t l = 0; l < kLanes; ++l) part[l] = a[l] * s[l];
    }
    for (size_t l = 0; l < kLanes; ++l) y[l] += part[l];
  }
}

}  // namespace

void Conv2DInt4(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out, uint32_t alignment, WeightCache* cache,
                size_t key) {
  const Int4Dequant d = LoadInt4Block(op, bias, alignment);  // throws before anything is written
  auto unpack = [&] { return UnpackInt4(op, w); };
  const std::shared_ptr<const PackedWeights> packed =
      cache != nullptr ? cache->Get(key, Int4Tag(op), w, op.w_stride, op.in_c / 2, op.oc, unpack)
                       : unpack();
  const bool int8 = op.dtype == stream::kInt8;
  const size_t k = op.in_c, pixels = uint64_t{op.out_h} * op.out_w;
  // Every output pixel's input row once, widened (fp32) or offset by the zero point (int32);
  // a pixel in the padding has none (every group's sum is then 0, as in the reference).
  std::vector<float> xf(int8 ? 0 : pixels * k);
  std::vector<int32_t> xi(int8 ? pixels * k : 0);
  std::vector<bool> inside(pixels);
  const int32_t in_zp = ref::WrapI32(op.in_zp);
  for (size_t p = 0; p < pixels; ++p) {
    uint64_t y = 0, x = 0;
    inside[p] = ref::InputCoord(p / op.out_w, op.stride_h, 0, op.dil_h, op.pad_top, op.in_h, &y) &&
                ref::InputCoord(p % op.out_w, op.stride_w, 0, op.dil_w, op.pad_left, op.in_w, &x);
    if (!inside[p]) continue;
    const uint8_t* px = in + y * op.in_stride + x * stream::InPixelStride(op);
    for (size_t i = 0; i < k; ++i) {
      if (int8) {
        xi[p * k + i] = int32_t{static_cast<int8_t>(px[i])} - in_zp;
      } else {
        xf[p * k + i] = ref::LoadHalf(px + i * 2);
      }
    }
  }
  const int32_t out_zp = ref::WrapI32(op.out_zp);
  const int32_t lo = ref::WrapI32(op.clip_lo), hi = ref::WrapI32(op.clip_hi);
  const float lo_f = ref::BitsToFloat(op.clip_lo), hi_f = ref::BitsToFloat(op.clip_hi);
  const size_t blocks = (op.oc + kLanes - 1) / kLanes;
  ParallelFor(blocks, [&](size_t b) {
    const int8_t* wb = reinterpret_cast<const int8_t*>(packed->packed.data()) + b * k * kLanes;
    const size_t o0 = b * kLanes, lanes = std::min(kLanes, size_t{op.oc} - o0);
    float y[kLanes];
    for (size_t p = 0; p < pixels; ++p) {
      if (int8) {
        Block<true>(op, d, wb, nullptr, inside[p] ? xi.data() + p * k : nullptr, o0, y);
      } else {
        Block<false>(op, d, wb, inside[p] ? xf.data() + p * k : nullptr, nullptr, o0, y);
      }
      uint8_t* out_px =
          out + (p / op.out_w) * op.out_stride + (p % op.out_w) * stream::OutPixelStride(op);
      for (size_t l = 0; l < lanes; ++l) {
        const float sum = y[l] + d.bias[o0 + l];
        if (int8) {
          out_px[o0 + l] =
              static_cast<uint8_t>(ref::RequantizeFloat(sum, d.requant[o0 + l], out_zp, lo, hi));
        } else {
          ref::StoreHalf(out_px + (o0 + l) * 2, ref::Activate(sum, op.act, lo_f, hi_f));
        }
      }
    }
  });
}

}  // namespace fast
}  // namespace tvm_npu
