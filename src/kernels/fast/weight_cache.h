/*!
 * \file weight_cache.h
 * \brief Packed int8 weights kept between calls, so a CONV2D repacks its weights only when the
 *        weights in SRAM change.
 *
 * An entry remembers the raw weight bytes it was packed from and is used only while SRAM holds
 * exactly those bytes (one memcmp, far cheaper than packing), so the cache can never change a
 * result: a stream that puts other weights at the same command gets them repacked.
 */
#ifndef TVM_NPU_KERNELS_FAST_WEIGHT_CACHE_H_
#define TVM_NPU_KERNELS_FAST_WEIGHT_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tvm_npu {
namespace fast {

struct PackedWeights {
  int level;
  size_t oc, k, kp;
  std::vector<int8_t> raw;      // oc rows of k bytes, compacted
  std::vector<uint8_t> packed;  // PackWeightsInt8's layout for `level`
  std::vector<uint32_t> wsum;   // per output channel: sum of its k weights (wrapping)
};

class WeightCache {
 public:
  /*! \brief The packed form of `oc` rows of `k` weights at `w`, `w_stride` bytes apart, for
   *         `level`; `key` names the command (entries of different keys never mix). */
  std::shared_ptr<const PackedWeights> Get(size_t key, int level, const int8_t* w,
                                           size_t w_stride, size_t k, size_t kp, size_t oc);

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::shared_ptr<const PackedWeights>> entries_;
};

/*! \brief Packs without a cache (the direct kernel entry points, and a cache miss). */
std::shared_ptr<const PackedWeights> PackWeights(int level, const int8_t* w, size_t w_stride,
                                                 size_t k, size_t kp, size_t oc);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_WEIGHT_CACHE_H_
