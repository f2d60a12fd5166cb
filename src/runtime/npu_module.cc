/*!
 * \file npu_module.cc
 * \brief The tvm-ffi runtime module of kind "npu", and the global functions Python uses (the
 *        direct kernel entry points for tests live in ref_functions.cc).
 *
 * A module holds one compiled region: its symbol and its command stream blob, validated when the
 * module is created (or loaded), so a damaged artifact fails at load, never mid-run. The weights
 * are baked into the blob, hence get_const_vars is empty and __init_<symbol> has nothing to bind.
 * The blob's weight region is kept in the weight pool (weight_pool.h): modules carrying the same
 * weights (an LLM's prefill and decode regions) hold one copy.
 */
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cycle_model.h"
#include "runtime/executor.h"
#include "runtime/npu_error.h"
#include "runtime/position.h"
#include "runtime/sram_provenance.h"
#include "runtime/state_store.h"
#include "runtime/stream_parser.h"
#include "runtime/weight_pool.h"

namespace tvm_npu {
namespace {

namespace ffi = tvm::ffi;

// Appends the call-level counters of `st` as JSON members (no braces).
void StatsJson(std::ostringstream& os, const Stats& st) {
  os << "\"total_cycles\": " << st.total_cycles << ", \"mac_cycles\": " << st.mac_cycles
     << ", \"vector_cycles\": " << st.vector_cycles << ", \"dma_cycles\": [";
  for (size_t i = 0; i < st.dma_cycles.size(); ++i) os << (i ? ", " : "") << st.dma_cycles[i];
  os << "], \"ddr_read_bytes\": " << st.ddr_read_bytes
     << ", \"ddr_write_bytes\": " << st.ddr_write_bytes << ", \"macs\": " << st.macs
     << ", \"commands\": " << st.commands;
}

void RecordsJson(std::ostringstream& os, const std::vector<CommandRecord>& records) {
  os << "[";
  for (size_t i = 0; i < records.size(); ++i) {
    const CommandRecord& r = records[i];
    os << (i ? ", " : "") << "{\"index\": " << r.index << ", \"opcode\": \""
       << stream::OpcodeName(r.opcode) << "\", \"engine\": ";
    if (r.engine == kEngineNone) {
      os << "null";
    } else {
      os << "\"" << EngineName(r.engine) << "\"";
    }
    os << ", \"issue\": " << r.issue << ", \"start\": " << r.start << ", \"end\": " << r.end
       << ", \"bus_bytes\": " << r.bus_bytes << ", \"macs\": " << r.macs << "}";
  }
  os << "]";
}

// Host wall-clock time (std::chrono::steady_clock, CLOCK_MONOTONIC on Linux) in nanoseconds.
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Accumulate(Stats* total, const Stats& st) {
  total->total_cycles += st.total_cycles;
  total->mac_cycles += st.mac_cycles;
  total->vector_cycles += st.vector_cycles;
  total->dma_cycles.resize(st.dma_cycles.size(), 0);
  for (size_t i = 0; i < st.dma_cycles.size(); ++i) total->dma_cycles[i] += st.dma_cycles[i];
  total->ddr_read_bytes += st.ddr_read_bytes;
  total->ddr_write_bytes += st.ddr_write_bytes;
  total->macs += st.macs;
  total->commands += st.commands;
  total->command_macs.resize(std::max(total->command_macs.size(), st.records.size()), 0);
  for (size_t i = 0; i < st.records.size(); ++i) total->command_macs[i] += st.records[i].macs;
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

ParsedStream Parse(const ffi::Bytes& blob) {
  return ParseStream(reinterpret_cast<const uint8_t*>(blob.data()), blob.size());
}

// The indices where `flags` is true.
ffi::Array<int64_t> Indices(const std::vector<bool>& flags) {
  ffi::Array<int64_t> out;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i]) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

class NPUModuleObj : public ffi::ModuleObj {
 public:
  // A module of the whole stream `data`: validated from the caller's bytes, then kept as the
  // tables (head_) and the pooled weight region (ps_.weights points into weights_).
  NPUModuleObj(std::string symbol, const char* data, size_t size) : symbol_(std::move(symbol)) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(data);
    ps_ = ParseStream(bytes, size);
    head_.assign(bytes, bytes + ps_.header.weights_offset);
    weights_ = ShareWeights(bytes + ps_.header.weights_offset, ps_.header.weights_bytes);
    Init();
  }

