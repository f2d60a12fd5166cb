/*!
 * \file cpu_level.h
 * \brief Which kernels the reference NPU runs: the reference kernels, or the fast kernels at one
 *        instruction-set level, chosen at run time.
 *
 * Every level gives the same bits (tests/test_fast_kernels.py checks each one against the
 * reference), so the level only changes speed. The library is built without -march flags: each
 * vector kernel carries a per-function target attribute and runs only when the CPU reports the
 * instructions (__builtin_cpu_supports), so one binary runs on any x86-64 and the portable level
 * builds everywhere.
 */
#ifndef TVM_NPU_KERNELS_FAST_CPU_LEVEL_H_
#define TVM_NPU_KERNELS_FAST_CPU_LEVEL_H_

#include <string>

// The vector kernels are compiled on x86-64 only. -DTVM_NPU_PORTABLE_ONLY leaves them out on
// x86-64 too: how the library builds and runs on other architectures can be checked here.
#if defined(__x86_64__) && !defined(TVM_NPU_PORTABLE_ONLY)
#define TVM_NPU_X86_64 1
#else
#define TVM_NPU_X86_64 0
#endif

namespace tvm_npu {
namespace fast {

enum Level : int {
  kLevelRef = 0,         // src/kernels/ref, the readable definition
  kLevelPortable = 1,    // plain C++, blocked and multi-threaded
  kLevelAvx2 = 2,        // AVX2 (+ F16C for fp16)
  kLevelAvx512Vnni = 3,  // AVX-512 F/BW/VL + VNNI
};

/*! \brief The highest level this CPU supports. */
Level BestLevel();

/*!
 * \brief The level kernels run at: $TVM_NPU_KERNELS (ref, portable, avx2, avx512vnni) when set,
 *        else BestLevel(); SetLevel overrides both. A level above BestLevel() is lowered to it.
 */
Level ActiveLevel();

/*! \brief Sets the active level (clamped to BestLevel()); returns the level now active. */
Level SetLevel(Level level);

const char* LevelName(Level level);

/*! \brief The level named `name`; throws ERR_OP_NOT_SUPPORTED for an unknown name. */
Level ParseLevel(const std::string& name);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_CPU_LEVEL_H_
