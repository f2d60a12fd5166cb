/*!
 * \file command_checks.h
 * \brief Validation of single commands (docs/npu.md section 6, "Validation at load"), and the
 *        range / alignment helpers the stream parser shares with them.
 *
 * Two levels: Check*Params look only at an op's shape, dtype and quantization operands (no
 * addresses), so the direct kernel entry points (ref_functions.cc) refuse exactly what a stream
 * would; Check<Op> adds the SRAM footprints and overlaps for a command inside a stream.
 * Every size is computed in 64 bits, saturating, so hostile values cannot wrap.
 */
#ifndef TVM_NPU_RUNTIME_COMMAND_CHECKS_H_
#define TVM_NPU_RUNTIME_COMMAND_CHECKS_H_

#include <tvm_npu/npu_config.h>
#include <tvm_npu/stream_format.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/npu_error.h"
#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief "<kind> <index> (<detail>)", the prefix of every validation message. */
std::string Where(const char* kind, size_t index, const std::string& detail);

/*! \brief A range [addr, addr + bytes) must lie in [lo, hi) (ERR_INVALID_ADDR). */
void CheckRange(const std::string& where, const char* what, uint64_t addr, uint64_t bytes,
                const char* space, uint64_t lo, uint64_t hi);

/*! \brief `value` must be a multiple of `alignment` (ERR_INVALID_ADDR). */
void CheckAligned(const std::string& where, const char* what, uint64_t value, uint32_t alignment);

/*!
 * \brief A 2-D buffer of `rows` rows, `stride` bytes apart, each holding `row_bytes`: checks
 *        alignment, stride >= row_bytes and that the footprint rows * stride lies in [lo, hi).
 *        With `packed_rows` (weights) only the start is aligned, not the stride. `addr_align`
 *        (default: the configuration's alignment) is the start's alignment.
 */
void CheckBuffer(const std::string& where, const char* what, uint64_t addr, uint64_t rows,
                 uint64_t row_bytes, uint64_t stride, const NPUConfig& cfg, const char* space,
                 uint64_t lo, uint64_t hi, bool packed_rows = false, uint32_t addr_align = 0);

/*!
 * \brief The bytes of one row of `width` pixels of `channel_bytes` each, `pixel_stride` apart, after
 *        checking the pixel stride: 0 (packed) or at least the pixel's bytes and a multiple of the
 *        element size (ERR_BAD_STREAM).
 */
uint64_t PixelRowBytes(const std::string& where, const char* what, uint64_t width,
                       uint64_t channel_bytes, uint32_t pixel_stride, uint64_t elem);

inline bool Overlaps(uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

/*! \brief An operand of a command in SRAM: `rows` rows of `row_bytes`, `stride` bytes apart,
 *         starting at `addr` aligned to `addr_align` (0: the configuration's alignment). */
struct SramRows {
  const char* what;
  uint64_t addr, rows, row_bytes, stride;
  uint32_t addr_align = 0;
};

/*!
 * \brief CheckBuffer on each input, then on the output, all in SRAM; then whether the output's
 *        footprint overlaps an input's. Kernels write their output while they still read their
 *        inputs, so every caller refuses an overlap (ERR_INVALID_ADDR).
 */
bool OutputOverlapsInputs(const std::string& where, const NPUConfig& c,
                          std::initializer_list<SramRows> inputs, const SramRows& output);

/*!
 * \brief The SRAM operands of ADD and ELTWISE (`rows` rows each, b `b_rows`): checked as
 *        OutputOverlapsInputs does, and the output may overlap neither input. a and b may alias
 *        each other (x + x).
 */
template <typename Op>
void CheckBinaryBuffers(const std::string& where, const NPUConfig& c, const Op& op, uint64_t a_row,
                        uint64_t b_rows, uint64_t b_row, uint64_t out_row) {
  if (OutputOverlapsInputs(where, c,
                           {{"a", op.a_addr, op.rows, a_row, op.a_stride},
                            {"b", op.b_addr, b_rows, b_row, op.b_stride}},
                           {"output", op.out_addr, op.rows, out_row, op.out_stride})) {
    NPU_THROW(kInvalidAddr) << where << ": the output tile overlaps an input in SRAM";
  }
}

/*! \brief Shared field checks of the compute commands (ERR_BAD_STREAM): dtype fp16 or int8; an
 *         fp16 epilogue (act <= clip, the integer fields 0); an int8 epilogue (act 0, clamp and
 *         zero points within int8); a shift in 1..62; a configuration with an fp16 vector lane. */
void CheckDType(const std::string& where, uint32_t dtype);
void CheckFp16Epilogue(const std::string& where, uint32_t act,
                       std::initializer_list<uint32_t> int_fields);
void CheckInt8Epilogue(const std::string& where, uint32_t act, uint32_t lo, uint32_t hi,
                       std::initializer_list<uint32_t> zero_points);
// The int8 form of a vector command computed in fp32 (SOFTMAX, NORM; format 1.4): zero points within
// int8 and scales finite and > 0; fp16 leaves the four words 0.
void CheckRowIo(const std::string& where, uint32_t dtype, uint32_t in_zp, uint32_t in_scale,
                uint32_t out_zp, uint32_t out_scale);
void CheckShift(const std::string& where, uint32_t shift);
void CheckVectorConfig(const std::string& where, const NPUConfig& c);

/*! \brief ELTWISE's b elements per row: row_elems, channels or 1, per b_mode (section 6). */
uint64_t EltwiseBRowElems(const stream::EltwiseOperands& op);
/*! \brief Element bytes of an ELTWISE operand whose own dtype word is `own` (0: the command's). */
uint64_t EltwiseElemBytes(uint32_t own, const stream::EltwiseOperands& op);

void CheckConv2DParams(const std::string& where, const stream::Conv2DOperands& op);
void CheckAddParams(const std::string& where, const stream::AddOperands& op);
void CheckPoolParams(const std::string& where, const stream::PoolOperands& op);
void CheckEltwiseParams(const std::string& where, const stream::EltwiseOperands& op);
void CheckUnaryParams(const std::string& where, const stream::UnaryOperands& op);
void CheckSoftmaxParams(const std::string& where, const stream::SoftmaxOperands& op);
void CheckNormParams(const std::string& where, const stream::NormOperands& op);
void CheckGnStatsParams(const std::string& where, const stream::GnStatsOperands& op);
void CheckGnApplyParams(const std::string& where, const stream::GnApplyOperands& op);
void CheckMatmulParams(const std::string& where, const stream::MatmulOperands& op);
void CheckRopeParams(const std::string& where, const stream::RopeOperands& op);

void CheckDma(const std::string& where, const stream::Command& cmd, const ParsedStream& ps);
void CheckConv2D(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckAdd(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckPool(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckEltwise(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckUnary(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckSoftmax(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckNorm(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckGnStats(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
void CheckGnApply(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);
/*! \brief Format 1.7, across the stream: a GN_STATS with first 0 or a GN_APPLY reads records an
 *         earlier GN_STATS with first 1 started at its stats_addr, with its groups and channels
 *         (ERR_BAD_STREAM). */
void CheckGnRecords(const std::vector<stream::Command>& commands);
void CheckMatmul(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg,
                 uint32_t version_minor);
void CheckRope(const std::string& where, const stream::Command& cmd, const NPUConfig& cfg);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_COMMAND_CHECKS_H_
