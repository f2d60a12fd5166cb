/*!
 * \file fast_functions.cc
 * \brief Global functions for the fast kernels: the run-time options (kernel level, threads) and
 *        single-command entry points that run one level on raw operand words and byte buffers,
 *        so tests can compare every level with the reference bit for bit
 *        (tests/test_fast_kernels.py).
 *
 *   tvm_npu.runtime.kernel_level() / set_kernel_level(name) / best_kernel_level()
 *   tvm_npu.runtime.threads() / set_threads(n)
 *   tvm_npu.kernels.run_conv2d(level, words, in, w, bias, out, alignment, cache_key)
 *   tvm_npu.kernels.run_add(level, words, a, b, out)
 *   tvm_npu.kernels.run_eltwise(level, words, a, b, out)
 *   tvm_npu.kernels.run_unary(level, words, in, table, out)   (table: 256 bytes for int8, else unused)
 *
 * The run_* functions take the command's operand words (words 1.. of the command), check them as
 * the stream parser would (Check*Params) and check every buffer covers the command's footprint;
 * `out` is the output buffer's initial contents, so a test also sees the bytes a kernel must
 * leave alone (channel slices, row padding). cache_key >= 0 packs int8 weights through a
 * WeightCache shared by all calls under that key, to test that changed weights are repacked.
 */
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>
#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/fast/add_fast.h"
#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/eltwise_fast.h"
#include "kernels/fast/thread_pool.h"
#include "kernels/fast/unary_fast.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

namespace ffi = tvm::ffi;

template <typename T>
T Operands(const ffi::Bytes& words) {
  if (words.size() != sizeof(T)) {
    NPU_THROW(kBadStream) << "expected " << sizeof(T) / 4 << " operand words, got "
                          << words.size() / 4.0;
  }
  T op;
  std::memcpy(&op, words.data(), sizeof(op));
  return op;
}

// The operand words, checked as the stream parser checks them (Check*Params).
template <typename T>
T CheckedOperands(const ffi::Bytes& words, const char* where,
                  void (*check)(const std::string&, const T&)) {
  const T op = Operands<T>(words);
  check(where, op);
  return op;
}

void NeedBytes(const ffi::Bytes& b, uint64_t n, const char* what) {
  if (b.size() < n) {
    NPU_THROW(kInvalidAddr) << what << " has " << b.size() << " bytes, the command reads " << n;
  }
}

const uint8_t* Data(const ffi::Bytes& b) { return reinterpret_cast<const uint8_t*>(b.data()); }

// The bytes `rows` rows `stride` apart, of `row` bytes each, span (u32 operands: no overflow).
uint64_t Rows(uint32_t rows, uint32_t stride, uint64_t row) {
  return (rows - 1) * uint64_t{stride} + row;
}

// `b` must hold the command's `rows` rows of row_elems elements, `stride` bytes apart.
template <typename T>
void NeedRows(const ffi::Bytes& b, const T& op, uint32_t stride, const char* what) {
  NeedBytes(b, Rows(op.rows, stride, uint64_t{op.row_elems} * stream::DTypeBytes(op.dtype)), what);
}

// A level no higher than the CPU's, so a test asking for more never runs an illegal instruction.
fast::Level LevelOf(const std::string& name) {
  return std::min(fast::ParseLevel(name), fast::BestLevel());
}

// `out` with the kernel's result written over it.
template <typename Kernel>
ffi::Bytes WithOutput(const ffi::Bytes& out, Kernel kernel) {
  std::vector<uint8_t> result(Data(out), Data(out) + out.size());
  kernel(result.data());
  return ffi::Bytes(reinterpret_cast<const char*>(result.data()), result.size());
}

