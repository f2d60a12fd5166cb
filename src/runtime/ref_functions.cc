/*!
 * \file ref_functions.cc
 * \brief Global functions that run one reference kernel on host tensors, without a stream, so
 *        tests can check each kernel's arithmetic against an independent model.
 *
 * Each builds the command's operands from the tensors' shapes, applies the same operand checks
 * as the stream parser (Check*Params), then calls the kernel once per image. Tensors are compact
 * NHWC (or [rows, elems] for ADD), so the row strides here are the unpadded row sizes: the
 * kernels take any stride, only streams need 128-byte multiples.
 */
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm_npu/operand_rules.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ref/add_ref.h"
#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/pool_ref.h"
#include "runtime/command_checks.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

namespace ffi = tvm::ffi;

uint8_t* DataPtr(const DLTensor* t) { return static_cast<uint8_t*>(t->data) + t->byte_offset; }

bool IsType(const DLTensor* t, uint8_t code, uint8_t bits) {
  return t->dtype.code == code && t->dtype.bits == bits && t->dtype.lanes == 1;
}

void CheckArg(const DLTensor* t, const char* name, uint8_t code, uint8_t bits, int ndim) {
  if (t->device.device_type != kDLCPU || !IsType(t, code, bits) || t->ndim != ndim ||
      !ffi::IsContiguous(*t)) {
    NPU_THROW(kShapeMismatch) << name << " must be a contiguous CPU "
                              << (code == kDLInt ? "int" : "float") << int(bits)
                              << " tensor of rank " << ndim;
  }
}

uint32_t U32Param(int64_t v, const char* name) {
  if (v < 0 || v > 0xFFFFFFFFll) NPU_THROW(kOpNotSupported) << name << " = " << v;
  return static_cast<uint32_t>(v);
}

// A 32-bit operand word given as a signed or unsigned integer: its two's-complement bits.
uint32_t Bits32(int64_t v, const char* name) {
  if (v < std::numeric_limits<int32_t>::min() || v > 0xFFFFFFFFll) {
    NPU_THROW(kOpNotSupported) << name << " = " << v << " does not fit an operand word";
  }
  return static_cast<uint32_t>(v);
}

// clip_lo / clip_hi: fp32 bits on the fp16 datapath, int32 bounds on the int8 one.
uint32_t ClipWord(double v, bool int8, const char* name) {
  if (!int8) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    return bits;
  }
  if (!(v == std::floor(v)) || v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max()) {
    NPU_THROW(kOpNotSupported) << name << " = " << v << " is not an int32 clamp bound";
  }
  return static_cast<uint32_t>(static_cast<int32_t>(v));
}

// The shape fields of a CONV2D over x [N, H, W, C], w [OC, KH, KW, C / groups],
// out [N, OH, OW, OC], compact rows of `elem`-byte elements.
stream::Conv2DOperands ConvOperands(const DLTensor* x, const DLTensor* w, const DLTensor* out,
                                    uint32_t dtype, int64_t groups) {
  const int64_t* xs = x->shape;
  const int64_t* ws = w->shape;
  const int64_t* os = out->shape;
  if (groups < 1 || xs[3] % groups != 0 || ws[3] != xs[3] / groups || os[0] != xs[0] ||
      os[3] != ws[0]) {
    NPU_THROW(kShapeMismatch) << "x, w and out shapes disagree (w is [OC, KH, KW, C / groups])";
  }
  const int64_t elem = stream::DTypeBytes(dtype);
  stream::Conv2DOperands op{};
  op.dtype = dtype;
  op.in_h = U32Param(xs[1], "H");
  op.in_w = U32Param(xs[2], "W");
  op.in_c = U32Param(xs[3], "C");
  op.oc = U32Param(ws[0], "OC");
  op.kh = U32Param(ws[1], "KH");
  op.kw = U32Param(ws[2], "KW");
  op.out_h = U32Param(os[1], "OH");
  op.out_w = U32Param(os[2], "OW");
  op.in_stride = U32Param(xs[2] * xs[3] * elem, "W*C*elem");
  op.w_stride = U32Param(ws[1] * ws[2] * ws[3] * elem, "KH*KW*IC*elem");
  op.out_stride = U32Param(os[2] * os[3] * elem, "OW*OC*elem");
  op.groups = U32Param(groups, "groups");
  return op;
}

