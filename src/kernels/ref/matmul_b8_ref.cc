/*!
 * \file matmul_b8_ref.cc
 * \brief Reference MATMUL with an int8 B (an int8 KV cache): fp16 A, int8 codes in B, one fp32 scale
 *        per B batch (docs/npu.md section 2, "MATMUL with an int8 B", format 1.4). Kept apart from the
 *        fp16 kernel: the arithmetic is CONV2D's W8A16 with the scale per B batch.
 */
#include <cmath>
#include <vector>

#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/ref_common.h"
#include "runtime/npu_error.h"

namespace tvm_npu {

void MatmulB8Ref(const stream::MatmulOperands& op, uint8_t* sram) {
  const uint64_t b_batches = (uint64_t{op.batch} - 1) / op.b_group + 1;
  // The scales are data in SRAM: check them before anything is written, as CONV2D's int8 weights do.
  std::vector<float> scale(b_batches);
  for (uint64_t q = 0; q < b_batches; ++q) {
    scale[q] =
        ref::BitsToFloat(static_cast<uint32_t>(ref::LoadI32(sram + op.b_scale_addr + q * 4)));
    if (!std::isfinite(scale[q]) || !(scale[q] > 0.0f)) {
      NPU_THROW(kBadStream) << "MATMUL int8 B: batch " << q << " has scale " << scale[q]
                            << "; it must be finite and > 0 (docs/npu.md section 6)";
    }
  }
  // B's code (p, j): row p, column j of [K, N], or row j, column p of [N, K] (b_transposed).
  const uint64_t b_row_step = op.b_transposed ? 1 : op.b_stride;
  const uint64_t b_col_step = op.b_transposed ? op.b_stride : 1;
  for (uint64_t o = 0; o < op.batch; ++o) {
    const uint8_t* a = sram + op.a_addr + o * op.a_bstride;
    const uint64_t q = o / op.b_group;
    const int8_t* b = reinterpret_cast<const int8_t*>(sram + op.b_addr + q * op.b_bstride);
    uint8_t* out = sram + op.out_addr + o * op.out_bstride;
    for (uint64_t i = 0; i < op.m; ++i) {
      const uint8_t* ar = a + i * op.a_stride;
      for (uint64_t j = 0; j < op.n; ++j) {
        // fp16 x int8 is exact in fp32; each add rounds, then one multiply by the scale.
        float acc = 0.0f;
        for (uint64_t p = 0; p < op.k; ++p) {
          acc += ref::LoadHalf(ar + p * 2) * static_cast<float>(b[p * b_row_step + j * b_col_step]);
        }
        ref::StoreHalf(out + i * op.out_stride + j * 2, acc * scale[q]);
      }
    }
  }
}

}  // namespace tvm_npu
