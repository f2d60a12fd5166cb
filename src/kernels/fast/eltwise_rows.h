/*!
 * \file eltwise_rows.h
 * \brief How the vector ELTWISE kernels (fp16 in eltwise_fast.cc, integer in eltwise_int_fast.cc)
 *        walk a command: rows cut into spans, each with the b it reads. Internal to the two.
 */
#ifndef TVM_NPU_KERNELS_FAST_ELTWISE_ROWS_H_
#define TVM_NPU_KERNELS_FAST_ELTWISE_ROWS_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {
namespace fast {

/*!
 * \brief Whether b is the same kLanes values in every block of kLanes elements: a scalar, or a
 *        channel vector whose length divides kLanes (blocks start at multiples of kLanes, hence of
 *        `channels`). If so, `lanes` receives them: lanes[i] = value(b's element i % period).
 */
template <typename T, uint32_t kLanes, typename Value>
bool RepeatingB(const stream::EltwiseOperands& op, T (&lanes)[kLanes], Value value) {
  const bool repeat = op.b_mode == stream::kBScalar ||
                      (op.b_mode == stream::kBChannel && kLanes % op.channels == 0);
  if (repeat) {
    const uint32_t period = op.b_mode == stream::kBScalar ? 1 : op.channels;
    for (uint32_t i = 0; i < kLanes; ++i) lanes[i] = value(i % period);
  }
  return repeat;
}

/*!
 * \brief Calls span(a, b, out, n) for the spans of n elements of every row: the whole row, with
 *        b nullptr where b `repeats` (RepeatingB) and b's own row for b_mode same; else (per
 *        channel) one span per run of the channel vector. a_elem / out_elem: a's and out's bytes
 *        per element.
 */
template <typename Span>
void ForEachSpan(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                 uint8_t* out, bool repeats, uint64_t a_elem, uint64_t out_elem, Span span) {
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ar = a + r * op.a_stride;
    uint8_t* outr = out + r * op.out_stride;
    if (repeats) {
      span(ar, nullptr, outr, op.row_elems);
    } else if (op.b_mode == stream::kBSame) {
      span(ar, b + r * op.b_stride, outr, op.row_elems);
    } else {  // per channel: the row is row_elems / channels runs of the channel vector
      for (uint64_t e = 0; e < op.row_elems; e += op.channels) {
        span(ar + e * a_elem, b, outr + e * out_elem, op.channels);
      }
    }
  }
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_ELTWISE_ROWS_H_
