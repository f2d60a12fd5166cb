/*!
 * \file state_checks.h
 * \brief Validation at load of format 1.4's state region and position register (docs/npu.md
 *        sections 3 and 6): state and position descriptors, and DMAs that reach a state tensor.
 */
#ifndef TVM_NPU_RUNTIME_STATE_CHECKS_H_
#define TVM_NPU_RUNTIME_STATE_CHECKS_H_

#include <tvm_npu/stream_format.h>

#include <cstddef>
#include <string>

#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief Tensor `i` of role state or position: its fields, its slot or input argument (recorded
 *         in `ps`), its quantization entry (two zero words). */
void CheckStateOrPosition(const std::string& where, size_t i, ParsedStream* ps);

/*! \brief No two state tensors overlap or share a slot. */
void CheckStatesDisjoint(const ParsedStream& ps);

/*! \brief True if `op`'s DDR side starts in the state region; then checks that it lies inside one
 *         state tensor and that its SRAM side lies in SRAM (a load reads, a store writes it). */
bool CheckStateDma(const std::string& where, const stream::DmaOperands& op, bool load,
                   const ParsedStream& ps);

/*! \brief Format 1.5: every SRAM byte range `cmd` reads or writes lies below the SRAM state area
 *         (header word 3) or inside one SRAM state tensor; ERR_INVALID_ADDR otherwise. */
void CheckSramStateArea(const std::string& where, const stream::Command& cmd,
                        const ParsedStream& ps);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_STATE_CHECKS_H_
