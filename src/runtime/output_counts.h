/*!
 * \file output_counts.h
 * \brief The profile's saturation and overflow counters per command (docs/npu.md section 5,
 *        "Saturation and overflow counters"): part of the runtime's contract, not of the stream.
 */
#ifndef TVM_NPU_RUNTIME_OUTPUT_COUNTS_H_
#define TVM_NPU_RUNTIME_OUTPUT_COUNTS_H_

#include <cstdint>
#include <vector>

#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief One call's counters, one entry per command (0 for DMA and END). */
struct CommandCounts {
  std::vector<uint64_t> outputs;        // result elements the command wrote
  std::vector<uint64_t> saturated;      // int8 / int16 results the dtype's clamp changed
  std::vector<uint64_t> fp16_overflow;  // fp16 results that are +-inf
  std::vector<uint64_t> nan;            // fp16 results that are NaN
  void Resize(size_t n) {
    outputs.assign(n, 0);
    saturated.assign(n, 0);
    fp16_overflow.assign(n, 0);
    nan.assign(n, 0);
  }
};

/*!
 * \brief Counts the results of compute command `cmd` (resolved) in `sram` after it ran: sets
 *        counts->outputs[i], and for an fp16 result its +-inf and NaN elements.
 */
void CountOutputs(const stream::Command& cmd, const uint8_t* sram, size_t i, CommandCounts* counts);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_OUTPUT_COUNTS_H_
