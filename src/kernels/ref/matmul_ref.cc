/*!
 * \file matmul_ref.cc
 * \brief Reference MATMUL, fp16 (docs/npu.md sections 2 and 4, format 1.4).
 */
#include "kernels/ref/matmul_ref.h"

#include "kernels/ref/ref_common.h"

namespace tvm_npu {

void MatmulRef(const stream::MatmulOperands& op, uint8_t* sram) {
  if (op.b_dtype == stream::kInt8) {  // an int8 KV cache (matmul_b8_ref.cc)
    MatmulB8Ref(op, sram);
    return;
  }
  // B's element (p, j): row p, column j of [K, N], or row j, column p of [N, K] (b_transposed).
  const uint64_t b_row_step = op.b_transposed ? 2 : op.b_stride;
  const uint64_t b_col_step = op.b_transposed ? op.b_stride : 2;
  for (uint64_t o = 0; o < op.batch; ++o) {
    const uint8_t* a = sram + op.a_addr + o * op.a_bstride;
    const uint8_t* b = sram + op.b_addr + (o / op.b_group) * op.b_bstride;
    uint8_t* out = sram + op.out_addr + o * op.out_bstride;
    for (uint64_t i = 0; i < op.m; ++i) {
      const uint8_t* ar = a + i * op.a_stride;
      for (uint64_t j = 0; j < op.n; ++j) {
        // fp16 x fp16 is exact in fp32; each add rounds (-ffp-contract=off keeps them apart).
        float acc = 0.0f;
        for (uint64_t p = 0; p < op.k; ++p) {
          acc += ref::LoadHalf(ar + p * 2) * ref::LoadHalf(b + p * b_row_step + j * b_col_step);
        }
        ref::StoreHalf(out + i * op.out_stride + j * 2, acc);
      }
    }
  }
}

}  // namespace tvm_npu
