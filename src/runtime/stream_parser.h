/*!
 * \file stream_parser.h
 * \brief Parse and validate a command stream blob (docs/npu.md section 6).
 *
 * The parser is the only code that reads untrusted bytes. It checks every size before reading and
 * every range in 64-bit arithmetic, so any byte string either yields a ParsedStream that the
 * executor can run without further checks, or throws an NPUError with a code. Nothing a
 * ParsedStream holds is modified after parsing, so one can be executed from many threads.
 */
#ifndef TVM_NPU_RUNTIME_STREAM_PARSER_H_
#define TVM_NPU_RUNTIME_STREAM_PARSER_H_

#include <tvm_npu/npu_config.h>
#include <tvm_npu/stream_format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace tvm_npu {

struct ParsedStream {
  stream::Header header;
  NPUConfig config;
  std::vector<stream::TensorDesc> tensors;
  std::vector<stream::Command> commands;  // the last one is END
  std::vector<uint32_t> inputs;           // inputs[i]: index in `tensors` of input argument i
  std::vector<uint32_t> outputs;          // outputs[i]: index in `tensors` of output argument i
  // The weight region (header.weights_bytes bytes, DDR [0, weights_bytes)). It points into the
  // blob, which the owner of the ParsedStream must keep alive and unchanged.
  const uint8_t* weights = nullptr;
  // The quantization table (format 1.3): qparams[i] belongs to tensors[i]; empty without a table.
  std::vector<stream::QParams> qparams;
  // Format 1.4 (docs/npu.md section 3): the input argument read into the position register (-1:
  // none), the largest position the stream accepts and why the next one fails, the state tensors
  // (indices in `tensors`), and the commands resolved at the limit (the widest footprints every
  // position stays within; `commands` itself when no command has pos_mode).
  int64_t position_input = -1;
  uint32_t position_limit = 0;
  std::string position_limit_reason;
  std::vector<uint32_t> state_tensors;
  // Format 1.5: the SRAM state tensors (in the SRAM state area, header word 3), by index.
  std::vector<uint32_t> sram_state_tensors;
  std::vector<stream::Command> widest;
};

/*! \brief An input or output staged with quantization (format 1.3): fp32 on the host, int8 or
 *         int16 on the device. */
inline bool IsQuantized(const stream::TensorDesc& t) {
  return (t.role == stream::kRoleInput || t.role == stream::kRoleOutput) &&
         t.host_dtype == stream::kFP32 && (t.dtype == stream::kInt8 || t.dtype == stream::kInt16);
}

/*! \brief Parse `size` bytes at `data`; throws NPUError (ERR_BAD_STREAM, ...) if invalid. */
ParsedStream ParseStream(const uint8_t* data, size_t size);

/*! \brief CRC-32/IEEE (zlib's crc32, reflected polynomial 0xEDB88320). */
uint32_t Crc32(const uint8_t* data, size_t size);

/*! \brief The operand words 1.. of `cmd` as the operand struct T of its opcode (memcpy: the blob
 *         guarantees no alignment for the struct). */
template <typename T>
inline T OperandsOf(const stream::Command& cmd) {
  static_assert(sizeof(T) <= sizeof(cmd.words) - sizeof(cmd.words[0]), "operands fit the command");
  T op;
  std::memcpy(&op, &cmd.words[1], sizeof(op));
  return op;
}

/*! \brief a * b, saturating at UINT64_MAX so size checks on hostile values cannot wrap. */
inline uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_STREAM_PARSER_H_
