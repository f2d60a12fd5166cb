/*!
 * \file tvm_npu/host.h
 * \brief Running a compiled tvm_npu model from C++, without Python (header-only, over tvm-ffi).
 *
 *   tvm_npu::host::Model model("model.so");             // tvm_npu.export_library(ex, "model.so")
 *   ffi::Tensor x = tvm_npu::host::MakeTensor({1, 3, 224, 224}, tvm_npu::host::kFloat32, data);
 *   std::vector<ffi::Tensor> y = model.Run({x});
 *   std::string profile = model.Profile();               // per-NPU-call cycles, DDR bytes (JSON)
 *   auto pending = model.Start({x});                     // asynchronous;
 *   y = tvm_npu::host::Model::Wait(pending, std::chrono::milliseconds(100));  // ERR_TIMEOUT if late
 *
 * Link tvm_ffi, libtvm_runtime.so (TVM's Relax VM) and libtvm_npu_runtime.so (the "npu" module and its
 * loader) with -Wl,--no-as-needed: the app uses what their static initialisers register
 * (apps/host_app/CMakeLists.txt).
 *
 * Threads: a Model runs one call at a time (its VM keeps per-call registers; calls from several threads
 * are serialised by a mutex). For parallel inference load one Model per thread: each has its own VM and
 * its own NPU modules (and profile counters); the loaded code and weights are read-only and shared.
 */
