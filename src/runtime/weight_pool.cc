/*!
 * \file weight_pool.cc
 * \brief The weight pool (weight_pool.h).
 */
#include "runtime/weight_pool.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace tvm_npu {
namespace {

// 64-bit multiply-xorshift over 8-byte words: a key, not a proof (ShareWeights compares the bytes).
uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  for (; i < size; ++i) h = (h ^ data[i]) * 0x100000001B3ull;
  return h ^ (h >> 29);
}

struct Pool {
  std::mutex mutex;
  // (size, hash) -> the regions alive with that key (more than one only on a hash collision).
  std::multimap<std::pair<size_t, uint64_t>, std::weak_ptr<const WeightRegion>> regions;
  std::atomic<bool> sharing{true};
};
Pool& ThePool() {
  static Pool* p = [] {
    Pool* pool = new Pool();  // leaked on purpose: modules may outlive static destruction
    const char* env = std::getenv("TVM_NPU_SHARE_WEIGHTS");
    pool->sharing = env == nullptr || std::strcmp(env, "0") != 0;
    return pool;
  }();
  return *p;
}

std::shared_ptr<const WeightRegion> Copy(const uint8_t* data, size_t size, uint64_t hash) {
  auto r = std::make_shared<WeightRegion>();
  r->bytes.assign(data, data + size);
  r->hash = hash;
  return r;
}

}  // namespace

std::shared_ptr<const WeightRegion> ShareWeights(const uint8_t* data, size_t size) {
  Pool& pool = ThePool();
  const uint64_t hash = Hash(data, size);
  const auto key = std::make_pair(size, hash);
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (!pool.sharing) {  // a copy of its own, listed for FindWeights only
    std::shared_ptr<const WeightRegion> own = Copy(data, size, hash);
    pool.regions.emplace(key, own);
    return own;
  }
  auto [lo, hi] = pool.regions.equal_range(key);
  for (auto it = lo; it != hi;) {
    std::shared_ptr<const WeightRegion> alive = it->second.lock();
    if (alive == nullptr) {
      it = pool.regions.erase(it);  // its last module is gone
      continue;
    }
    if (size == 0 || std::memcmp(alive->bytes.data(), data, size) == 0) return alive;
    ++it;
  }
  std::shared_ptr<const WeightRegion> made = Copy(data, size, hash);
  pool.regions.emplace(key, made);
  return made;
}

std::shared_ptr<const WeightRegion> FindWeights(size_t size, uint64_t hash) {
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  auto [lo, hi] = pool.regions.equal_range(std::make_pair(size, hash));
  for (auto it = lo; it != hi; ++it) {
    if (std::shared_ptr<const WeightRegion> alive = it->second.lock()) return alive;
  }
  return nullptr;
}

bool WeightSharing() { return ThePool().sharing; }
void SetWeightSharing(bool on) { ThePool().sharing = on; }

WeightPoolStats WeightPoolUsage() {
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  WeightPoolStats s;
  for (const auto& [key, weak] : pool.regions) {
    if (weak.expired()) continue;
    ++s.regions;
    s.bytes += key.first;
  }
  return s;
}

}  // namespace tvm_npu
