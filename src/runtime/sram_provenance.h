/*!
 * \file sram_provenance.h
 * \brief Which SRAM bytes a command may write, and which CONV2Ds read weights (and a bias or
 *        requantization block) that are the same bytes in every call.
 *
 * A call starts from a zeroed SRAM and runs the stream's commands in program order, so a byte
 * last written by a DMA_LOAD from the weight region (the blob, read-only) holds the same value in
 * every call, whatever the inputs. The fast CONV2D packs its weights once per command (a
 * fast::WeightCache); for such commands it can trust the packed copy without comparing the SRAM
 * bytes each call. Anything else (a load from the activation arena, any compute output) may
 * depend on the inputs and keeps the comparison.
 */
#ifndef TVM_NPU_RUNTIME_SRAM_PROVENANCE_H_
#define TVM_NPU_RUNTIME_SRAM_PROVENANCE_H_

#include <cstdint>
#include <vector>

#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief A half-open byte range [begin, end). */
struct ByteRange {
  uint64_t begin, end;
};

/*! \brief The SRAM bytes `cmd` may write: its output rows from first to last, padding between
 *         rows included (a superset). Empty for DMA_STORE and END; an unknown opcode may write
 *         all of [0, sram_bytes). */
ByteRange SramWrites(const stream::Command& cmd, uint64_t sram_bytes);

/*! \brief The SRAM bytes `cmd` may read: per operand, its first row's start to its last row's
 *         end (a superset); an unknown opcode may read all of SRAM. */
std::vector<ByteRange> SramReads(const stream::Command& cmd, const NPUConfig& config);

/*!
 * \brief For each command of a validated stream: true for a DMA_LOAD from the weight region whose
 *        SRAM bytes no earlier command reads or writes and no later command writes.
 *
 * Such a load puts the same bytes in place in every call, nothing sees them before it, and they
 * stay until the call ends. So a call whose SRAM still holds what the previous call of the same
 * stream left there need not run it: the reference NPU keeps those bytes when it clears SRAM
 * between calls, and skips these loads (an LSTM's recurrent weights, loaded once per call).
 */
std::vector<bool> ResidentLoads(const ParsedStream& ps);

/*! \brief The SRAM bytes the DMA_LOADs flagged in `loads` write (their rows, not the gaps between),
 *         as sorted, disjoint ranges. */
std::vector<ByteRange> LoadedBytes(const ParsedStream& ps, const std::vector<bool>& loads);

/*! \brief For each command of a validated stream: true for a CONV2D whose weight rows and bias
 *         (int8: requantization block), when it runs, hold bytes loaded from the weight region only
 *         (the same in every call). */
std::vector<bool> ConstantWeightCommands(const ParsedStream& ps);

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_SRAM_PROVENANCE_H_
