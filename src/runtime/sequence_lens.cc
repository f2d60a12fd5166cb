/*!
 * \file sequence_lens.cc
 * \brief Run-time check of an ONNX recurrent op's sequence_lens given as a model input
 *        (python/tvm_npu/frontend/lstm.py): every length must lie in [0, seq_length], as onnxruntime
 *        requires; the unrolled recurrence would otherwise clamp a longer one silently.
 *
 * Registered as "tvm_npu.check_sequence_lens" (lens, seq_length) -> lens, so the VM program calls it
 * from the C++ runtime library, with or without Python. It returns its argument: the masks read its
 * result, so no pass can drop the check as unused.
 */
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <sstream>

#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

template <typename T>
void CheckLengths(const T* lens, int64_t n, int64_t seq_length) {
  for (int64_t b = 0; b < n; ++b) {
    if (lens[b] < 0 || lens[b] > seq_length) {
      std::ostringstream all;
      for (int64_t k = 0; k < n; ++k) all << (k ? ", " : "") << static_cast<int64_t>(lens[k]);
      NPU_THROW(kShapeMismatch) << "sequence_lens [" << all.str() << "]: length "
                                << static_cast<int64_t>(lens[b]) << " of sequence " << b
                                << " is outside [0, " << seq_length
                                << "]; give each sequence's length, at most the padded length "
                                << seq_length;
    }
  }
}

tvm::ffi::Tensor CheckSequenceLens(tvm::ffi::Tensor lens, int64_t seq_length) {
  const DLTensor* t = lens.GetDLTensorPtr();
  if (t->device.device_type != kDLCPU || t->ndim != 1 || t->dtype.code != kDLInt ||
      (t->dtype.bits != 32 && t->dtype.bits != 64) || !lens.IsContiguous()) {
    NPU_THROW(kShapeMismatch) << "sequence_lens must be a contiguous 1-D int32 tensor on the CPU";
  }
  const char* base = static_cast<const char*>(t->data) + t->byte_offset;
  if (t->dtype.bits == 32) {
    CheckLengths(reinterpret_cast<const int32_t*>(base), t->shape[0], seq_length);
  } else {
    CheckLengths(reinterpret_cast<const int64_t*>(base), t->shape[0], seq_length);
  }
  return lens;
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("tvm_npu.check_sequence_lens", CheckSequenceLens);
}

}  // namespace tvm_npu
