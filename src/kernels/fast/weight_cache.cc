/*!
 * \file weight_cache.cc
 * \brief WeightCache (weight_cache.h).
 */
#include "kernels/fast/weight_cache.h"

#include <cstring>

#include "kernels/fast/gemm_int8.h"

namespace tvm_npu {
namespace fast {
namespace {

bool Matches(const PackedWeights& e, int level, const int8_t* w, size_t w_stride, size_t k,
             size_t oc) {
  if (e.level != level || e.k != k || e.oc != oc) return false;
  for (size_t o = 0; o < oc; ++o) {
    if (std::memcmp(e.raw.data() + o * k, w + o * w_stride, k) != 0) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<const PackedWeights> PackWeights(int level, const int8_t* w, size_t w_stride,
                                                 size_t k, size_t kp, size_t oc) {
  auto e = std::make_shared<PackedWeights>();
  e->level = level;
  e->oc = oc;
  e->k = k;
  e->kp = kp;
  e->raw.resize(oc * k);
  e->wsum.resize(oc);
  for (size_t o = 0; o < oc; ++o) {
    const int8_t* row = w + o * w_stride;
    std::memcpy(e->raw.data() + o * k, row, k);
    uint32_t s = 0;
    for (size_t i = 0; i < k; ++i) s += static_cast<uint32_t>(int32_t{row[i]});
    e->wsum[o] = s;
  }
  e->packed.resize(PackedWeightsBytes(level, oc, kp));
  PackWeightsInt8(level, w, w_stride, k, kp, oc, e->packed.data());
  return e;
}

std::shared_ptr<const PackedWeights> WeightCache::Get(size_t key, int level, const int8_t* w,
                                                      size_t w_stride, size_t k, size_t kp,
                                                      size_t oc) {
  std::shared_ptr<const PackedWeights> hit;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) hit = it->second;
  }
  if (hit && Matches(*hit, level, w, w_stride, k, oc)) return hit;  // entries never change
  std::shared_ptr<const PackedWeights> e = PackWeights(level, w, w_stride, k, kp, oc);
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[key] = e;
  return e;
}

}  // namespace fast
}  // namespace tvm_npu
