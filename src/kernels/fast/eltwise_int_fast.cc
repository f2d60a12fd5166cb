/*!
 * \file eltwise_int_fast.cc
 * \brief The integer ELTWISE of eltwise_fast.h.
 *
 * EltwiseRef decides per element which dtype each operand has, where b is and which kind to
 * compute. Here each row is cut into chunks of kChunk elements and every chunk runs three loops,
 * each specialized once per command: the differences x - z of a and of b (per operand dtype and
 * b mode), t of the kind (ref::EltwiseInt with a constant kind), and rshift_rne, clamp and store
 * (per result dtype). The arithmetic is the reference's own functions, in int64.
 */
#include "kernels/fast/eltwise_fast.h"

#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/ref_common.h"

namespace tvm_npu {
namespace fast {
namespace {

constexpr uint64_t kChunk = 64;  // 3 x 512 bytes of int64 on the stack, within L1

struct IntParams {
  int64_t ma, mb;
  int32_t zy, lo, hi;
  uint32_t shift;
};

// d[i] = x - zp for n elements of an int8 or int16 row, from element e.
template <bool kWide>
void Differences(const uint8_t* row, uint64_t e, uint64_t n, int64_t zp, int64_t* d) {
  for (uint64_t i = 0; i < n; ++i) d[i] = ref::LoadInt(row, e + i, kWide) - zp;
}

template <uint32_t kKind>
void Combine(const int64_t* da, const int64_t* db, uint64_t n, const IntParams& p, int64_t* t) {
  for (uint64_t i = 0; i < n; ++i) t[i] = ref::EltwiseInt(kKind, da[i], db[i], p.ma, p.mb);
}

template <bool kWide>
void Requantize(const int64_t* t, uint64_t n, const IntParams& p, uint8_t* row, uint64_t e) {
  for (uint64_t i = 0; i < n; ++i) {
    ref::StoreInt(row, e + i, kWide, ref::ClampInt(ref::RoundShift(t[i], p.shift), p.zy, p.lo, p.hi));
  }
}

using DifferencesFn = void (*)(const uint8_t*, uint64_t, uint64_t, int64_t, int64_t*);
using CombineFn = void (*)(const int64_t*, const int64_t*, uint64_t, const IntParams&, int64_t*);
using RequantizeFn = void (*)(const int64_t*, uint64_t, const IntParams&, uint8_t*, uint64_t);

CombineFn CombineFor(uint32_t kind) {
  switch (kind) {
    case stream::kEltAdd: return Combine<stream::kEltAdd>;
    case stream::kEltSub: return Combine<stream::kEltSub>;
    case stream::kEltMul: return Combine<stream::kEltMul>;
    case stream::kEltMax: return Combine<stream::kEltMax>;
    default: return Combine<stream::kEltMin>;
  }
}

bool Wide(uint32_t own, const stream::EltwiseOperands& op) {
  return stream::OperandDType(own, op.dtype) == stream::kInt16;
}

void EltwiseIntPortable(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b,
                        uint8_t* out) {
  const bool b16 = Wide(op.b_dtype, op);
  const DifferencesFn diff_a = Wide(op.a_dtype, op) ? Differences<true> : Differences<false>;
  const DifferencesFn diff_b = b16 ? Differences<true> : Differences<false>;
  const CombineFn combine = CombineFor(op.kind);
  const RequantizeFn requantize = Wide(op.out_dtype, op) ? Requantize<true> : Requantize<false>;
  const IntParams p{op.a_mult, op.b_mult, ref::WrapI32(op.out_zp), ref::WrapI32(op.clip_lo),
                    ref::WrapI32(op.clip_hi), op.shift};
  const int64_t za = ref::WrapI32(op.a_zp), zb = ref::WrapI32(op.b_zp);
  int64_t da[kChunk], db[kChunk], t[kChunk];
  if (op.b_mode == stream::kBScalar) {
    const int64_t v = ref::LoadInt(b, 0, b16) - zb;
    for (uint64_t i = 0; i < kChunk; ++i) db[i] = v;
  }
  for (uint64_t r = 0; r < op.rows; ++r) {
    const uint8_t* ar = a + r * op.a_stride;
    uint8_t* outr = out + r * op.out_stride;
    uint64_t c = 0;  // b's channel for element e (mode kBChannel); rows start at channel 0
    for (uint64_t e = 0; e < op.row_elems; e += kChunk) {
      const uint64_t n = op.row_elems - e < kChunk ? op.row_elems - e : kChunk;
      diff_a(ar, e, n, za, da);
      if (op.b_mode == stream::kBSame) {
        diff_b(b + r * op.b_stride, e, n, zb, db);
      } else if (op.b_mode == stream::kBChannel) {
        for (uint64_t i = 0; i < n; ++i) {
          db[i] = ref::LoadInt(b, c, b16) - zb;
          c = c + 1 == op.channels ? 0 : c + 1;
        }
      }
      combine(da, db, n, p, t);
      requantize(t, n, p, outr, e);
    }
  }
}

}  // namespace

void EltwiseInt(const stream::EltwiseOperands& op, const uint8_t* a, const uint8_t* b, uint8_t* out,
                Level level) {
  (void)level;
  EltwiseIntPortable(op, a, b, out);
}

}  // namespace fast
}  // namespace tvm_npu