// The window fields CONV2D and POOL share.
template <typename Op>
void SetWindow(Op* op, int64_t stride_h, int64_t stride_w, int64_t pad_top, int64_t pad_left) {
  op->stride_h = U32Param(stride_h, "stride_h");
  op->stride_w = U32Param(stride_w, "stride_w");
  op->pad_top = U32Param(pad_top, "pad_top");
  op->pad_left = U32Param(pad_left, "pad_left");
}

void SetConvWindow(stream::Conv2DOperands* op, int64_t stride_h, int64_t stride_w, int64_t dil_h,
                   int64_t dil_w, int64_t pad_top, int64_t pad_left) {
  SetWindow(op, stride_h, stride_w, pad_top, pad_left);
  op->dil_h = U32Param(dil_h, "dil_h");
  op->dil_w = U32Param(dil_w, "dil_w");
}

// The activation fields CONV2D, ADD and POOL share.
template <typename Op>
void SetActivation(Op* op, int64_t act, double clip_lo, double clip_hi, bool int8) {
  op->act = U32Param(act, "act");
  op->clip_lo = ClipWord(clip_lo, int8, "clip_lo");
  op->clip_hi = ClipWord(clip_hi, int8, "clip_hi");
}

// The requantization rows of the direct entry point follow npu-ref's 128-byte alignment.
constexpr uint32_t kRefAlignment = 128;

void RunConv(const stream::Conv2DOperands& op, const DLTensor* x, const DLTensor* w,
             const uint8_t* bias, DLTensor* out) {
  const uint64_t in_image = uint64_t{op.in_h} * op.in_stride;
  const uint64_t out_image = uint64_t{op.out_h} * op.out_stride;
  for (int64_t n = 0; n < x->shape[0]; ++n) {
    Conv2DRef(op, DataPtr(x) + n * in_image, DataPtr(w), bias, DataPtr(out) + n * out_image,
              kRefAlignment);
  }
}

// ref_conv2d_fp16(x, w, bias or None, out, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left,
//                 act, clip_lo, clip_hi[, groups = 1]). Packed so the trailing groups is optional.
void RefConv2DFp16(ffi::PackedArgs args, ffi::Any*) {
  if (args.size() != 13 && args.size() != 14) {
    NPU_THROW(kShapeMismatch) << "ref_conv2d_fp16 takes 13 or 14 arguments, got " << args.size();
  }
  DLTensor* x = args[0].cast<DLTensor*>();
  DLTensor* w = args[1].cast<DLTensor*>();
  const DLTensor* bias = args[2] == nullptr ? nullptr : args[2].cast<DLTensor*>();
  DLTensor* out = args[3].cast<DLTensor*>();
  const int64_t groups = args.size() == 14 ? args[13].cast<int64_t>() : 1;
  CheckArg(x, "x [N, H, W, C]", kDLFloat, 16, 4);
  CheckArg(w, "w [OC, KH, KW, C / groups]", kDLFloat, 16, 4);
  CheckArg(out, "out [N, OH, OW, OC]", kDLFloat, 16, 4);
  if (bias != nullptr) CheckArg(bias, "bias [OC]", kDLFloat, 32, 1);
  stream::Conv2DOperands op = ConvOperands(x, w, out, stream::kFP16, groups);
  if (bias != nullptr && bias->shape[0] != w->shape[0]) {
    NPU_THROW(kShapeMismatch) << "ref_conv2d_fp16: bias has " << bias->shape[0] << " entries";
  }
  SetConvWindow(&op, args[4].cast<int64_t>(), args[5].cast<int64_t>(), args[6].cast<int64_t>(),
                args[7].cast<int64_t>(), args[8].cast<int64_t>(), args[9].cast<int64_t>());
  SetActivation(&op, args[10].cast<int64_t>(), args[11].cast<double>(), args[12].cast<double>(),
                false);
  op.bias_addr = bias == nullptr ? stream::kNoBias : 0;
  CheckConv2DParams("ref_conv2d_fp16", op);
  RunConv(op, x, w, bias == nullptr ? nullptr : DataPtr(bias), out);
}

