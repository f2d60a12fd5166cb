/*!
 * \file state_store.h
 * \brief The state region's buffers (format 1.4, docs/npu.md section 3): state tensors kept across
 *        calls, zeroed at creation and by reset, shared by slot between the modules of one state
 *        space (prefill and decode read and write one KV cache).
 */
#ifndef TVM_NPU_RUNTIME_STATE_STORE_H_
#define TVM_NPU_RUNTIME_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/stream_parser.h"

namespace tvm_npu {

/*! \brief Where a state tensor's bytes are during a call: DDR [begin, end) of the stream (SRAM
 *         [begin, end) for an SRAM state tensor, format 1.5). */
struct StateView {
  uint64_t begin, end;
  uint8_t* data;
};

class StateSpace;

/*!
 * \brief One module's binding to its state buffers. The buffers live as long as any module of
 *        their space; a call holds CallLock() for its whole run, so calls sharing state run one
 *        at a time.
 */
class StateBinding {
 public:
  /*! \brief Binds every state tensor of `ps` (none: an empty binding); ERR_SHAPE_MISMATCH if a
   *         shared slot's descriptor disagrees with the one already bound. */
  explicit StateBinding(const ParsedStream& ps);
  ~StateBinding();

  bool empty() const { return all_.empty(); }
  /*! \brief The DDR state tensors (begin, end: DDR addresses). */
  const std::vector<StateView>& views() const { return views_; }
  /*! \brief Format 1.5: the SRAM state tensors (begin, end: SRAM addresses), copied into the
   *         call's SRAM before its first command and back after its last. */
  const std::vector<StateView>& sram_views() const { return sram_views_; }
  std::unique_lock<std::mutex> CallLock() const;
  /*! \brief Zero every state tensor of the space (all slots, not only this module's). */
  void Reset();
  /*! \brief The dense rows (W * C elements each) of state slot `slot` of this module. */
  std::string Read(uint32_t slot) const;

 private:
  std::shared_ptr<StateSpace> space_;
  std::vector<StateView> views_, sram_views_;
  std::vector<StateView> all_;             // both, in descs_' order
  std::vector<stream::TensorDesc> descs_;  // all_[i] is descs_[i]'s footprint
};

}  // namespace tvm_npu

#endif  // TVM_NPU_RUNTIME_STATE_STORE_H_
