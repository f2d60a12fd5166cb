/*!
 * \file rope_ref.cc
 * \brief Reference ROPE, fp16 (docs/npu.md section 2).
 */
#include "kernels/ref/rope_ref.h"

#include "kernels/ref/ref_common.h"

namespace tvm_npu {

void RopeRef(const stream::RopeOperands& op, uint8_t* sram) {
  const uint64_t h = op.row_elems / 2;
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* x = sram + op.in_addr + r * op.in_stride;
    const uint64_t t = (op.cs_row0 + r) % op.cs_rows;  // one [S, D] table serves every head
    const uint8_t* c = sram + op.cos_addr + t * op.cs_stride;
    const uint8_t* s = sram + op.sin_addr + t * op.cs_stride;
    uint8_t* y = sram + op.out_addr + r * op.out_stride;
    for (uint64_t i = 0; i < op.row_elems; ++i) {
      const bool low = i < h;  // the first half subtracts the second half's product
      const uint64_t j = low ? i + h : i - h;
      // fp16 x fp16 is exact in fp32, so neither product rounds (nor can an FMA change the sum).
      const float p = ref::LoadHalf(x + i * 2) * ref::LoadHalf(c + i * 2);
      const float q = ref::LoadHalf(x + j * 2) * ref::LoadHalf(s + i * 2);
      ref::StoreHalf(y + i * 2, low ? p - q : p + q);
    }
  }
}

}  // namespace tvm_npu
