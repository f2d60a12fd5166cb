/*!
 * \file npu_module.cc
 * \brief The tvm-ffi runtime module of kind "npu", and the global functions Python uses.
 *
 * A module holds one compiled region: its symbol and its command stream blob, validated when the
 * module is created (or loaded), so a damaged artifact fails at load, never mid-run. The weights
 * are baked into the blob, hence get_const_vars is empty and __init_<symbol> has nothing to bind.
 */
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/fp16.h"
#include "runtime/cycle_model.h"
#include "runtime/executor.h"
#include "runtime/npu_error.h"
#include "runtime/stream_parser.h"

namespace tvm_npu {
namespace {

namespace ffi = tvm::ffi;

// Appends the call-level counters of `st` as JSON members (no braces).
void StatsJson(std::ostringstream& os, const Stats& st) {
  os << "\"total_cycles\": " << st.total_cycles << ", \"mac_cycles\": " << st.mac_cycles
     << ", \"dma_cycles\": [";
  for (size_t i = 0; i < st.dma_cycles.size(); ++i) os << (i ? ", " : "") << st.dma_cycles[i];
  os << "], \"ddr_read_bytes\": " << st.ddr_read_bytes
     << ", \"ddr_write_bytes\": " << st.ddr_write_bytes << ", \"macs\": " << st.macs
     << ", \"commands\": " << st.commands;
}

void RecordsJson(std::ostringstream& os, const std::vector<CommandRecord>& records) {
  static const char* const kOpNames[] = {"END", "DMA_LOAD", "DMA_STORE"};
  os << "[";
  for (size_t i = 0; i < records.size(); ++i) {
    const CommandRecord& r = records[i];
    os << (i ? ", " : "") << "{\"index\": " << r.index << ", \"opcode\": \""
       << (r.opcode == stream::kConv2D ? "CONV2D" : kOpNames[r.opcode]) << "\", \"engine\": ";
    if (r.engine == kEngineNone) {
      os << "null";
    } else {
      os << "\"" << EngineName(r.engine) << "\"";
    }
    os << ", \"issue\": " << r.issue << ", \"start\": " << r.start
       << ", \"end\": " << r.end << ", \"bus_bytes\": " << r.bus_bytes
       << ", \"macs\": " << r.macs << "}";
  }
  os << "]";
}

void Accumulate(Stats* total, const Stats& st) {
  total->total_cycles += st.total_cycles;
  total->mac_cycles += st.mac_cycles;
  total->dma_cycles.resize(st.dma_cycles.size(), 0);
  for (size_t i = 0; i < st.dma_cycles.size(); ++i) total->dma_cycles[i] += st.dma_cycles[i];
  total->ddr_read_bytes += st.ddr_read_bytes;
  total->ddr_write_bytes += st.ddr_write_bytes;
  total->macs += st.macs;
  total->commands += st.commands;
}

std::string ConfigJson(const NPUConfig& c) {
  std::ostringstream os;
  os << "{\"clock_mhz\": " << c.clock_mhz << ", \"mac_rows\": " << c.mac_rows
     << ", \"mac_cols\": " << c.mac_cols << ", \"fp16_rate_div\": " << c.fp16_rate_div
     << ", \"sram_bytes\": " << c.sram_bytes << ", \"sram_banks\": " << c.sram_banks
     << ", \"ddr_bytes_per_cycle\": " << c.ddr_bytes_per_cycle
     << ", \"burst_bytes\": " << c.burst_bytes << ", \"dma_latency\": " << c.dma_latency
     << ", \"dma_channels\": " << c.dma_channels << ", \"vector_lanes\": " << c.vector_lanes
     << ", \"alignment\": " << c.alignment << ", \"op_overhead\": " << c.op_overhead
     << ", \"max_rank\": " << c.max_rank << ", \"max_width\": " << c.max_width
     << ", \"max_tensors\": " << c.max_tensors << "}";
  return os.str();
}

std::string SummaryJson(const ParsedStream& ps) {
  const stream::Header& h = ps.header;
  std::ostringstream os;
  os << "{\"version\": \"" << h.version_major << "." << h.version_minor
     << "\", \"num_tensors\": " << h.num_tensors << ", \"num_commands\": " << h.num_commands
     << ", \"num_inputs\": " << h.num_inputs << ", \"num_outputs\": " << h.num_outputs
     << ", \"weights_bytes\": " << h.weights_bytes << ", \"ddr_bytes\": " << h.ddr_bytes
     << ", \"sram_bytes_used\": " << h.sram_bytes_used << ", \"config\": " << ConfigJson(ps.config)
     << "}";
  return os.str();
}

class NPUModuleObj : public ffi::ModuleObj {
 public:
  NPUModuleObj(std::string symbol, const char* data, size_t size)
      : symbol_(std::move(symbol)), blob_(data, data + size) {
    // Parsed from the member copy: ps_.weights points into blob_, which lives as long as this.
    ps_ = ParseStream(blob_.data(), blob_.size());
  }

  const char* kind() const final { return "npu"; }