  // A module loaded with its weights by reference (SaveToBytes): the tables `head` and the key of
  // a weight region another module of the library holds. TVM loads a library's modules in an
  // order of its own, so the region is found (and the stream validated) at the first GetFunction,
  // when every module of the library is loaded and before anything runs.
  NPUModuleObj(std::string symbol, const char* head, size_t size, uint64_t weights_bytes,
               uint64_t hash)
      : symbol_(std::move(symbol)), head_(head, head + size), by_reference_(true) {
    key_[0] = weights_bytes;
    key_[1] = hash;
  }

  const char* kind() const final { return "npu"; }

  int GetPropertyMask() const final {
    return ffi::Module::kBinarySerializable | ffi::Module::kRunnable;
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    Resolve();
    ffi::ObjectPtr<NPUModuleObj> self = ffi::GetObjectPtr<NPUModuleObj>(this);
    if (name == symbol_) {
      return ffi::Function::FromPacked(
          [self](ffi::PackedArgs args, ffi::Any*) { self->Run(args); });
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
    // The profile's "total" "clamped_inputs" without the JSON: what a caller reads after every
    // call (an LLM's int8 KV cache, llm/kv_saturation.py) at the cost of one function call.
    if (name == "clamped_inputs") {
      return ffi::Function::FromTyped([self]() {
        std::lock_guard<std::mutex> lock(self->mutex_);
        return ffi::Shape(self->total_clamped_.begin(), self->total_clamped_.end());
      });
    }
    // Format 1.4 (docs/npu.md section 3): the state region and the position register.
    if (name == "reset_state") {
      return ffi::Function::FromTyped([self]() { self->state_->Reset(); });
    }
    if (name == "get_state") {
      return ffi::Function::FromTyped([self](int64_t slot) {
        const std::string bytes = self->state_->Read(static_cast<uint32_t>(slot));
        return ffi::Bytes(bytes.data(), bytes.size());
      });
    }
    if (name == "position_limit") {
      return ffi::Function::FromTyped([self]() {
        return self->ps_.position_input < 0 ? int64_t{-1} : int64_t{self->ps_.position_limit};
      });
    }
    if (name == "get_stream") {
      return ffi::Function::FromTyped([self]() { return ffi::Bytes(self->Blob()); });
    }
    // The weight region this module holds: its bytes and the pooled copy's identity (equal for the
    // modules sharing one copy), so a caller counts each copy once (docs/llm.md, "The artifact").
    // Serialize the weight region by reference (its size and hash) instead of its bytes: for a
    // module whose weights another module of the same library writes first (an LLM's decode
    // regions after prefill's: python/tvm_npu/llm/one_library.py). Loading it needs that module
    // loaded first, and fails with ERR_BAD_ARTIFACT otherwise.
    if (name == "set_weights_by_reference") {
      return ffi::Function::FromTyped([self](bool on) { self->by_reference_ = on; });
    }
    if (name == "weights_memory") {
      return ffi::Function::FromTyped([self]() {
        std::ostringstream os;
        os << "{\"bytes\": " << self->weights_->bytes.size() << ", \"id\": \""
           << static_cast<const void*>(self->weights_.get()) << "\"}";
        return ffi::String(os.str());
      });
    }
    return std::nullopt;
  }

  // Layout: u64 symbol size, symbol, u64 blob size, blob (host byte order, little-endian). With
  // the weights by reference, the symbol size has kByReference set and the blob stops at
  // weights_offset, followed by u64 weights_bytes and u64 the weights' hash (weight_pool.h).
  ffi::Bytes SaveToBytes() const final {
    std::string out;
    const bool ref = by_reference_ && (weights_ == nullptr || !weights_->bytes.empty());
    const std::string blob = ref ? std::string(head_.begin(), head_.end()) : Blob();
    const uint64_t sym_size = symbol_.size() | (ref ? kByReference : 0), blob_size = blob.size();
    out.append(reinterpret_cast<const char*>(&sym_size), sizeof(sym_size));
    out.append(symbol_);
    out.append(reinterpret_cast<const char*>(&blob_size), sizeof(blob_size));
    out.append(blob);
    if (ref) {
      const uint64_t key[2] = {weights_ ? weights_->bytes.size() : key_[0],
                               weights_ ? weights_->hash : key_[1]};
      out.append(reinterpret_cast<const char*>(key), sizeof(key));
    }
    return ffi::Bytes(out);
  }

  static ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
    const char* p = bytes.data();
    size_t left = bytes.size();
    auto take_u64 = [&](const char* what) {
      uint64_t n;
      if (left < sizeof(n)) NPU_THROW(kBadStream) << "npu module: truncated " << what;
      std::memcpy(&n, p, sizeof(n));
      p += sizeof(n);
      left -= sizeof(n);
      return n;
    };
    auto take_sized = [&](const char* what, uint64_t n) {
      if (n > left) NPU_THROW(kBadStream) << "npu module: truncated " << what;
      const char* start = p;
      p += n;
      left -= n;
      return std::pair<const char*, size_t>(start, n);
    };
    const uint64_t sym_word = take_u64("symbol size");
    const bool ref = (sym_word & kByReference) != 0;
    auto [sym, sym_size] = take_sized("symbol", sym_word & ~kByReference);
    auto [blob, blob_size] = take_sized("stream", take_u64("stream size"));
    if (ref) {
      const uint64_t weights_bytes = take_u64("weights size"), hash = take_u64("weights hash");
      if (left != 0) NPU_THROW(kBadStream) << "npu module: " << left << " trailing bytes";
      return ffi::Module(ffi::make_object<NPUModuleObj>(std::string(sym, sym_size), blob, blob_size,
                                                        weights_bytes, hash));
    }
    if (left != 0) NPU_THROW(kBadStream) << "npu module: " << left << " trailing bytes";
    return ffi::Module(ffi::make_object<NPUModuleObj>(std::string(sym, sym_size), blob, blob_size));
  }

