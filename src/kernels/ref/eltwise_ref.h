/*!
 * \file eltwise_ref.h
 * \brief Reference ELTWISE, UNARY and SOFTMAX on the vector unit (docs/npu.md sections 2 and 6).
 */
#ifndef TVM_NPU_KERNELS_REF_ELTWISE_REF_H_
#define TVM_NPU_KERNELS_REF_ELTWISE_REF_H_

#include <tvm_npu/stream_format.h>

#include <algorithm>
#include <cstdint>

namespace tvm_npu {
namespace ref {

/*!
 * \brief ELTWISE's fp16 op in fp32, before the activation. Comparisons as the contract writes them,
 *        so a NaN in b passes through and one in a does not. Inline, so the fast kernels
 *        (kernels/fast/eltwise_fast.h) instantiate it with a constant kind.
 */
inline float EltwiseFp32(uint32_t kind, float a, float b) {
  switch (kind) {
    case stream::kEltAdd: return a + b;
    case stream::kEltSub: return a - b;
    case stream::kEltMul: return a * b;
    case stream::kEltMax: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

/*!
 * \brief ELTWISE's integer t of section 2 from da = a - z_a, db = b - z_b and the multipliers,
 *        exact in int64 (the checks bound |t| < 2^62), before rshift_rne.
 */
inline int64_t EltwiseInt(uint32_t kind, int64_t da, int64_t db, int64_t ma, int64_t mb) {
  switch (kind) {
    case stream::kEltAdd: return da * ma + db * mb;
    case stream::kEltSub: return da * ma - db * mb;
    case stream::kEltMul: return da * db * ma;
    case stream::kEltMax: return std::max(da * ma, db * mb);
    default: return std::min(da * ma, db * mb);
  }
}

}  // namespace ref

/*!
 * \brief out = a (kind) b over op.rows rows of op.row_elems elements, b broadcast per op.b_mode.
 *
 * fp16: the op in fp32, activation in fp32, one rounding to fp16. int8: the integer rule of
 * section 2 (ta, tb scaled by the multipliers, one rshift_rne). The *_addr fields are ignored (the
 * caller resolves them); the operands passed CheckEltwiseParams.
 */
void EltwiseRef(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                uint8_t* out);

/*!
 * \brief out = f(in): fp16 evaluates f in fp32 as section 2's table orders it; int8 looks the
 *        code up in the 256-entry `table` (ignored for fp16). The operands passed
 *        CheckUnaryParams.
 */
void UnaryRef(const stream::UnaryOperands& op, const uint8_t* in, const uint8_t* table,
              uint8_t* out);

namespace ref {
/*!
 * \brief UNARY's fp16 function `func` of x, evaluated in fp32 as section 2's table orders it, before
 *        the rounding to fp16: UnaryRef's per-element step, also used by the fast kernels to build
 *        their tables (kernels/fast/unary_fast.h), so the function has one definition.
 */
float UnaryFp32(uint32_t func, float x, float alpha);
}  // namespace ref

/*!
 * \brief fp16 softmax of every row: z = x * scale + mask row (format 1.4; `mask` is null without
 *        one), max, exp(z - max) and their in-order sum in fp32, one division and one rounding per
 *        element (section 2). int8 (format 1.4): the codes dequantized to fp32 first, each fp32
 *        result quantized to the output's codes. The operands passed CheckSoftmaxParams.
 */
void SoftmaxRef(const stream::SoftmaxOperands& op, const uint8_t* in, const uint8_t* mask,
                uint8_t* out);

}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_REF_ELTWISE_REF_H_