  int GetPropertyMask() const final {
    return ffi::Module::kBinarySerializable | ffi::Module::kRunnable;
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    ffi::ObjectPtr<NPUModuleObj> self = ffi::GetObjectPtr<NPUModuleObj>(this);
    if (name == symbol_) {
      return ffi::Function::FromPacked([self](ffi::PackedArgs args, ffi::Any*) {
        self->Run(args);
      });
    }
    if (name == "get_symbol") {
      return ffi::Function::FromTyped([self]() { return ffi::String(self->symbol_); });
    }
    if (name == "get_const_vars") {
      return ffi::Function::FromTyped([]() { return ffi::Array<ffi::String>(); });
    }
    if (name == "__init_" + symbol_) {
      return ffi::Function::FromTyped([](ffi::Array<ffi::Tensor>) { return 0; });
    }
    if (name == "get_profile") {
      return ffi::Function::FromTyped([self]() { return ffi::String(self->ProfileJson()); });
    }
    if (name == "reset_profile") {
      return ffi::Function::FromTyped([self]() { self->ResetProfile(); });
    }
    if (name == "get_stream") {
      return ffi::Function::FromTyped([self]() {
        return ffi::Bytes(reinterpret_cast<const char*>(self->blob_.data()), self->blob_.size());
      });
    }
    return std::nullopt;
  }

  // Layout: u64 symbol size, symbol, u64 blob size, blob (host byte order, little-endian).
  ffi::Bytes SaveToBytes() const final {
    std::string out;
    const uint64_t sym_size = symbol_.size(), blob_size = blob_.size();
    out.append(reinterpret_cast<const char*>(&sym_size), sizeof(sym_size));
    out.append(symbol_);
    out.append(reinterpret_cast<const char*>(&blob_size), sizeof(blob_size));
    out.append(reinterpret_cast<const char*>(blob_.data()), blob_.size());
    return ffi::Bytes(out);
  }

  static ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
    const char* p = bytes.data();
    size_t left = bytes.size();
    auto take_sized = [&](const char* what) {
      uint64_t n;
      if (left < sizeof(n)) NPU_THROW(kBadStream) << "npu module: truncated " << what << " size";
      std::memcpy(&n, p, sizeof(n));
      p += sizeof(n);
      left -= sizeof(n);
      if (n > left) NPU_THROW(kBadStream) << "npu module: truncated " << what;
      const char* start = p;
      p += n;
      left -= n;
      return std::pair<const char*, size_t>(start, n);
    };
    auto [sym, sym_size] = take_sized("symbol");
    auto [blob, blob_size] = take_sized("stream");
    if (left != 0) NPU_THROW(kBadStream) << "npu module: " << left << " trailing bytes";
    return ffi::Module(
        ffi::make_object<NPUModuleObj>(std::string(sym, sym_size), blob, blob_size));
  }

 private:
  void Run(ffi::PackedArgs args) {
    const size_t ni = ps_.inputs.size(), no = ps_.outputs.size();
    if (static_cast<size_t>(args.size()) != ni + no) {
      NPU_THROW(kShapeMismatch) << symbol_ << " takes " << ni << " inputs then " << no
                                << " outputs, got " << args.size() << " arguments";
    }
    std::vector<const DLTensor*> inputs;
    std::vector<DLTensor*> outputs;
    for (size_t i = 0; i < ni; ++i) inputs.push_back(args[i].cast<DLTensor*>());
    for (size_t i = 0; i < no; ++i) outputs.push_back(args[ni + i].cast<DLTensor*>());
    Stats st = Execute(ps_, inputs, outputs);
    std::lock_guard<std::mutex> lock(mutex_);
    Accumulate(&total_, st);
    last_ = std::move(st);
    ++calls_;
  }

  std::string ProfileJson() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::ostringstream os;
    os << "{\"symbol\": \"" << symbol_ << "\", \"calls\": " << calls_ << ", \"last\": {";
    StatsJson(os, last_);
    os << ", \"records\": ";
    RecordsJson(os, last_.records);
    os << "}, \"total\": {";
    StatsJson(os, total_);
    os << "}}";
    return os.str();
  }

  void ResetProfile() {
    std::lock_guard<std::mutex> lock(mutex_);
    last_ = Stats();
    total_ = Stats();
    calls_ = 0;
  }

  std::string symbol_;
  std::vector<uint8_t> blob_;
  ParsedStream ps_;
  std::mutex mutex_;  // guards the profile below; execution itself shares nothing mutable
  Stats last_;
  Stats total_;
  uint64_t calls_ = 0;
};

// ---- Direct access to the reference kernels, so tests can check them without a stream. ----

const uint8_t* DataPtr(const DLTensor* t) {
  return static_cast<const uint8_t*>(t->data) + t->byte_offset;
}

void CheckArg(const DLTensor* t, const char* name, uint8_t bits, int ndim) {
  if (t->device.device_type != kDLCPU || t->dtype.code != kDLFloat || t->dtype.bits != bits ||
      t->dtype.lanes != 1 || t->ndim != ndim || !ffi::IsContiguous(*t)) {
    NPU_THROW(kShapeMismatch) << name << " must be a contiguous CPU float" << int(bits)
                              << " tensor of rank " << ndim;
  }
}