#ifndef TVM_NPU_HOST_H_
#define TVM_NPU_HOST_H_

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>
#include <tvm_npu/artifact.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tvm_npu {
namespace host {

namespace ffi = tvm::ffi;

constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr DLDataType kInt8{kDLInt, 8, 1};

struct CpuAlloc {
  void AllocData(DLTensor* t) {
    t->data = std::malloc(ffi::GetDataSize(*t));
    if (t->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

/*! \brief A CPU tensor of `shape` and `dtype` holding a copy of `data` (row-major). */
inline ffi::Tensor MakeTensor(const std::vector<int64_t>& shape, DLDataType dtype,
                              const void* data) {
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(CpuAlloc(), ffi::ShapeView(shape.data(), shape.size()),
                                           dtype, DLDevice{kDLCPU, 0});
  std::memcpy(t.data_ptr(), data, ffi::GetDataSize(t));
  return t;
}

/*! \brief `mod`'s function `name`; ERR_BAD_STREAM naming `where` when it has none. */
inline ffi::Function RequiredFunction(const ffi::Module& mod, const char* name,
                                      const std::string& where) {
  ffi::Optional<ffi::Function> f = mod->GetFunction(name);
  if (!f.has_value()) {
    throw Error("ERR_BAD_STREAM",
                where + " has no function '" + name +
                    "': not an artifact of tvm_npu.build / tvm.compile(..., target=\"npu\")");
  }
  return *f;
}

/*! \brief A library `path` loaded after CheckArtifact (artifact.h: a damaged library is
 *         ERR_BAD_ARTIFACT) and a Relax VM over it, initialised on the CPU: {library, VM}. */
inline std::pair<ffi::Module, ffi::Module> LoadVM(const std::string& path, Integrity integrity) {
  CheckArtifact(path, integrity);
  // dlopen takes a name without a slash for a library to look for on the search path, not for a
  // file here: "model.so" from the working directory would not be found.
  ffi::Module lib{ffi::UnsafeInit{}};
  try {
    lib = ffi::Module::LoadFromFile(path.find('/') == std::string::npos ? "./" + path : path);
  } catch (
      const std::exception& e) {  // dlopen refuses it (an executable, another ABI): say which file
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw Error("ERR_BAD_ARTIFACT", path + " could not be loaded as a library (" + why +
                                        "): give a library written by tvm_npu.export_library");
  }
  ffi::Module vm = RequiredFunction(lib, "vm_load_executable", path)().cast<ffi::Module>();
  // device type, device id, allocator (2: pooled) for the one device the model runs on (the CPU;
  // the NPU is reached through the packed functions of its modules).
  RequiredFunction(vm, "vm_initialization", path)(static_cast<int>(kDLCPU), 0, 2);
  return {lib, vm};
}

/*! \brief Every NPU region module a VM calls (the imports of its library, recursively). */
inline std::vector<ffi::Module> NpuModules(const ffi::Module& vm) {
  std::vector<ffi::Module> todo{vm}, found;
  for (size_t i = 0; i < todo.size(); ++i) {
    for (const ffi::Any& imp : todo[i]->imports()) todo.push_back(imp.cast<ffi::Module>());
    if (std::string(todo[i]->kind()) == "npu") found.push_back(todo[i]);
  }
  return found;
}

/*! \brief A tensor parameter of an entry function: its name, dtype ("float32") and dims (-1: a
 *         symbolic size). */
struct Param {
  std::string name, dtype;
  std::vector<int64_t> dims;
};

/*!
 * \brief The tensor parameters of `entry` from the annotations TVM's VM lowering keeps in the
 *        executable's constant pool (its "stats" text: ErrorContext(fn=main, loc=param[0], param=x,
 *        annotation=R.Tensor((1, 3, 8, 8), dtype="float32"))); empty when it carries none, and then
 *        nothing is checked here (runtime/boundary.py reads the same text).
 */
inline std::vector<Param> Signature(const std::string& stats, const std::string& entry) {
  std::vector<Param> params;
  const std::string head = "ErrorContext(fn=" + entry + ", loc=param[";
  for (size_t at = stats.find(head); at != std::string::npos; at = stats.find(head, at + 1)) {
    const size_t index_end = stats.find(']', at);
    const size_t name_at = stats.find(", param=", at), ann_at = stats.find(", annotation=", at);
    if (index_end == std::string::npos || name_at == std::string::npos ||
        ann_at == std::string::npos) {
      return {};
    }
    const size_t index = std::strtoul(stats.c_str() + at + head.size(), nullptr, 10);
    const std::string ann = stats.substr(ann_at + 13, stats.find(") \"", ann_at) - ann_at - 13);
    if (ann.rfind("R.Tensor(", 0) != 0 || index != params.size())
      return {};  // not a tensor: no check
    Param p;
    p.name = stats.substr(name_at + 8, ann_at - name_at - 8);
    const size_t dt = ann.find("dtype=\"");
    if (dt == std::string::npos) return {};
    p.dtype = ann.substr(dt + 7, ann.find('"', dt + 7) - dt - 7);
    if (ann.rfind("R.Tensor((", 0) != 0) return {};  // a rank TVM does not know
    std::stringstream dims(ann.substr(10, ann.find(')', 10) - 10));
    for (std::string d; std::getline(dims, d, ',');) {
      d.erase(0, d.find_first_not_of(' '));
      if (d.rfind("T.int64(", 0) == 0) d = d.substr(8);
      char* end = nullptr;
      const long long v = std::strtoll(d.c_str(), &end, 10);
      p.dims.push_back(end != d.c_str() && (*end == '\0' || *end == ')') ? v : -1);
    }
    params.push_back(p);
  }
  return params;
}

/*! \brief "float32", "int8", ... for `t`. */
inline std::string DTypeName(DLDataType t) {
  const char* kind = t.code == kDLFloat  ? "float"
                     : t.code == kDLInt  ? "int"
                     : t.code == kDLUInt ? "uint"
                                         : "bfloat";
  return (t.code == kDLBool ? std::string("bool") : kind + std::to_string(t.bits));
}

/*! \brief ERR_SHAPE_MISMATCH naming the input and what to pass unless `inputs` match `params` (TVM's
 *         own check says "Check failed ... match_cast"). */
inline void CheckInputs(const std::vector<Param>& params, const std::vector<ffi::Tensor>& inputs) {
  if (params.empty()) return;
  auto shape = [](const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i)
      s += (i ? ", " : "") + (dims[i] < 0 ? "?" : std::to_string(dims[i]));
    return s + "]";
  };
  if (inputs.size() != params.size()) {
    throw Error("ERR_SHAPE_MISMATCH", "main takes " + std::to_string(params.size()) +
                                          " input(s), " + std::to_string(inputs.size()) + " given");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    const ffi::Tensor& x = inputs[i];
    std::vector<int64_t> got(x.shape().begin(), x.shape().end());
    bool ok = DTypeName(x.dtype()) == p.dtype && got.size() == p.dims.size();
    for (size_t a = 0; ok && a < got.size(); ++a) {
      ok = p.dims[a] < 0 ? got[a] > 0
                         : got[a] == p.dims[a];  // a symbolic size of 0: SIGFPE in TVM's code
    }
    if (!ok) {
      throw Error("ERR_SHAPE_MISMATCH",
                  "input " + std::to_string(i) + " '" + p.name + "' of main: " + p.dtype + " " +
                      shape(p.dims) + " expected, got " + DTypeName(x.dtype()) + " " + shape(got) +
                      ": give an array of the shape and dtype the model was "
                      "compiled for");
    }
  }
}

/*! \brief The "stats" text of a VM executable (or of its library), "" when neither has one. */
inline std::string Stats(const ffi::Module& vm, const ffi::Module& lib) {
  for (const ffi::Module& m : {vm, lib}) {
    if (ffi::Optional<ffi::Function> f = m->GetFunction("stats"))
      return std::string((*f)().cast<ffi::String>());
  }
  return "";
}

/*! \brief A loaded artifact with its own Relax VM on the CPU. */
class Model {
 public:
  /*! \brief Load `path` after CheckArtifact (artifact.h): a damaged library is ERR_BAD_ARTIFACT. */
  explicit Model(const std::string& path, Integrity integrity = Integrity::kRequireTrailer) {
    std::tie(lib_, vm_) = LoadVM(path, integrity);
    main_ = RequiredFunction(vm_, "main", path);
    params_ = Signature(Stats(vm_, lib_), "main");
  }

  /*! \brief Run `main` on `inputs` (in argument order); the outputs in order (one for a tensor). */
  std::vector<ffi::Tensor> Run(const std::vector<ffi::Tensor>& inputs) {
    CheckInputs(params_, inputs);
    std::lock_guard<std::mutex> lock(*mu_);
    std::vector<ffi::AnyView> args(inputs.begin(), inputs.end());
    ffi::Any ret;
    main_.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
    if (auto one = ret.try_cast<ffi::Tensor>()) return {*one};
    std::vector<ffi::Tensor> outs;
    for (const ffi::Any& item : ret.cast<ffi::Array<ffi::Any>>())
      outs.push_back(item.cast<ffi::Tensor>());
    return outs;
  }

  /*! \brief Start `Run` on a worker thread; collect the result with `Wait`. */
  std::future<std::vector<ffi::Tensor>> Start(std::vector<ffi::Tensor> inputs) {
    return std::async(std::launch::async, [this, in = std::move(inputs)]() { return Run(in); });
  }

  /*!
   * \brief The result of `Start`, or Error "ERR_TIMEOUT" when it is not ready within `timeout`. The run
   *        itself goes on and the Model stays usable: a later call waits for it, then runs.
   */
  static std::vector<ffi::Tensor> Wait(std::future<std::vector<ffi::Tensor>>& pending,
                                       std::chrono::milliseconds timeout) {
    if (pending.wait_for(timeout) != std::future_status::ready) {
      throw Error("ERR_TIMEOUT", "the NPU call did not finish within " +
                                     std::to_string(timeout.count()) +
                                     " ms; wait again, or allow more time");
    }
    return pending.get();
  }

  /*! \brief JSON array: for each NPU region this Model's VM calls, its profile (docs/npu.md 5). */
  std::string Profile() {
    std::lock_guard<std::mutex> lock(*mu_);
    std::string out = "[";
    for (const ffi::Module& m : NpuModules(vm_)) {
      ffi::String json = RequiredFunction(m, "get_profile", "npu module")().cast<ffi::String>();
      out += (out.size() > 1 ? ", " : "") + std::string(json);
    }
    return out + "]";
  }

 private:
  ffi::Module lib_{ffi::UnsafeInit{}}, vm_{ffi::UnsafeInit{}};
  ffi::Function main_;
  std::vector<Param> params_;
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
};

}  // namespace host
}  // namespace tvm_npu

#endif  // TVM_NPU_HOST_H_
