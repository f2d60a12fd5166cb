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
  ffi::Module lib =
      ffi::Module::LoadFromFile(path.find('/') == std::string::npos ? "./" + path : path);
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

/*! \brief A loaded artifact with its own Relax VM on the CPU. */
class Model {
 public:
  /*! \brief Load `path` after CheckArtifact (artifact.h): a damaged library is ERR_BAD_ARTIFACT. */
  explicit Model(const std::string& path, Integrity integrity = Integrity::kRequireTrailer) {
    std::tie(lib_, vm_) = LoadVM(path, integrity);
    main_ = RequiredFunction(vm_, "main", path);
  }

  /*! \brief Run `main` on `inputs` (in argument order); the outputs in order (one for a tensor). */
  std::vector<ffi::Tensor> Run(const std::vector<ffi::Tensor>& inputs) {
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
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
};

}  // namespace host
}  // namespace tvm_npu

#endif  // TVM_NPU_HOST_H_