 private:
  // The caches, state binding and timing of a parsed stream (ps_.weights set).
  void Init() {
    ps_.weights = weights_->bytes.data();
    cache_ = std::make_unique<ExecCache>(ps_);
    state_ = std::make_unique<StateBinding>(ps_);  // format 1.4: zero, or shared by state_space
    timing_ = TimeStream(ps_);
    total_saturated_.assign(ps_.inputs.size(), 0);
    total_clamped_.assign(ps_.inputs.size(), 0);
    total_counts_ = CommandCounts();
  }

  // A module loaded with its weights by reference: find them, validate the whole stream (its CRC
  // covers the weights, so a region found under a wrong key is refused), and initialise.
  void Resolve() {
    std::lock_guard<std::mutex> lock(resolve_mutex_);
    if (weights_ != nullptr) return;
    std::shared_ptr<const WeightRegion> found = FindWeights(key_[0], key_[1]);
    if (found == nullptr) {
      NPU_THROW(kBadArtifact) << "npu module " << symbol_ << " refers to a weight region of "
                              << key_[0] << " bytes that no other module of its library holds: "
                              << "the library is damaged or incomplete; export it again";
    }
    std::vector<uint8_t> whole(head_);
    whole.insert(whole.end(), found->bytes.begin(), found->bytes.end());
    ps_ = ParseStream(whole.data(), whole.size());
    if (ps_.header.weights_offset != head_.size()) {
      NPU_THROW(kBadArtifact) << symbol_ << ": the stream's weight region starts at "
                              << ps_.header.weights_offset << ", its tables end at "
                              << head_.size();
    }
    weights_ = WeightSharing() ? found : ShareWeights(found->bytes.data(), found->bytes.size());
    Init();
  }

