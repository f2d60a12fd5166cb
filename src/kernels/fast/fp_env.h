/*!
 * \file fp_env.h
 * \brief The host FP environment checks the fast fp16 kernels make before they run: their shortcuts
 *        equal the reference only in some environments, and the reference follows the calling
 *        thread's environment (docs/npu.md leaves the host's modes to the host).
 */
#ifndef TVM_NPU_KERNELS_FAST_FP_ENV_H_
#define TVM_NPU_KERNELS_FAST_FP_ENV_H_

#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_getcsr: SSE is part of x86-64, no target attribute needed
#else
#include <cfenv>
#endif

namespace tvm_npu {
namespace fast {

/*!
 * \brief False when MXCSR flushes denormal results (FTZ, bit 15) or reads denormal inputs as zero
 *        (DAZ, bit 6). The F16C conversions ignore both, the reference's fp32 arithmetic does not,
 *        so vector kernels that convert with F16C run the reference then. Elsewhere: true (the
 *        vector kernels exist on x86-64 only).
 */
inline bool NoFlushToZero() {
#if defined(__x86_64__)
  return (_mm_getcsr() & 0x8040u) == 0;
#else
  return true;
#endif
}

/*!
 * \brief True in the default FP environment: round to nearest and, on x86, no FTZ / DAZ (MXCSR
 *        bits 13-14, 15, 6). A table of results computed once (unary_fast.cc) equals the
 *        reference's per-element results only there.
 */
inline bool DefaultFpEnvironment() {
#if defined(__x86_64__)
  return (_mm_getcsr() & 0xE040u) == 0;
#else
  return std::fegetround() == FE_TONEAREST;
#endif
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_FP_ENV_H_
