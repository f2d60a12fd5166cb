/*!
 * \file executor.h
 * \brief Run a validated stream functionally on the reference NPU, and count its cycles (once).
 *
 * One call owns all its mutable state: a zeroed SRAM of sram_bytes and a zeroed DDR activation
 * arena [weights_bytes, ddr_bytes), taken from the stream's ExecCache (reused, cleared) or
 * allocated for the call. The weight region is read in place from the blob. So one ParsedStream
 * can be executed from several threads at once.
 */
#ifndef TVM_NPU_RUNTIME_EXECUTOR_H_
#define TVM_NPU_RUNTIME_EXECUTOR_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/fast/weight_cache.h"
#include "runtime/output_counts.h"
#include "runtime/sram_provenance.h"
#include "runtime/state_store.h"
#include "runtime/stream_parser.h"

namespace tvm_npu {

struct CommandRecord {
  uint32_t index;
  uint32_t opcode;
  uint32_t engine;  // Engine (cycle_model.h), kEngineNone for END
  uint64_t issue;
  uint64_t start;
  uint64_t end;
  uint64_t bus_bytes;  // DMA only
  uint64_t macs;       // CONV2D only (vector ops do no MACs)
};

struct Stats {
  uint64_t total_cycles = 0;
  uint64_t mac_cycles = 0;           // MAC array busy
  uint64_t vector_cycles = 0;        // vector unit busy
  std::vector<uint64_t> dma_cycles;  // per channel busy (start to last burst)
  uint64_t ddr_read_bytes = 0;       // bus bytes of DMA_LOADs
  uint64_t ddr_write_bytes = 0;      // bus bytes of DMA_STOREs
  uint64_t macs = 0;  // nominal MACs per CONV2D: out_h*out_w*oc*kh*kw*in_c (depthwise: *1)
  uint64_t commands = 0;
  std::vector<CommandRecord> records;
  // Summed over calls (a module's "total" only): each command's MACs, so a caller can weigh them by
  // the command's dtype without reading every call's records.
  std::vector<uint64_t> command_macs;
};

/*!
 * \brief What one stream keeps between calls so a call does not start from scratch: SRAM and
 *        DDR arena buffers handed back zeroed, and packed weights (fast::WeightCache).
 *
 * Each call still sees a zeroed SRAM and arena, as the contract says: a returned buffer is
 * cleared up to the highest byte any command of the stream (or the input staging) can write —
 * a bound computed once from the validated stream — instead of all of it. The one exception is
 * invisible to the stream: the bytes of its resident loads (ResidentLoads), which no command reads
 * before the load writes them, stay in place, and the next call of the same stream on those
 * buffers skips the loads. Safe to share between threads; each call takes its own buffers.
 */
class ExecCache {
 public:
  explicit ExecCache(const ParsedStream& ps);

  struct Buffers {
    std::vector<uint8_t> sram, arena;
    // Zero but for `retained`: the SRAM ranges the stream `owner` (an ExecCache id, 0 = none)
    // left holding its resident loads' bytes when its last call ended.
    uint64_t owner = 0;
    std::shared_ptr<const std::vector<ByteRange>> retained;
  };
  /*! \brief Buffers for a call; all zero, or (owner() == id()) holding this stream's resident loads. */
  std::unique_ptr<Buffers> Acquire();
  /*! \brief Clears what the call wrote; a call that `completed` keeps its resident loads' bytes. */
  void Release(std::unique_ptr<Buffers> buffers, bool completed);

  uint64_t id() const { return id_; }
  /*! \brief resident_loads()[i]: command i is a DMA_LOAD a warm call skips (ResidentLoads). */
  const std::vector<bool>& resident_loads() const { return resident_; }

  fast::WeightCache weights;

 private:
  uint64_t id_;                        // unique in the process, never reused
  uint64_t sram_bytes_, arena_bytes_;  // full sizes
  uint64_t sram_dirty_, arena_dirty_;  // the bounds a call can write below
  std::vector<bool> resident_;
  std::shared_ptr<const std::vector<ByteRange>> retained_;  // sorted, disjoint
};

/*!
 * \brief What one call's input staging saturated, per input (docs/npu.md section 2, "Staging a
 *        float32 input beyond the fp16 range" and "Quantized staging"): the profile's counts.
 */
struct StagingCounts {
  explicit StagingCounts(size_t inputs = 0)
      : saturated(inputs, 0), clamped(inputs, 0), clamped_rows(inputs) {}
  // Finite fp32 values beyond the fp16 range (abs above 65504) the fp16 staging saturated to
  // +-65504; 0 for int8 / int16 inputs.
  std::vector<uint64_t> saturated;
  // Values the quantized staging (format 1.3) clamped to the dtype's range: those whose
  // round_half_even(x / s) + z falls outside it, NaN and +-inf included; 0 for other inputs.
  std::vector<uint64_t> clamped;
  // The same per row of the device view (n * H + h; a ROWS tensor's rows of its last axis):
  // (row, count) of the rows with a clamped value, in row order.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> clamped_rows;
};

/*!
 * \brief The cycle model over a validated stream: per-command timing and the call's counters.
 *
 * Timing depends on the commands only, never on the data (docs/npu.md section 5), so a module
 * computes it once and every call reports the same Stats; a call pays nothing for it. Format 1.4:
 * a command with pos_mode is timed with its effective operands at `position`, so a stream that
 * has one is timed once per position a call passes.
 */
Stats TimeStream(const ParsedStream& ps, uint32_t position = 0);

/*!
 * \brief Execute one call functionally: stage the inputs, run the commands, stage the outputs.
 *
 * \param ps The validated stream.
 * \param inputs num_inputs host tensors (fp32, or int8 for int8 descriptors), in io_index order.
 * \param outputs num_outputs host tensors to write, likewise, in io_index order.
 * \param cache The stream's ExecCache, or nullptr to allocate everything for this call.
 * \param state The module's state tensors (format 1.4), or nullptr for a stream without any; the
 *        caller holds its CallLock().
 * \param counts Filled with the call's saturation and overflow counters per command, or nullptr.
 *
 * \return Per input, what its staging saturated (StagingCounts, docs/npu.md section 2).
 *
 * Throws ERR_SHAPE_MISMATCH if an argument's count, dtype, shape, layout or device differs from
 * the compiled one, ERR_POSITION_RANGE if the position input is outside the stream's limit.
 */
StagingCounts Execute(const ParsedStream& ps, const std::vector<const DLTensor*>& inputs,
                      const std::vector<DLTensor*>& outputs, ExecCache* cache = nullptr,
                      const StateBinding* state = nullptr, CommandCounts* counts = nullptr);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_EXECUTOR_H_
