/*!
 * \file weight_cache.h
 * \brief Packed int8 weights kept between calls, so a CONV2D repacks its weights only when the
 *        weights in SRAM change.
 *
 * An entry remembers the raw weight bytes it was packed from and is used only while SRAM holds
 * exactly those bytes (one memcmp, far cheaper than packing), so the cache can never change a
 * result: a stream that puts other weights at the same command gets them repacked. Commands the
 * owner declares constant (their weights are the same bytes in every call, proved from the
 * stream: runtime/sram_provenance.h) skip the memcmp, which for small layers run many times a
 * call (an LSTM's steps) costs as much as the layer.
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
  int level;                    // the kernel level (and datapath) the layout is for
  size_t oc, k, kp;             // k reduction elements per channel, padded to kp
  size_t row_bytes;             // bytes of one raw weight row
  std::vector<uint8_t> raw;     // oc rows of row_bytes, compacted
  std::vector<uint8_t> packed;  // the level's layout
  std::vector<uint32_t> wsum;   // int8: per output channel, the sum of its k weights (wrapping)
  // int8 dense, constant commands only (WeightCache::IsConstant): the requantization block is
  // constant too, so its DenseRequant vectors are made once, with the packing.
  bool requant = false;
  std::vector<int32_t> bias_adj;
  std::vector<float> scale_pad;
};

class WeightCache {
 public:
  /*! \brief The entry for `oc` raw weight rows of `row_bytes` at `w`, `w_stride` bytes apart,
   *         packed for `level` (int8: PackWeights; fp16: `level + kFp16Tag`); `pack` builds a
   *         new one on a miss. `key` names the command (entries of different keys never mix). */
  template <typename Pack>
  std::shared_ptr<const PackedWeights> Get(size_t key, int level, const uint8_t* w, size_t w_stride,
                                           size_t row_bytes, size_t oc, Pack&& pack) {
    std::shared_ptr<const PackedWeights> hit = Find(key);
    if (hit && Matches(*hit, level, w, w_stride, row_bytes, oc, !IsConstant(key))) return hit;
    hit = pack();
    Store(key, hit);
    return hit;
  }

  /*! \brief keys[k]: command k's weights are the same bytes in every call. Set once, before
   *         the first Get. */
  void SetConstantKeys(std::vector<bool> keys) { constant_ = std::move(keys); }
  bool IsConstant(size_t key) const { return key < constant_.size() && constant_[key]; }

 private:
  static bool Matches(const PackedWeights& e, int level, const uint8_t* w, size_t w_stride,
                      size_t row_bytes, size_t oc, bool compare_bytes);
  std::shared_ptr<const PackedWeights> Find(size_t key);
  void Store(size_t key, std::shared_ptr<const PackedWeights> e);

  std::mutex mutex_;
  std::unordered_map<size_t, std::shared_ptr<const PackedWeights>> entries_;
  std::vector<bool> constant_;
};

/*! \brief Tags fp16 entries apart from int8 ones of the same level. */
constexpr int kFp16Tag = 100;

/*! \brief The tag of unpacked int4 codes (conv2d_int4_fast.cc; + the w_dtype code), one layout
 *         for every level. */
constexpr int kInt4Tag = 200;

/*! \brief An entry with `raw` filled from the rows at `w` (shared by every packer). */
std::shared_ptr<PackedWeights> NewEntry(int level, const uint8_t* w, size_t w_stride,
                                        size_t row_bytes, size_t oc);

/*! \brief Packs int8 weights for `level` (PackWeightsInt8, plus the row sums). */
std::shared_ptr<PackedWeights> PackWeights(int level, const int8_t* w, size_t w_stride, size_t k,
                                           size_t kp, size_t oc);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_WEIGHT_CACHE_H_
