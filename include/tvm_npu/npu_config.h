// Generated from python/tvm_npu/contract/spec.py by python -m tvm_npu.contract.generate.
// Do not edit: change the spec and regenerate (tests/contract/ checks this file).
/*!
 * \file tvm_npu/npu_config.h
 * \brief The NPU's numbers (docs/npu.md section 1) and status codes (section 7).
 *
 * Python reads the same spec (tvm_npu.contract.config and .errors). The field order is the order
 * of the configuration block of a command stream, so a block can be copied into this struct word
 * by word.
 */
#ifndef TVM_NPU_NPU_CONFIG_H_
#define TVM_NPU_NPU_CONFIG_H_

#include <cstdint>

namespace tvm_npu {

struct NPUConfig {
  uint32_t clock_mhz;            // core clock
  uint32_t mac_rows;             // MAC array rows (input-channel / tap dimension)
  uint32_t mac_cols;             // MAC array columns (output-channel dimension)
  uint32_t fp16_rate_div;        // an fp16 MAC takes this many int8 MAC slots
  uint32_t sram_bytes;           // on-chip SRAM
  uint32_t sram_banks;           // SRAM banks (interleaved every `alignment` bytes)
  uint32_t ddr_bytes_per_cycle;  // DDR bandwidth, shared by all DMA channels
  uint32_t burst_bytes;          // DDR burst size; a transfer moves whole bursts
  uint32_t dma_latency;          // fixed cycles from DMA issue to its first burst
  uint32_t dma_channels;         // DMA channels running concurrently with compute
  uint32_t vector_lanes;         // vector-unit lanes (elements per cycle)
  uint32_t alignment;            // alignment of every address and row stride (bytes)
  uint32_t op_overhead;          // fixed cycles per compute command (setup, drain)
  uint32_t max_rank;             // highest tensor rank an NPU op accepts
  uint32_t max_width;            // largest width (W of a map, a vector row) accepted
  uint32_t max_tensors;          // tensors one task (one command stream) may reference

  /*! \brief The `npu-ref` preset. */
  static NPUConfig NpuRef() {
    return {1000, 32, 32, 4, 2097152, 16, 16, 128, 64, 2, 64, 128, 32, 4, 2048, 64};
  }

  /*! \brief The `npu-small` preset. */
  static NPUConfig NpuSmall() {
    return {500, 16, 16, 4, 524288, 8, 8, 128, 64, 2, 32, 128, 32, 4, 2048, 64};
  }

  /*! \brief The `npu-laptop` preset. */
  static NPUConfig NpuLaptop() {
    return {1800, 128, 128, 2, 8388608, 32, 48, 128, 120, 2, 256, 128, 32, 4, 4096, 64};
  }
};

static_assert(sizeof(NPUConfig) == 64, "NPUConfig must match the 64-byte configuration block");

enum class NPUStatus : uint32_t {
  kOk = 0,
  kInvalidAddr = 1,
  kOpNotSupported = 2,
  kTaskTooComplex = 3,
  kSramOverflow = 4,
  kBadStream = 5,
  kShapeMismatch = 6,
  kTimeout = 7,
  kInvalidModel = 8,
  kInvalidConfig = 9,
  kBadArtifact = 10,
  kPositionRange = 11,
  kMemoryOverflow = 12,
  kLlmContext = 13,
  kLlmToken = 14,
  kLlmState = 15,
};

/*! \brief The code's name as written in docs/npu.md, e.g. "ERR_BAD_STREAM". */
inline const char* StatusName(NPUStatus status) {
  switch (status) {
    case NPUStatus::kOk: return "NPU_OK";
    case NPUStatus::kInvalidAddr: return "ERR_INVALID_ADDR";
    case NPUStatus::kOpNotSupported: return "ERR_OP_NOT_SUPPORTED";
    case NPUStatus::kTaskTooComplex: return "ERR_TASK_TOO_COMPLEX";
    case NPUStatus::kSramOverflow: return "ERR_SRAM_OVERFLOW";
    case NPUStatus::kBadStream: return "ERR_BAD_STREAM";
    case NPUStatus::kShapeMismatch: return "ERR_SHAPE_MISMATCH";
    case NPUStatus::kTimeout: return "ERR_TIMEOUT";
    case NPUStatus::kInvalidModel: return "ERR_INVALID_MODEL";
    case NPUStatus::kInvalidConfig: return "ERR_INVALID_CONFIG";
    case NPUStatus::kBadArtifact: return "ERR_BAD_ARTIFACT";
    case NPUStatus::kPositionRange: return "ERR_POSITION_RANGE";
    case NPUStatus::kMemoryOverflow: return "ERR_MEMORY_OVERFLOW";
    case NPUStatus::kLlmContext: return "ERR_LLM_CONTEXT";
    case NPUStatus::kLlmToken: return "ERR_LLM_TOKEN";
    case NPUStatus::kLlmState: return "ERR_LLM_STATE";
  }
  return "ERR_UNKNOWN";
}

}  // namespace tvm_npu

#endif  // TVM_NPU_NPU_CONFIG_H_