uint32_t U32Param(int64_t v, const char* name) {
  if (v < 0 || v > 0xFFFFFFFFll) NPU_THROW(kOpNotSupported) << name << " = " << v;
  return static_cast<uint32_t>(v);
}

void RefConv2DFp16(DLTensor* x, DLTensor* w, ffi::AnyView bias_any, DLTensor* out,
                   int64_t stride_h, int64_t stride_w, int64_t dil_h, int64_t dil_w,
                   int64_t pad_top, int64_t pad_left, int64_t act, double clip_lo,
                   double clip_hi) {
  const DLTensor* bias = bias_any == nullptr ? nullptr : bias_any.cast<DLTensor*>();
  CheckArg(x, "x [N, H, W, C]", 16, 4);
  CheckArg(w, "w [OC, KH, KW, IC]", 16, 4);
  CheckArg(out, "out [N, OH, OW, OC]", 16, 4);
  if (bias != nullptr) CheckArg(bias, "bias [OC]", 32, 1);
  const int64_t* xs = x->shape;
  const int64_t* ws = w->shape;
  const int64_t* os = out->shape;
  if (ws[3] != xs[3] || os[0] != xs[0] || os[3] != ws[0] ||
      (bias != nullptr && bias->shape[0] != ws[0])) {
    NPU_THROW(kShapeMismatch) << "ref_conv2d_fp16: x, w, bias and out shapes disagree";
  }
  stream::Conv2DOperands op{};
  op.dtype = stream::kFP16;
  op.in_h = U32Param(xs[1], "H");
  op.in_w = U32Param(xs[2], "W");
  op.in_c = U32Param(xs[3], "C");
  op.oc = U32Param(ws[0], "OC");
  op.kh = U32Param(ws[1], "KH");
  op.kw = U32Param(ws[2], "KW");
  op.out_h = U32Param(os[1], "OH");
  op.out_w = U32Param(os[2], "OW");
  op.in_stride = U32Param(xs[2] * xs[3] * 2, "W*C*2");
  op.w_stride = U32Param(ws[1] * ws[2] * ws[3] * 2, "KH*KW*IC*2");
  op.out_stride = U32Param(os[2] * os[3] * 2, "OW*OC*2");
  op.stride_h = U32Param(stride_h, "stride_h");
  op.stride_w = U32Param(stride_w, "stride_w");
  op.dil_h = U32Param(dil_h, "dil_h");
  op.dil_w = U32Param(dil_w, "dil_w");
  op.pad_top = U32Param(pad_top, "pad_top");
  op.pad_left = U32Param(pad_left, "pad_left");
  op.act = U32Param(act, "act");
  const float lo = static_cast<float>(clip_lo), hi = static_cast<float>(clip_hi);
  std::memcpy(&op.clip_lo, &lo, 4);
  std::memcpy(&op.clip_hi, &hi, 4);
  op.groups = 1;
  if (op.stride_h < 1 || op.stride_h > 2 || op.stride_w < 1 || op.stride_w > 2 ||
      op.dil_h < 1 || op.dil_w < 1 || op.act > stream::kActClip) {
    NPU_THROW(kOpNotSupported) << "ref_conv2d_fp16: strides must be 1 or 2, dilations >= 1, "
                               << "act 0..2";
  }
  const uint64_t in_image = uint64_t{op.in_h} * op.in_stride;
  const uint64_t out_image = uint64_t{op.out_h} * op.out_stride;
  uint8_t* out_base = const_cast<uint8_t*>(DataPtr(out));
  for (int64_t n = 0; n < xs[0]; ++n) {
    Conv2DRef(op, DataPtr(x) + n * in_image, DataPtr(w), bias ? DataPtr(bias) : nullptr,
              out_base + n * out_image);
  }
}

void Fp16Round(DLTensor* in, DLTensor* out) {
  CheckArg(in, "in", 32, in->ndim);
  CheckArg(out, "out", 16, in->ndim);
  const int64_t n = ffi::GetDataSize(*in) / 4;
  if (ffi::GetDataSize(*out) / 2 != static_cast<size_t>(n)) {
    NPU_THROW(kShapeMismatch) << "fp16_round: in and out sizes differ";
  }
  const float* src = reinterpret_cast<const float*>(DataPtr(in));
  uint16_t* dst = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(DataPtr(out)));
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("runtime.NPUModuleCreate",
           [](ffi::String symbol, ffi::Bytes blob) {
             return ffi::Module(
                 ffi::make_object<NPUModuleObj>(std::string(symbol), blob.data(), blob.size()));
           })
      .def("ffi.Module.load_from_bytes.npu", NPUModuleObj::LoadFromBytes)
      .def("tvm_npu.runtime.validate_stream",
           [](ffi::Bytes blob) {
             return ffi::String(SummaryJson(
                 ParseStream(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())));
           })
      .def("tvm_npu.runtime.ref_conv2d_fp16", RefConv2DFp16)
      .def("tvm_npu.runtime.fp16_round", Fp16Round);
}

}  // namespace tvm_npu
