/*!
 * \file state_store.cc
 * \brief State spaces (state_store.h): a process-wide registry of shared spaces by id, weakly held,
 *        so a space lives exactly as long as a module that uses it.
 */
#include "runtime/state_store.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/npu_error.h"

namespace tvm_npu {

struct Slot {
  stream::TensorDesc desc;
  std::vector<uint8_t> bytes;  // the footprint: view[0] * view[1] rows of row_stride bytes
};

class StateSpace {
 public:
  std::mutex call_mutex;   // held by a call of any module of the space
  std::mutex slots_mutex;  // guards `slots` while modules bind
  std::map<uint32_t, std::shared_ptr<Slot>> slots;
};

namespace {

struct Registry {
  std::mutex mutex;
  std::map<uint32_t, std::weak_ptr<StateSpace>> spaces;
};
Registry& Spaces() {
  static Registry* r = new Registry();  // leaked on purpose, as the executor's buffer pool
  return *r;
}

std::shared_ptr<StateSpace> SpaceOf(uint32_t id) {
  if (id == 0) return std::make_shared<StateSpace>();  // the module's own
  Registry& r = Spaces();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::shared_ptr<StateSpace> s = r.spaces[id].lock();
  if (s == nullptr) {
    s = std::make_shared<StateSpace>();
    r.spaces[id] = s;
  }
  return s;
}

// An SRAM state tensor (format 1.5) is also at one SRAM address for every module: the area is the
// NPU's SRAM, not a per-module copy.
bool SameLayout(const stream::TensorDesc& a, const stream::TensorDesc& b) {
  const bool sram = a.role == stream::kRoleSramState;
  return a.role == b.role && a.dtype == b.dtype && a.row_stride == b.row_stride &&
         std::equal(a.view, a.view + 4, b.view) && (!sram || a.ddr_addr == b.ddr_addr);
}

uint64_t Footprint(const stream::TensorDesc& d) {
  return uint64_t{d.view[0]} * d.view[1] * d.row_stride;
}

}  // namespace

StateBinding::StateBinding(const ParsedStream& ps) {
  if (ps.state_tensors.empty() && ps.sram_state_tensors.empty()) return;
  space_ = SpaceOf(ps.header.state_space);
  std::lock_guard<std::mutex> lock(space_->slots_mutex);
  std::vector<uint32_t> all = ps.state_tensors;
  all.insert(all.end(), ps.sram_state_tensors.begin(), ps.sram_state_tensors.end());
  for (uint32_t k : all) {
    const stream::TensorDesc& d = ps.tensors[k];
    std::shared_ptr<Slot>& slot = space_->slots[d.io_index];
    if (slot == nullptr) {
      slot = std::make_shared<Slot>();
      slot->desc = d;
      slot->bytes.assign(Footprint(d), 0);
    } else if (!SameLayout(slot->desc, d)) {
      NPU_THROW(kShapeMismatch) << "state slot " << d.io_index << " of state space "
                                << ps.header.state_space << " is bound with dtype "
                                << slot->desc.dtype << ", view [" << slot->desc.view[0] << ", "
                                << slot->desc.view[1] << ", " << slot->desc.view[2] << ", "
                                << slot->desc.view[3] << "], row stride " << slot->desc.row_stride
                                << ", role " << slot->desc.role << " at " << slot->desc.ddr_addr
                                << "; this stream's tensor " << k << " differs: modules sharing a "
                                << "state space must come from one build";
    }
    const StateView view{d.ddr_addr, d.ddr_addr + Footprint(d), slot->bytes.data()};
    (d.role == stream::kRoleSramState ? sram_views_ : views_).push_back(view);
    all_.push_back(view);
    descs_.push_back(d);
  }
}

StateBinding::~StateBinding() = default;

std::unique_lock<std::mutex> StateBinding::CallLock() const {
  if (space_ == nullptr) return {};
  return std::unique_lock<std::mutex>(space_->call_mutex);
}

void StateBinding::Reset() {
  if (space_ == nullptr) return;
  std::lock_guard<std::mutex> call(space_->call_mutex);
  std::lock_guard<std::mutex> lock(space_->slots_mutex);
  for (auto& [id, slot] : space_->slots) std::fill(slot->bytes.begin(), slot->bytes.end(), 0);
}

std::string StateBinding::Read(uint32_t slot) const {
  for (size_t i = 0; i < descs_.size(); ++i) {
    const stream::TensorDesc& d = descs_[i];
    if (d.io_index != slot) continue;
    std::lock_guard<std::mutex> call(space_->call_mutex);
    const uint64_t row = uint64_t{d.view[2]} * d.view[3] * stream::DTypeBytes(d.dtype);
    const uint64_t rows = uint64_t{d.view[0]} * d.view[1];
    std::string out(rows * row, '\0');
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(&out[r * row], all_[i].data + r * d.row_stride, row);
    }
    return out;
  }
  NPU_THROW(kShapeMismatch) << "no state slot " << slot << " in this module";
}

}  // namespace tvm_npu
