/*!
 * \file cpu_level.cc
 * \brief Run-time choice of the kernel level (cpu_level.h).
 */
#include "kernels/fast/cpu_level.h"

#include <atomic>
#include <cstdlib>

#include "runtime/npu_error.h"

namespace tvm_npu {
namespace fast {
namespace {

Level Detect() {
#if TVM_NPU_X86_64
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    return kLevelAvx512Vnni;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return kLevelAvx2;
#endif
  return kLevelPortable;
}

Level Clamp(Level level) { return level > BestLevel() ? BestLevel() : level; }

Level FromEnvironment() {
  const char* env = std::getenv("TVM_NPU_KERNELS");
  return env == nullptr || *env == '\0' ? BestLevel() : Clamp(ParseLevel(env));
}

std::atomic<int>& Active() {
  static std::atomic<int> level{FromEnvironment()};
  return level;
}

}  // namespace

Level BestLevel() {
  static const Level best = Detect();
  return best;
}

Level ActiveLevel() { return static_cast<Level>(Active().load(std::memory_order_relaxed)); }

Level SetLevel(Level level) {
  Active().store(Clamp(level), std::memory_order_relaxed);
  return ActiveLevel();
}

const char* LevelName(Level level) {
  switch (level) {
    case kLevelRef: return "ref";
    case kLevelPortable: return "portable";
    case kLevelAvx2: return "avx2";
    default: return "avx512vnni";
  }
}

Level ParseLevel(const std::string& name) {
  for (Level l : {kLevelRef, kLevelPortable, kLevelAvx2, kLevelAvx512Vnni}) {
    if (name == LevelName(l)) return l;
  }
  NPU_THROW(kOpNotSupported) << "unknown kernel level '" << name
                             << "'; use ref, portable, avx2 or avx512vnni (TVM_NPU_KERNELS)";
}

}  // namespace fast
}  // namespace tvm_npu
