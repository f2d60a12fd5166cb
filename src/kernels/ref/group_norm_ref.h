/*!
 * \file group_norm_ref.h
 * \brief Reference GN_STATS and GN_APPLY (format 1.7): GroupNorm over tiles of an NHWC fp16 map,
 *        statistics merged tile by tile in an SRAM buffer (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_GROUP_NORM_REF_H_
#define TVM_NPU_KERNELS_REF_GROUP_NORM_REF_H_

#include <tvm_npu/stream_format.h>

#include <cstdint>

namespace tvm_npu {

/*! \brief Bytes of one group's statistics record: u32 count, fp32 mean, fp32 m2. */
constexpr uint64_t kGnRecordBytes = 12;

/*!
 * \brief The tile's count, mean and m2 per group (two in-order fp32 passes over rows, pixels, the
 *        group's channels), written into the records at `stats` (`first`, or a record whose
 *        count is 0) or merged into them by Chan et al.'s formula in section 2's order. The
 *        operands passed CheckGnStatsParams.
 */
void GnStatsRef(const stream::GnStatsOperands& op, const uint8_t* in, uint8_t* stats);

/*!
 * \brief Every element of the tile normalized with its group's record: var = m2 / count,
 *        (x - mean) / sqrt(var + eps), * gamma[c], + beta[c], the optional SiLU, one rounding to
 *        fp16. `gamma` / `beta` are nullptr where the command has kNoParam.
 */
void GnApplyRef(const stream::GnApplyOperands& op, const uint8_t* in, const uint8_t* stats,
                const uint8_t* gamma, const uint8_t* beta, uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_GROUP_NORM_REF_H_
