/*!
 * \file conv2d_fast.cc
 * \brief The fast CONV2D entry (conv2d_fast.h): unpacks the int8 requantization block and picks
 *        the dense, depthwise or fp16 kernel.
 */
#include "kernels/fast/conv2d_fast.h"

#include <tvm_npu/operand_rules.h>

#include <vector>

#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {

void Conv2D(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
            const uint8_t* bias, uint8_t* out, uint32_t alignment, Level level, WeightCache* cache,
            size_t key) {
  // W8A16 (format 1.4) has no fast kernel yet: the reference kernel defines its bits, and decode's
  // dense layers are DMA-bound on the modelled NPU, so the emulator's speed matters less there.
  if (level == kLevelRef || stream::IsW8A16(op)) return Conv2DRef(op, in, w, bias, out, alignment);
  if (stream::IsInt4Weights(op)) return Conv2DInt4(op, in, w, bias, out, alignment, cache, key);
  if (op.dtype != stream::kInt8) return Conv2DFp16(op, in, w, bias, out, level, cache, key);
  const uint64_t row = stream::RequantRowStride(op.oc, alignment);
  // Per thread and kept: a call allocates nothing once warm (small layers run many times a call).
  thread_local std::vector<int32_t> b, bias_adj;
  thread_local std::vector<float> s, scale_pad;
  b.resize(op.oc);
  s.resize(op.oc);
  // The reference refuses a bad scale before writing anything, with its own message.
  auto load_block = [&] {
    return ref::LoadRequantBlock(bias, op.oc, row, b.data(), s.data()) == op.oc;
  };
  if (stream::IsDepthwise(op)) {
    if (!load_block()) return Conv2DRef(op, in, w, bias, out, alignment);
    return Conv2DInt8Depthwise(op, in, w, b.data(), s.data(), out, level);
  }
  const size_t k = uint64_t{op.kh} * op.kw * op.in_c, kp = (k + 3) / 4 * 4;
  const int8_t* w8 = reinterpret_cast<const int8_t*>(w);
  // A constant command (weights and requantization block the same every call) gets its
  // requantization vectors with the packing, once; any other loads and checks them each call.
  const bool constant = cache != nullptr && cache->IsConstant(key);
  auto pack = [&] {
    std::shared_ptr<PackedWeights> e = PackWeights(level, w8, op.w_stride, k, kp, op.oc);
    if (constant && load_block()) {
      DenseRequant(op, *e, b.data(), s.data(), &e->bias_adj, &e->scale_pad);
      e->requant = true;
    }
    return e;
  };
  const std::shared_ptr<const PackedWeights> packed =
      cache != nullptr ? cache->Get(key, level, w, op.w_stride, k, op.oc, pack) : pack();
  if (constant && packed->requant) {
    return Conv2DInt8Dense(op, in, *packed, packed->bias_adj.data(), packed->scale_pad.data(), out);
  }
  if (!load_block()) return Conv2DRef(op, in, w, bias, out, alignment);
  DenseRequant(op, *packed, b.data(), s.data(), &bias_adj, &scale_pad);
  Conv2DInt8Dense(op, in, *packed, bias_adj.data(), scale_pad.data(), out);
}

}  // namespace fast
}  // namespace tvm_npu
