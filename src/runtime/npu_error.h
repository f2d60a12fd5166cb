/*!
 * \file npu_error.h
 * \brief Throwing an NPU error code through tvm-ffi (docs/npu.md section 7).
 *
 * Every error is the ffi error kind "NPUError" whose message starts with the code's name, so the
 * Python side can map it to tvm_npu.NPUError with a `code` attribute by reading the prefix.
 *
 *   NPU_THROW(kBadStream) << "crc mismatch: ...";
 */
#ifndef TVM_NPU_RUNTIME_NPU_ERROR_H_
#define TVM_NPU_RUNTIME_NPU_ERROR_H_

#include <tvm/ffi/error.h>
#include <tvm_npu/npu_config.h>

#define NPU_THROW(status) \
  TVM_FFI_THROW(NPUError) << ::tvm_npu::StatusName(::tvm_npu::NPUStatus::status) << ": "

#endif  // TVM_NPU_RUNTIME_NPU_ERROR_H_
