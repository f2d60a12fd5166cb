/*!
 * \file tvm_npu/npu_config.h
 * \brief The NPU's numbers (docs/npu.md section 1) and status codes (section 7).
 *
 * Mirrors python/tvm_npu/config.py. The field order is the order of the configuration block of a
 * command stream, so a block can be copied into this struct word by word.
 */
#ifndef TVM_NPU_NPU_CONFIG_H_
#define TVM_NPU_NPU_CONFIG_H_

#include <cstdint>

namespace tvm_npu {

struct NPUConfig {
  uint32_t clock_mhz;
  uint32_t mac_rows;
  uint32_t mac_cols;
  uint32_t fp16_rate_div;
  uint32_t sram_bytes;
  uint32_t sram_banks;
  uint32_t ddr_bytes_per_cycle;
  uint32_t burst_bytes;
  uint32_t dma_latency;
  uint32_t dma_channels;
  uint32_t vector_lanes;
  uint32_t alignment;
  uint32_t op_overhead;
  uint32_t max_rank;
  uint32_t max_width;
  uint32_t max_tensors;

  static NPUConfig NpuRef() {
    return {1000, 32, 32, 4, 2097152, 16, 16, 128, 64, 2, 64, 128, 32, 4, 2048, 64};
  }
  static NPUConfig NpuSmall() {
    return {500, 16, 16, 4, 524288, 8, 8, 128, 64, 2, 32, 128, 32, 4, 2048, 64};
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
  }
  return "ERR_UNKNOWN";
}

}  // namespace tvm_npu

#endif  // TVM_NPU_NPU_CONFIG_H_