  // The whole stream again: the tables, then the weight region.
  std::string Blob() const {
    std::string out(reinterpret_cast<const char*>(head_.data()), head_.size());
    out.append(reinterpret_cast<const char*>(weights_->bytes.data()), weights_->bytes.size());
    return out;
  }

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
    const int64_t host_start = SteadyNs();
    StagingCounts staged;
    CommandCounts counts;
    {
      const std::unique_lock<std::mutex> one_call = state_->CallLock();  // shared state: serial
      staged = Execute(ps_, inputs, outputs, cache_.get(), state_.get(), &counts);
    }
    const int64_t host_end = SteadyNs();
    const uint32_t position = CallPosition(ps_, inputs);  // in range: Execute ran
    std::lock_guard<std::mutex> lock(mutex_);
    if (position != timed_position_) {  // format 1.4: the timing depends on the position only
      timing_ = TimeStream(ps_, position);
      timed_position_ = position;
    }
    Accumulate(&total_, timing_);
    last_host_ns_[0] = host_start;
    last_host_ns_[1] = host_end;
    ++calls_;
    for (size_t k = 0; k < staged.saturated.size(); ++k) {
      total_saturated_[k] += staged.saturated[k];
      total_clamped_[k] += staged.clamped[k];
    }
    if (!warned_) WarnSaturated(staged.saturated);
    last_staged_ = std::move(staged);
    AddCounts(counts);
  }

  // The per-command saturation and overflow counters (docs/npu.md section 5): the last call's, and
  // summed over calls. Called under mutex_.
  void AddCounts(const CommandCounts& counts) {
    last_counts_ = counts;
    if (total_counts_.outputs.size() != counts.outputs.size()) {
      total_counts_.Resize(counts.outputs.size());
    }
    for (size_t i = 0; i < counts.outputs.size(); ++i) {
      total_counts_.outputs[i] += counts.outputs[i];
      total_counts_.saturated[i] += counts.saturated[i];
      total_counts_.fp16_overflow[i] += counts.fp16_overflow[i];
      total_counts_.nan[i] += counts.nan[i];
    }
  }

  static void CommandCountsJson(std::ostringstream& os, const CommandCounts& c) {
    const std::pair<const char*, const std::vector<uint64_t>*> lists[] = {
        {"command_outputs", &c.outputs},
        {"command_saturated", &c.saturated},
        {"command_fp16_overflow", &c.fp16_overflow},
        {"command_nan", &c.nan}};
    for (const auto& [key, values] : lists) {
      os << ", \"" << key << "\": [";
      for (size_t i = 0; i < values->size(); ++i) os << (i ? ", " : "") << (*values)[i];
      os << "]";
    }
  }

  // The staging policy of docs/npu.md section 2: a finite fp32 input beyond the fp16 range runs
  // saturated to +-65504, counted in the profile; the first call that saturates anything says so
  // once per module on stderr (a silent clip would hide it, an error would refuse inputs ONNX
  // allows). Called under mutex_.
  void WarnSaturated(const std::vector<uint64_t>& saturated) {
    uint64_t total = 0;
    std::ostringstream per_input;
    for (size_t k = 0; k < saturated.size(); ++k) {
      if (saturated[k] == 0) continue;
      per_input << (total ? ", " : "") << "input " << k << ": " << saturated[k];
      total += saturated[k];
    }
    if (total == 0) return;
    warned_ = true;
    std::fprintf(
        stderr,
        "tvm_npu warning: NPU region %s: %llu float32 input value(s) beyond the fp16 range "
        "saturated to +-65504 (%s); said once per module, every call's count is in its "
        "profile (\"saturated_inputs\", tvm_npu.profile(...)[\"saturated_inputs\"]); see "
        "docs/npu.md section 2\n",
        symbol_.c_str(), static_cast<unsigned long long>(total), per_input.str().c_str());
  }

  static void CountsJson(std::ostringstream& os, const char* key,
                         const std::vector<uint64_t>& counts) {
    os << ", \"" << key << "\": [";
    for (size_t k = 0; k < counts.size(); ++k) os << (k ? ", " : "") << counts[k];
    os << "]";
  }

  // The last call's clamped values per input and view row: [[row, count], ...] per input.
  static void RowsJson(std::ostringstream& os, const StagingCounts& c) {
    os << ", \"clamped_rows\": [";
    for (size_t k = 0; k < c.clamped_rows.size(); ++k) {
      os << (k ? ", " : "") << "[";
      for (size_t r = 0; r < c.clamped_rows[k].size(); ++r) {
        os << (r ? ", " : "") << "[" << c.clamped_rows[k][r].first << ", "
           << c.clamped_rows[k][r].second << "]";
      }
      os << "]";
    }
    os << "]";
  }

