/*!
 * \file weight_cache.cc
 * \brief WeightCache (weight_cache.h).
 */
#include "kernels/fast/weight_cache.h"

#include <cstring>

#include "kernels/fast/gemm_int8.h"

namespace tvm_npu {
namespace fast {
bool WeightCache::Matches(const PackedWeights& e, int level, const uint8_t* w, size_t w_stride,
                          size_t row_bytes, size_t oc, bool compare_bytes) {
  if (e.level != level || e.row_bytes != row_bytes || e.oc != oc) return false;
  if (!compare_bytes) return true;
  for (size_t o = 0; o < oc; ++o) {
    if (std::memcmp(e.raw.data() + o * row_bytes, w + o * w_stride, row_bytes) != 0) return false;
  }
  return true;
}

std::shared_ptr<const PackedWeights> WeightCache::Find(size_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;  // entries never change once stored
}

void WeightCache::Store(size_t key, std::shared_ptr<const PackedWeights> e) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[key] = std::move(e);
}

std::shared_ptr<PackedWeights> NewEntry(int level, const uint8_t* w, size_t w_stride,
                                        size_t row_bytes, size_t oc) {
  auto e = std::make_shared<PackedWeights>();
  e->level = level;
  e->oc = oc;
  e->row_bytes = row_bytes;
  e->raw.resize(oc * row_bytes);
  for (size_t o = 0; o < oc; ++o) {
    std::memcpy(e->raw.data() + o * row_bytes, w + o * w_stride, row_bytes);
  }
  return e;
}

std::shared_ptr<PackedWeights> PackWeights(int level, const int8_t* w, size_t w_stride, size_t k,
                                           size_t kp, size_t oc) {
  std::shared_ptr<PackedWeights> e =
      NewEntry(level, reinterpret_cast<const uint8_t*>(w), w_stride, k, oc);
  e->k = k;
  e->kp = kp;
  e->wsum.resize(oc);
  for (size_t o = 0; o < oc; ++o) {
    const int8_t* row = w + o * w_stride;
    uint32_t s = 0;
    for (size_t i = 0; i < k; ++i) s += static_cast<uint32_t>(int32_t{row[i]});
    e->wsum[o] = s;
  }
  e->packed.resize(PackedWeightsBytes(level, oc, kp));
  PackWeightsInt8(level, w, w_stride, k, kp, oc, e->packed.data());
  return e;
}

}  // namespace fast
}  // namespace tvm_npu