ffi::Bytes RunConv2D(const std::string& level, const ffi::Bytes& words, const ffi::Bytes& in,
                     const ffi::Bytes& w, const ffi::Bytes& bias, const ffi::Bytes& out,
                     int64_t alignment, int64_t cache_key) {
  const fast::Level lv = LevelOf(level);
  const auto op = CheckedOperands(words, "run_conv2d", CheckConv2DParams);
  if (alignment <= 0 || alignment > (1 << 16)) NPU_THROW(kBadStream) << "alignment " << alignment;
  const uint64_t elem = stream::DTypeBytes(op.dtype);
  NeedBytes(in,
            (op.in_h - 1) * uint64_t{op.in_stride} + (op.in_w - 1) * stream::InPixelStride(op) +
                uint64_t{op.in_c} * elem,
            "in");
  NeedBytes(w, (op.oc - 1) * uint64_t{op.w_stride} + stream::WeightRowBytes(op), "w");
  NeedBytes(out,
            (op.out_h - 1) * uint64_t{op.out_stride} + (op.out_w - 1) * stream::OutPixelStride(op) +
                uint64_t{op.oc} * elem,
            "out");
  if (stream::HasScaleBlock(op) || stream::IsInt4Weights(op)) {  // a block, never absent
    NeedBytes(bias, stream::BiasBlockBytes(op, static_cast<uint64_t>(alignment)), "bias");
  } else if (bias.size() != 0) {
    NeedBytes(bias, uint64_t{op.oc} * 4, "bias");
  }
  static fast::WeightCache cache;
  return WithOutput(out, [&](uint8_t* o) {
    fast::Conv2D(op, Data(in), Data(w), bias.size() == 0 ? nullptr : Data(bias), o,
                 static_cast<uint32_t>(alignment), lv, cache_key >= 0 ? &cache : nullptr,
                 static_cast<size_t>(cache_key));
  });
}

ffi::Bytes RunAdd(const std::string& level, const ffi::Bytes& words, const ffi::Bytes& a,
                  const ffi::Bytes& b, const ffi::Bytes& out) {
  const auto op = CheckedOperands(words, "run_add", CheckAddParams);
  NeedRows(a, op, op.a_stride, "a");
  NeedRows(b, op, op.b_stride, "b");
  NeedRows(out, op, op.out_stride, "out");
  return WithOutput(out, [&](uint8_t* o) { fast::Add(op, Data(a), Data(b), o, LevelOf(level)); });
}

ffi::Bytes RunEltwise(const std::string& level, const ffi::Bytes& words, const ffi::Bytes& a,
                      const ffi::Bytes& b, const ffi::Bytes& out) {
  const auto op = CheckedOperands(words, "run_eltwise", CheckEltwiseParams);
  NeedBytes(a, Rows(op.rows, op.a_stride, op.row_elems * EltwiseElemBytes(op.a_dtype, op)), "a");
  // b: `rows` rows (same shape), else one row of channels or one element.
  NeedBytes(b,
            Rows(op.b_mode == stream::kBSame ? op.rows : 1, op.b_stride,
                 EltwiseBRowElems(op) * EltwiseElemBytes(op.b_dtype, op)),
            "b");
  NeedBytes(out, Rows(op.rows, op.out_stride, op.row_elems * EltwiseElemBytes(op.out_dtype, op)),
            "out");
  return WithOutput(out,
                    [&](uint8_t* o) { fast::Eltwise(op, Data(a), Data(b), o, LevelOf(level)); });
}

ffi::Bytes RunUnary(const std::string& level, const ffi::Bytes& words, const ffi::Bytes& in,
                    const ffi::Bytes& table, const ffi::Bytes& out) {
  const auto op = CheckedOperands(words, "run_unary", CheckUnaryParams);
  NeedRows(in, op, op.in_stride, "in");
  NeedRows(out, op, op.out_stride, "out");
  const bool int8 = op.dtype == stream::kInt8;
  if (int8) NeedBytes(table, stream::kUnaryTableBytes, "table");
  return WithOutput(out, [&](uint8_t* o) {
    fast::Unary(op, Data(in), int8 ? Data(table) : nullptr, o, LevelOf(level));
  });
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("tvm_npu.runtime.kernel_level",
           []() { return ffi::String(fast::LevelName(fast::ActiveLevel())); })
      .def("tvm_npu.runtime.best_kernel_level",
           []() { return ffi::String(fast::LevelName(fast::BestLevel())); })
      .def("tvm_npu.runtime.set_kernel_level",
           [](const std::string& name) {
             return ffi::String(fast::LevelName(fast::SetLevel(fast::ParseLevel(name))));
           })
      .def("tvm_npu.runtime.threads", []() { return static_cast<int64_t>(fast::NumThreads()); })
      .def("tvm_npu.runtime.set_threads",
           [](int64_t n) {
             if (n < 1 || n > 1024)
               NPU_THROW(kOpNotSupported) << "threads must be 1..1024, got " << n;
             return static_cast<int64_t>(fast::SetThreads(static_cast<int>(n)));
           })
      .def("tvm_npu.kernels.run_conv2d", RunConv2D)
      .def("tvm_npu.kernels.run_add", RunAdd)
      .def("tvm_npu.kernels.run_eltwise", RunEltwise)
      .def("tvm_npu.kernels.run_unary", RunUnary);
}

}  // namespace tvm_npu