  std::string ProfileJson() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::ostringstream os;
    os << "{\"symbol\": \"" << symbol_ << "\", \"calls\": " << calls_ << ", \"last\": {";
    const Stats none;
    const Stats& last = calls_ > 0 ? timing_ : none;
    StatsJson(os, last);
    os << ", \"position\": " << (calls_ > 0 ? timed_position_ : 0);
    const StagingCounts& staged = calls_ > 0 ? last_staged_ : StagingCounts(ps_.inputs.size());
    CountsJson(os, "saturated_inputs", staged.saturated);
    CountsJson(os, "clamped_inputs", staged.clamped);
    RowsJson(os, staged);
    CommandCountsJson(os, calls_ > 0 ? last_counts_ : CommandCounts());
    os << ", \"host_start_ns\": " << last_host_ns_[0] << ", \"host_end_ns\": " << last_host_ns_[1]
       << ", \"records\": ";
    RecordsJson(os, last.records);
    os << "}, \"total\": {";
    StatsJson(os, total_);
    CountsJson(os, "saturated_inputs", total_saturated_);
    CountsJson(os, "clamped_inputs", total_clamped_);
    CommandCountsJson(os, total_counts_);
    os << ", \"command_macs\": [";
    for (size_t i = 0; i < total_.command_macs.size(); ++i) {
      os << (i ? ", " : "") << total_.command_macs[i];
    }
    os << "]";
    os << "}}";
    return os.str();
  }

  void ResetProfile() {
    std::lock_guard<std::mutex> lock(mutex_);
    total_ = Stats();
    last_host_ns_[0] = last_host_ns_[1] = 0;
    calls_ = 0;
    total_saturated_.assign(ps_.inputs.size(), 0);
    total_clamped_.assign(ps_.inputs.size(), 0);
    total_counts_ = CommandCounts();
  }

  std::string symbol_;
  std::vector<uint8_t> head_;  // the blob up to weights_offset: header, tables, padding
  std::shared_ptr<const WeightRegion> weights_;  // the blob's weight region, pooled
  bool by_reference_ = false;  // SaveToBytes writes the weights' key, not their bytes
  uint64_t key_[2] = {0, 0};    // loaded by reference, until Resolve: weights_bytes, hash
  std::mutex resolve_mutex_;
  static constexpr uint64_t kByReference = uint64_t{1} << 63;
  ParsedStream ps_;
  std::unique_ptr<ExecCache> cache_;  // buffers and packed weights kept between calls
  std::unique_ptr<StateBinding> state_;  // format 1.4: the state tensors, kept between calls
  std::mutex mutex_;  // guards the profile below; execution itself shares nothing mutable
  Stats timing_;  // the cycle-model result (TimeStream) of a call at timed_position_
  uint32_t timed_position_ = 0;
  Stats total_;
  int64_t last_host_ns_[2] = {0, 0};  // host wall clock (steady_clock) around the last call
  uint64_t calls_ = 0;
  // Per input: what its staging saturated (the last call's, and summed over calls): finite fp32
  // values beyond the fp16 range saturated to +-65504, values the quantized staging clamped.
  StagingCounts last_staged_;
  std::vector<uint64_t> total_saturated_, total_clamped_;
  bool warned_ = false;  // the saturation warning is printed once per module instance
  CommandCounts last_counts_, total_counts_;  // per command: saturated / overflowed results
};

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
           [](ffi::Bytes blob) { return ffi::String(SummaryJson(Parse(blob))); })
      .def("tvm_npu.runtime.constant_weight_commands",
           [](ffi::Bytes blob) { return Indices(ConstantWeightCommands(Parse(blob))); })
      .def("tvm_npu.runtime.resident_loads",
           [](ffi::Bytes blob) { return Indices(ResidentLoads(Parse(blob))); })
      .def("tvm_npu.runtime.weight_sharing", []() { return WeightSharing(); })
      .def("tvm_npu.runtime.set_weight_sharing", [](bool on) { SetWeightSharing(on); })
      .def("tvm_npu.runtime.weight_pool", []() {
        const WeightPoolStats s = WeightPoolUsage();
        std::ostringstream os;
        os << "{\"regions\": " << s.regions << ", \"bytes\": " << s.bytes << "}";
        return ffi::String(os.str());
      });
}

}  // namespace tvm_npu
