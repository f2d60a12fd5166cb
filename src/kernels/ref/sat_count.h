/*!
 * \file sat_count.h
 * \brief The saturation counter of the integer requantizations (docs/npu.md section 5, "Saturation
 *        and overflow counters"): how many int8 / int16 results the clamp to the output dtype's
 *        range changed.
 *
 * A result saturates when the value before the clamp, z_y + r, lies beyond the dtype's range and
 * the clamp bound it lands on is the dtype's own (-128 / 127, -32768 / 32767) but not the zero
 * point. A bound the activation set (relu's lo = z_y, a relu6 top below 127) clips by design, and
 * so does a range that ends at 0 (z_y = -128: how a quantizer folds a relu into the output's
 * scale), so neither is counted.
 *
 * The executor points the calling thread's sink at a per-command counter before a command runs;
 * the fast kernels' thread pool hands the caller's sink to its workers for the job, so the count
 * is the same whichever thread computed a tile, and the same as the reference kernels' (tested).
 * Increments are rare (only saturated results), so one relaxed atomic add per saturated block.
 */
#ifndef TVM_NPU_KERNELS_REF_SAT_COUNT_H_
#define TVM_NPU_KERNELS_REF_SAT_COUNT_H_

#include <atomic>
#include <cstdint>

namespace tvm_npu {
namespace ref {

/*! \brief The counter requantizations on this thread add to; nullptr counts nothing. */
inline std::atomic<uint64_t>*& SatSink() {
  thread_local std::atomic<uint64_t>* sink = nullptr;
  return sink;
}

/*! \brief Adds n saturated results to this thread's sink. */
inline void CountSaturated(uint64_t n) {
  std::atomic<uint64_t>* sink = SatSink();
  if (n != 0 && sink != nullptr) sink->fetch_add(n, std::memory_order_relaxed);
}

/*! \brief Counts y (z_y + r before the clamp to [lo, hi]) if it saturates in [dmin, dmax]. */
inline void CountIfSaturated(double y, int32_t zp, int32_t lo, int32_t hi, int32_t dmin,
                             int32_t dmax) {
  if ((y > dmax && hi == dmax && zp != dmax) || (y < dmin && lo == dmin && zp != dmin)) {
    CountSaturated(1);
  }
}

/*! \brief Points this thread's sink at `sink` for the scope, then restores the previous one. */
class SatScope {
 public:
  explicit SatScope(std::atomic<uint64_t>* sink) : saved_(SatSink()) { SatSink() = sink; }
  ~SatScope() { SatSink() = saved_; }
  SatScope(const SatScope&) = delete;
  SatScope& operator=(const SatScope&) = delete;

 private:
  std::atomic<uint64_t>* saved_;
};

}  // namespace ref
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_SAT_COUNT_H_
