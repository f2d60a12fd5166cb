/*!
 * \file weight_pool.h
 * \brief One copy in memory of the weight regions that several modules of a process carry byte for
 *        byte (an LLM's prefill and decode regions: [N][K] weights do not depend on the row count).
 *
 * A process-wide pool, content-addressed (size, a 64-bit hash, then a byte compare: a hash collision
 * never shares different bytes) and reference-counted (a region lives as long as a module holding it;
 * the pool keeps weak references only; unshared copies are listed too, for FindWeights). Thread safe. Weight regions are read-only (docs/npu.md
 * section 3: DDR [0, weights_bytes) is never written), so sharing one can never change a result.
 */
#ifndef TVM_NPU_RUNTIME_WEIGHT_POOL_H_
#define TVM_NPU_RUNTIME_WEIGHT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tvm_npu {

/*! \brief A weight region in memory, shared by every module that carries these bytes. */
struct WeightRegion {
  std::vector<uint8_t> bytes;
  uint64_t hash = 0;
};

/*! \brief The pool's region holding `size` bytes equal to `data` (a new one when none is alive, or
 *         always a private copy while sharing is off). */
std::shared_ptr<const WeightRegion> ShareWeights(const uint8_t* data, size_t size);

/*! \brief A live region of `size` bytes whose hash is `hash` (one ShareWeights made), or nullptr:
 *         what a module serialized with its weights by reference (npu_module.cc) loads. The caller
 *         confirms the bytes (the stream's CRC covers them). */
std::shared_ptr<const WeightRegion> FindWeights(size_t size, uint64_t hash);

/*! \brief Whether ShareWeights shares (default on; $TVM_NPU_SHARE_WEIGHTS=0 starts with it off). Modules
 *         created after a change see it; for measuring the memory sharing saves, and tests. */
bool WeightSharing();
void SetWeightSharing(bool on);

/*! \brief Regions alive in the pool and their bytes (each counted once). */
struct WeightPoolStats {
  uint64_t regions = 0, bytes = 0;
};
WeightPoolStats WeightPoolUsage();

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_WEIGHT_POOL_H_
