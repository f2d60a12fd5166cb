/*!
 * \file tvm_npu/llm_host.h
 * \brief Running an LLM exported by `lm.export_library("lm.so")` from C++, without Python
 *        (header-only, over host.h): prefill, decode and a greedy decode loop.
 *
 *   tvm_npu::host::LLM lm("lm.so");
 *   std::vector<float> logits = lm.Prefill({1, 2, 3});   // the last prompt token's, [vocab]
 *   logits = lm.Decode(17);                               // one token appended
 *
 * apps/host_app (`npu_host lm.so --prompt-ids 1,2,3 --max-new-tokens 16`) runs the greedy loop
 * (argmax on the CPU) over these two calls.
 *
 * The library holds the VM functions "prefill", "decode" and "llm_meta" (the metadata as JSON:
 * python/tvm_npu/llm/one_library.py). It follows tvm_npu.llm.LLM step for step (docs/llm.md): the
 * prompt runs in chunks of the prefill bucket S (the last one padded with token 0, or moved back to
 * T - S), the cache is the NPU's state (kv_cache "npu": prefill zeroes it) or tensors this class
 * holds (kv_cache "host"). Bad input is an Error with the codes Python raises, checked before any
 * step runs, so the cache and the sequence stay as they were: ERR_LLM_CONTEXT (a prompt longer than
 * max_context, no cache row left), ERR_LLM_TOKEN (an id outside the vocabulary), ERR_LLM_STATE
 * (decode before prefill), ERR_SHAPE_MISMATCH (an empty prompt). Not thread safe: one LLM per thread,
 * and two LLMs of one artifact share the NPU's cache (one state space), as in Python.
 */
#ifndef TVM_NPU_LLM_HOST_H_
#define TVM_NPU_LLM_HOST_H_

#include <tvm/ffi/extra/json.h>
#include <tvm_npu/host.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tvm_npu {
namespace host {

class LLM {
 public:
  explicit LLM(const std::string& path, Integrity integrity = Integrity::kRequireTrailer) {
    std::tie(lib_, vm_) = LoadVM(path, integrity);
    if (!vm_->GetFunction("llm_meta").has_value()) {
      throw Error("ERR_BAD_ARTIFACT", path +
                                          " has no llm_meta(): not an LLM exported by "
                                          "lm.export_library; export it again");
    }
    namespace json = ffi::json;
    ffi::String text = RequiredFunction(vm_, "llm_meta", path)().cast<ffi::String>();
    json::Object meta = json::Parse(text).cast<json::Object>();
    json::Object step = meta["step"].cast<json::Object>();
    layers_ = step["layers"].cast<int64_t>();
    kv_heads_ = step["kv_heads"].cast<int64_t>();
    head_dim_ = step["head_dim"].cast<int64_t>();
    max_context_ = step["max_context"].cast<int64_t>();
    vocab_ = step["vocab"].cast<int64_t>();
    prefill_len_ = meta["prefill_len"].cast<int64_t>();
    resident_ = meta["kv_cache"].cast<ffi::String>() == "npu";
    clock_mhz_ = meta["config"].cast<json::Object>()["clock_mhz"].cast<int64_t>();
    prefill_ = RequiredFunction(vm_, "prefill", path);
    decode_ = RequiredFunction(vm_, "decode", path);
    modules_ = NpuModules(vm_);
  }

  int64_t vocab() const { return vocab_; }
  int64_t max_context() const { return max_context_; }
  int64_t prefill_len() const { return prefill_len_; }
  /*! \brief The NPU clock of the configuration the LLM was compiled for, in MHz. */
  int64_t clock_mhz() const { return clock_mhz_; }
  /*! \brief Tokens in the cache; -1 before a prefill. */
  int64_t length() const { return length_; }

  /*! \brief Start a new sequence with `ids`: the logits [vocab] of its last token. */
  std::vector<float> Prefill(const std::vector<int64_t>& ids) {
    if (ids.empty()) throw Error("ERR_SHAPE_MISMATCH", "the prompt is empty: give at least one id");
    const int64_t n = static_cast<int64_t>(ids.size()), S = prefill_len_, T = max_context_;
    if (n > T) {
      throw Error("ERR_LLM_CONTEXT", "a prompt of " + std::to_string(n) +
                                         " tokens is longer than max_context " + std::to_string(T) +
                                         ": shorten it, or compile with a larger max_context");
    }
    for (size_t i = 0; i < ids.size(); ++i) CheckToken(ids[i], " at index " + std::to_string(i));
    std::vector<ffi::Tensor> cache;
    if (resident_) {
      for (const ffi::Module& m : modules_) RequiredFunction(m, "reset_state", "npu module")();
    } else {
      cache = ZeroCache();
    }
    std::vector<float> logits;
    int64_t begin = 0;
    for (int64_t start = 0; start < n; start += S) {
      // As tvm_npu.llm: the last chunk padded at its end, or started earlier where padding would
      // pass T (recomputing rows it already wrote, with the same tokens: the same values).
      begin = std::min(start, T - S);
      std::vector<int64_t> chunk(S, 0);
      for (int64_t i = 0; i < S && begin + i < n; ++i) chunk[i] = ids[begin + i];
      logits = Step(prefill_, chunk, begin, &cache, n - 1 - begin);
    }
    cache_ = std::move(cache);
    length_ = n;
    return logits;
  }

