/*!
 * \file conv2d_fp16_fast.cc
 * \brief Fast fp16 CONV2D (placeholder: the reference until the vector version lands).
 */
#include "kernels/fast/conv2d_fast.h"
#include "kernels/ref/conv2d_ref.h"

namespace tvm_npu {
namespace fast {

void Conv2DFp16(const stream::Conv2DOperands& op, const uint8_t* in, const uint8_t* w,
                const uint8_t* bias, uint8_t* out, Level) {
  Conv2DRef(op, in, w, bias, out, 0);
}

}  // namespace fast
}  // namespace tvm_npu