// ref_conv2d_int8(x, w, bias int32 [OC], scale float32 [OC], out, ...): the scales go into the
// block unchecked, as a stream's would; the kernel refuses any that is not finite and > 0.
void RefConv2DInt8(DLTensor* x, DLTensor* w, DLTensor* bias, DLTensor* scale, DLTensor* out,
                   int64_t stride_h, int64_t stride_w, int64_t dil_h, int64_t dil_w,
                   int64_t pad_top, int64_t pad_left, int64_t groups, int64_t in_zp, int64_t out_zp,
                   int64_t lo, int64_t hi) {
  CheckArg(x, "x [N, H, W, C]", kDLInt, 8, 4);
  CheckArg(w, "w [OC, KH, KW, C / groups]", kDLInt, 8, 4);
  CheckArg(out, "out [N, OH, OW, OC]", kDLInt, 8, 4);
  CheckArg(bias, "bias [OC]", kDLInt, 32, 1);
  CheckArg(scale, "scale [OC]", kDLFloat, 32, 1);
  stream::Conv2DOperands op = ConvOperands(x, w, out, stream::kInt8, groups);
  const int64_t oc = w->shape[0];
  if (bias->shape[0] != oc || scale->shape[0] != oc) {
    NPU_THROW(kShapeMismatch) << "ref_conv2d_int8: bias and scale need " << oc << " entries";
  }
  SetConvWindow(&op, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left);
  op.in_zp = Bits32(in_zp, "in_zp");
  op.out_zp = Bits32(out_zp, "out_zp");
  op.clip_lo = Bits32(lo, "lo");
  op.clip_hi = Bits32(hi, "hi");
  op.bias_addr = 0;  // the block below
  CheckConv2DParams("ref_conv2d_int8", op);
  // The requantization block as a stream lays it out in SRAM: rows bias, S.
  const uint64_t row = stream::RequantRowStride(op.oc, kRefAlignment);
  std::vector<uint8_t> block(stream::kRequantRows * row, 0);
  std::memcpy(block.data(), DataPtr(bias), oc * 4);
  std::memcpy(block.data() + row, DataPtr(scale), oc * 4);
  RunConv(op, x, w, block.data(), out);
}

// The datapath of a vector-op tensor: int8 or fp16, else ERR_SHAPE_MISMATCH.
uint32_t VectorDType(const DLTensor* t) {
  if (IsType(t, kDLInt, 8)) return stream::kInt8;
  if (IsType(t, kDLFloat, 16)) return stream::kFP16;
  NPU_THROW(kShapeMismatch) << "vector-op tensors are int8 or float16";
}

void RefAdd(DLTensor* a, DLTensor* b, DLTensor* out, int64_t act, double clip_lo, double clip_hi,
            int64_t a_zp, int64_t b_zp, int64_t out_zp, int64_t a_mult, int64_t b_mult,
            int64_t shift) {
  const uint32_t dtype = VectorDType(a);
  const uint8_t code = dtype == stream::kInt8 ? kDLInt : kDLFloat;
  const uint8_t bits = dtype == stream::kInt8 ? 8 : 16;
  CheckArg(a, "a [rows, elems]", code, bits, 2);
  CheckArg(b, "b [rows, elems]", code, bits, 2);
  CheckArg(out, "out [rows, elems]", code, bits, 2);
  for (const DLTensor* t : {b, out}) {
    if (t->shape[0] != a->shape[0] || t->shape[1] != a->shape[1]) {
      NPU_THROW(kShapeMismatch) << "ref_add: a, b and out shapes differ";
    }
  }
  const bool int8 = dtype == stream::kInt8;
  stream::AddOperands op{};
  op.dtype = dtype;
  op.rows = U32Param(a->shape[0], "rows");
  op.row_elems = U32Param(a->shape[1], "elems");
  op.a_stride = op.b_stride = op.out_stride =
      U32Param(a->shape[1] * stream::DTypeBytes(dtype), "row bytes");
  SetActivation(&op, act, clip_lo, clip_hi, int8);
  op.a_zp = Bits32(a_zp, "a_zp");
  op.b_zp = Bits32(b_zp, "b_zp");
  op.out_zp = Bits32(out_zp, "out_zp");
  op.a_mult = Bits32(a_mult, "a_mult");
  op.b_mult = Bits32(b_mult, "b_mult");
  op.shift = Bits32(shift, "shift");
  CheckAddParams("ref_add", op);
  AddRef(op, DataPtr(a), DataPtr(b), DataPtr(out));
}

