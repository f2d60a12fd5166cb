/*!
 * \file add_fast.cc
 * \brief Fast ADD (add_fast.h).
 */
#include "kernels/fast/add_fast.h"

#include "kernels/fast/eltwise_fast.h"
#include "kernels/ref/add_ref.h"

namespace tvm_npu {
namespace fast {
namespace {

// ADD is an ELTWISE add whose b has a's shape, all operands of the command's dtype (docs/npu.md
// sections 2 and 6): the same arithmetic, so ELTWISE's vector kernels serve both.
stream::EltwiseOperands AsEltwise(const stream::AddOperands& op) {
  stream::EltwiseOperands e{};
  e.dtype = op.dtype;
  e.kind = stream::kEltAdd;
  e.b_mode = stream::kBSame;
  e.a_stride = op.a_stride;
  e.b_stride = op.b_stride;
  e.out_stride = op.out_stride;
  e.rows = op.rows;
  e.row_elems = op.row_elems;
  e.act = op.act;
  e.clip_lo = op.clip_lo;
  e.clip_hi = op.clip_hi;
  e.a_zp = op.a_zp;
  e.b_zp = op.b_zp;
  e.out_zp = op.out_zp;
  e.a_mult = op.a_mult;
  e.b_mult = op.b_mult;
  e.shift = op.shift;
  return e;
}

}  // namespace

void Add(const stream::AddOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
         Level level) {
  if (level == kLevelAvx512Vnni) return Eltwise(AsEltwise(op), a, b, out, level);
  AddRef(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