  /*! \brief Append `token` to the sequence: the logits [vocab] after it. */
  std::vector<float> Decode(int64_t token) {
    CheckToken(token, "");
    if (length_ < 0) {
      throw Error("ERR_LLM_STATE", "decode before prefill: start a sequence with a prefill first");
    }
    if (length_ >= max_context_) {
      throw Error("ERR_LLM_CONTEXT", "the sequence already holds max_context " +
                                         std::to_string(max_context_) +
                                         " tokens: no cache row is left for another");
    }
    std::vector<float> logits = Step(decode_, {token}, length_, &cache_, 0);
    ++length_;
    return logits;
  }

  /*! \brief NPU cycles (cycle model; CPU ops are not in them) of every call since ResetCycles. */
  uint64_t Cycles() const {
    namespace json = ffi::json;
    uint64_t cycles = 0;
    for (const ffi::Module& m : modules_) {
      ffi::String text = RequiredFunction(m, "get_profile", "npu module")().cast<ffi::String>();
      json::Object total = json::Parse(text).cast<json::Object>()["total"].cast<json::Object>();
      cycles += static_cast<uint64_t>(total["total_cycles"].cast<int64_t>());
    }
    return cycles;
  }
  void ResetCycles() {
    for (const ffi::Module& m : modules_) RequiredFunction(m, "reset_profile", "npu module")();
  }

 private:
  void CheckToken(int64_t token, const std::string& where) const {
    if (token < 0 || token >= vocab_) {
      throw Error("ERR_LLM_TOKEN", "token id " + std::to_string(token) + where +
                                       " is outside the vocabulary [0, " + std::to_string(vocab_) +
                                       ")");
    }
  }

  std::vector<ffi::Tensor> ZeroCache() const {
    std::vector<float> zeros(kv_heads_ * max_context_ * head_dim_, 0.0f);
    std::vector<ffi::Tensor> cache;
    for (int64_t i = 0; i < 2 * layers_; ++i) {
      cache.push_back(MakeTensor({1, kv_heads_, max_context_, head_dim_}, kFloat32, zeros.data()));
    }
    return cache;
  }

  // One call of a step at `position`: logits row `row` of its [1, S, vocab] output; a host-held cache
  // is replaced by the step's new one.
  std::vector<float> Step(const ffi::Function& f, const std::vector<int64_t>& ids, int64_t position,
                          std::vector<ffi::Tensor>* cache, int64_t row) {
    constexpr DLDataType kInt64{kDLInt, 64, 1};
    std::vector<ffi::Tensor> args{
        MakeTensor({1, static_cast<int64_t>(ids.size())}, kInt64, ids.data()),
        MakeTensor({1}, kInt64, &position)};
    if (!resident_) args.insert(args.end(), cache->begin(), cache->end());
    std::vector<ffi::AnyView> views(args.begin(), args.end());
    ffi::Any ret;
    f.CallPacked(views.data(), static_cast<int32_t>(views.size()), &ret);
    ffi::Array<ffi::Any> outs = ret.cast<ffi::Array<ffi::Any>>();
    ffi::Tensor logits = outs[0].cast<ffi::Tensor>();
    if (!resident_) {
      cache->clear();
      for (size_t i = 1; i < outs.size(); ++i) cache->push_back(outs[i].cast<ffi::Tensor>());
    }
    const float* rows = static_cast<const float*>(logits.data_ptr());
    return std::vector<float>(rows + row * vocab_, rows + (row + 1) * vocab_);
  }

  ffi::Module lib_{ffi::UnsafeInit{}}, vm_{ffi::UnsafeInit{}};
  ffi::Function prefill_, decode_;
  std::vector<ffi::Module> modules_;
  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, max_context_ = 0, vocab_ = 0;
  int64_t prefill_len_ = 1, clock_mhz_ = 0, length_ = -1;
  bool resident_ = false;
  std::vector<ffi::Tensor> cache_;  // the host-held cache (kv_cache "host")
};

}  // namespace host
}  // namespace tvm_npu

#endif  // TVM_NPU_LLM_HOST_H_