// ref_pool(x, out, kind, kh, kw, stride_h, stride_w, pad_top, pad_left, act, clip_lo, clip_hi,
//          in_zp, out_zp, scale): scale is S for int8, 0.0 for fp16.
void RefPool(DLTensor* x, DLTensor* out, int64_t kind, int64_t kh, int64_t kw, int64_t stride_h,
             int64_t stride_w, int64_t pad_top, int64_t pad_left, int64_t act, double clip_lo,
             double clip_hi, int64_t in_zp, int64_t out_zp, double scale) {
  const uint32_t dtype = VectorDType(x);
  const bool int8 = dtype == stream::kInt8;
  CheckArg(x, "x [N, H, W, C]", int8 ? kDLInt : kDLFloat, int8 ? 8 : 16, 4);
  CheckArg(out, "out [N, OH, OW, C]", int8 ? kDLInt : kDLFloat, int8 ? 8 : 16, 4);
  const int64_t* xs = x->shape;
  const int64_t* os = out->shape;
  if (os[0] != xs[0] || os[3] != xs[3]) {
    NPU_THROW(kShapeMismatch) << "ref_pool: x and out differ in batch or channels";
  }
  const int64_t elem = stream::DTypeBytes(dtype);
  stream::PoolOperands op{};
  op.dtype = dtype;
  op.kind = U32Param(kind, "kind");
  op.in_h = U32Param(xs[1], "H");
  op.in_w = U32Param(xs[2], "W");
  op.c = U32Param(xs[3], "C");
  op.in_stride = U32Param(xs[2] * xs[3] * elem, "W*C*elem");
  op.out_h = U32Param(os[1], "OH");
  op.out_w = U32Param(os[2], "OW");
  op.out_stride = U32Param(os[2] * os[3] * elem, "OW*C*elem");
  op.kh = U32Param(kh, "kh");
  op.kw = U32Param(kw, "kw");
  SetWindow(&op, stride_h, stride_w, pad_top, pad_left);
  SetActivation(&op, act, clip_lo, clip_hi, int8);
  op.in_zp = Bits32(in_zp, "in_zp");
  op.out_zp = Bits32(out_zp, "out_zp");
  // S as its fp32 bits (the nearest fp32 of the argument; a float32 passed from Python is
  // exact). fp16 takes 0.0; CheckPoolParams refuses anything else, and a bad int8 S.
  // A double beyond the fp32 range would be undefined to convert: make it inf (refused).
  const float s32 = std::fabs(scale) > std::numeric_limits<float>::max()
                        ? std::numeric_limits<float>::infinity()
                        : static_cast<float>(scale);
  std::memcpy(&op.scale, &s32, sizeof(op.scale));
  CheckPoolParams("ref_pool", op);
  const uint64_t in_image = uint64_t{op.in_h} * op.in_stride;
  const uint64_t out_image = uint64_t{op.out_h} * op.out_stride;
  for (int64_t n = 0; n < xs[0]; ++n) {
    PoolRef(op, DataPtr(x) + n * in_image, DataPtr(out) + n * out_image);
  }
}

void Fp16Round(DLTensor* in, DLTensor* out) {
  CheckArg(in, "in", kDLFloat, 32, in->ndim);
  CheckArg(out, "out", kDLFloat, 16, in->ndim);
  const int64_t n = ffi::GetDataSize(*in) / 4;
  if (ffi::GetDataSize(*out) / 2 != static_cast<size_t>(n)) {
    NPU_THROW(kShapeMismatch) << "fp16_round: in and out sizes differ";
  }
  const float* src = reinterpret_cast<const float*>(DataPtr(in));
  uint16_t* dst = reinterpret_cast<uint16_t*>(DataPtr(out));
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def_packed("tvm_npu.runtime.ref_conv2d_fp16", RefConv2DFp16)
      .def("tvm_npu.runtime.ref_conv2d_int8", RefConv2DInt8)
      .def("tvm_npu.runtime.ref_add", RefAdd)
      .def("tvm_npu.runtime.ref_pool", RefPool)
      .def("tvm_npu.runtime.fp16_round", Fp16Round);
}

}  // namespace tvm_npu
