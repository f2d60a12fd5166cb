/*!
 * \file position.h
 * \brief The run-time position register (format 1.4, docs/npu.md section 3): commands whose
 *        operands add the call's position (`pos_mode`), resolved to static commands; the largest
 *        position a stream accepts; and the position a call passes.
 *
 * A command with `pos_mode` runs, is checked and is timed as the command with its effective
 * operands at the call's position p, so the kernels, the range checks and the cycle model see
 * static commands only. Every footprint grows with p, so the checks that pass at p pass below it:
 * the stream's position limit is found by bisection over those same checks.
 */
#ifndef TVM_NPU_RUNTIME_POSITION_H_
#define TVM_NPU_RUNTIME_POSITION_H_

#include <dlpack/dlpack.h>
#include <tvm_npu/stream_format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief The largest position any stream accepts (docs/npu.md section 3). */
constexpr uint32_t kMaxPosition = (1u << 24) - 1;

/*! \brief The command's pos_mode word (0 for an opcode without one). */
uint32_t PosModeOf(const stream::Command& cmd);

/*!
 * \brief The command with its effective operands at position p (docs/npu.md section 3): a DMA's DDR
 *        address and rows, a MATMUL's n and k with pos_mode cleared; a causal SOFTMAX's row_elems,
 *        its pos_mode kept (the kernel masks by it). Sums saturate at 0xFFFFFFFF, so a range check
 *        fails rather than wraps. A command without pos_mode is returned unchanged.
 */
stream::Command Resolve(const stream::Command& cmd, uint64_t p);

/*! \brief ERR_BAD_STREAM if `cmd`'s pos_mode has a bit its opcode does not define (DMA and
 *         MATMUL: bits 0 and 1; SOFTMAX: bit 0). */
void CheckPosMode(const std::string& where, const stream::Command& cmd);

/*! \brief `commands` resolved at p. */
std::vector<stream::Command> ResolveAll(const std::vector<stream::Command>& commands, uint64_t p);

/*!
 * \brief The largest p <= kMaxPosition for which `check(Resolve(cmd, p), index)` passes for every
 *        command with pos_mode (it passed at p = 0), and in `reason` what the first failing
 *        command says at the limit + 1 (empty at kMaxPosition).
 */
uint32_t FindPositionLimit(const std::vector<stream::Command>& commands,
                           const std::function<void(const stream::Command&, size_t)>& check,
                           std::string* reason);

/*!
 * \brief The position a call passes in its position input (format 1.4): checked against the
 *        stream's limit, ERR_POSITION_RANGE if outside [0, limit]; 0 for a stream without one.
 *        The tensor itself passed the executor's host-tensor check.
 */
uint32_t CallPosition(const ParsedStream& ps, const std::vector<const DLTensor*>& inputs);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_POSITION_H_
