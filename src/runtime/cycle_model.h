/*!
 * \file cycle_model.h
 * \brief The emulator's cycle count: docs/npu.md section 5, formula for formula.
 *
 * python/tvm_npu/cost_model.py implements the same formulas for the compiler; this is the
 * independent count the two are checked against. Feed it every command of a stream in order.
 */
#ifndef TVM_NPU_RUNTIME_CYCLE_MODEL_H_
#define TVM_NPU_RUNTIME_CYCLE_MODEL_H_

#include <tvm_npu/npu_config.h>
#include <tvm_npu/stream_format.h>

#include <array>
#include <cstdint>
#include <vector>

namespace tvm_npu {

/*! \brief Engines, numbered as the wait fields of word 0. */
enum Engine : uint32_t {
  kEngineDma0 = 0,
  kEngineDma1 = 1,
  kEngineMac = 2,
  kEngineVector = 3,
  kNumEngines = 4,
  kEngineNone = 0xFF,  // END occupies no engine
};
static_assert(kNumEngines == stream::kNumWaitFields, "one wait field per engine");

/*! \brief "dma0", "dma1", "mac", "vector" (the names python/tvm_npu/stream.py uses), or "". */
const char* EngineName(uint32_t engine);

/*!
 * \brief When a command ran: issued by the command processor at `issue`, taken by its engine at
 *        `start` (once the engine finished its previous command), done at `end`. A DMA's first
 *        burst comes dma_latency after `start` or later.
 */
struct CommandTiming {
  uint32_t engine;
  uint64_t issue;
  uint64_t start;
  uint64_t end;
};

class CycleModel {
 public:
  explicit CycleModel(const NPUConfig& config) : config_(config) {}

  /*! \brief Issue one (validated) command and advance the engines' state. */
  CommandTiming OnCommand(const stream::Command& cmd);

  /*! \brief max(busy_until) over all engines: the cycles of the call so far. */
  uint64_t TotalCycles() const;
  /*! \brief Cycles an engine was occupied: the sum of end - start of its commands. */
  uint64_t BusyCycles(uint32_t engine) const { return busy_[engine]; }

  /*! \brief rows * ceil(row_bytes / burst_bytes) * burst_bytes. */
  static uint64_t DmaBusBytes(const NPUConfig& config, const stream::DmaOperands& op);
  /*! \brief MAC-array passes P of a CONV2D (docs/npu.md section 4): the dense mapping, or for
   *         depthwise (groups != 1) OH*OW*ceil(C/mac_cols)*ceil(KH*KW/mac_rows). */
  static uint64_t Conv2DPasses(const NPUConfig& config, const stream::Conv2DOperands& op);
  /*! \brief op_overhead + P * rate_div. */
  static uint64_t Conv2DCycles(const NPUConfig& config, const stream::Conv2DOperands& op);
  /*! \brief MAC-array passes of a MATMUL: batch * m * ceil(k / mac_rows) * ceil(n / mac_cols). */
  static uint64_t MatmulPasses(const NPUConfig& config, const stream::MatmulOperands& op);
  /*! \brief Cycles of a MAC-engine command (CONV2D or MATMUL) on the array. */
  static uint64_t MacCycles(const NPUConfig& config, const stream::Command& cmd);
  /*! \brief Vector-unit element-steps: E for ADD, ELTWISE and UNARY, 3 * E for SOFTMAX and a
   *         layernorm NORM, 2 * E for an rmsnorm NORM or a ROPE, E * KH * KW for POOL (section 5). */
  static uint64_t VectorSteps(const stream::Command& cmd);
  /*! \brief op_overhead + ceil(steps / lanes), lanes = vector_lanes (int8) or vector_lanes / 2
   *         (fp16). */
  static uint64_t VectorCycles(const NPUConfig& config, const stream::Command& cmd);

 private:
  NPUConfig config_;
  std::array<std::vector<uint64_t>, kNumEngines> ends_;  // end_e[i]: end of engine e's i-th command
  std::array<uint64_t, kNumEngines> busy_until_{};
  std::array<uint64_t, kNumEngines> busy_{};
  uint64_t next_issue_ = 0;  // t_prev_issue + 1; the first command issues at cycle 0
  uint64_t ddr_busy_until_ = 0;
};

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_CYCLE_MODEL_H_
