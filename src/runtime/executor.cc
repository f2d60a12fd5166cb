/*!
 * \file executor.cc
 * \brief The reference NPU: DMA engines and the MAC array as plain memory copies and the
 *        reference kernels, timed by the cycle model, plus host <-> device staging of I/O.
 */
#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/fp16.h"
#include "runtime/cycle_model.h"
#include "runtime/npu_error.h"

namespace tvm_npu {
namespace {

using stream::TensorDesc;

std::string ShapeStr(const int64_t* shape, int ndim) {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << ")";
  return os.str();
}

void CheckHostTensor(const char* kind, size_t k, const DLTensor* t, const TensorDesc& d) {
  if (t == nullptr) NPU_THROW(kShapeMismatch) << kind << " " << k << " is missing";
  if (t->device.device_type != kDLCPU) {
    NPU_THROW(kShapeMismatch) << kind << " " << k << " is on device type "
                              << t->device.device_type << "; pass a CPU tensor";
  }
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1) {
    NPU_THROW(kShapeMismatch) << kind << " " << k << " has dtype code " << int(t->dtype.code)
                              << " bits " << int(t->dtype.bits) << "; the model was compiled "
                              << "for float32";
  }
  int64_t compiled[4];
  for (uint32_t i = 0; i < d.host_rank; ++i) compiled[i] = d.host_shape[i];
  bool same = t->ndim == static_cast<int>(d.host_rank);
  for (int i = 0; same && i < t->ndim; ++i) same = t->shape[i] == compiled[i];
  if (!same) {
    NPU_THROW(kShapeMismatch) << kind << " " << k << " has shape " << ShapeStr(t->shape, t->ndim)
                              << ", the model was compiled for "
                              << ShapeStr(compiled, static_cast<int>(d.host_rank))
                              << "; pass that shape or recompile";
  }
  if (t->strides != nullptr) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect) {
        NPU_THROW(kShapeMismatch) << kind << " " << k << " is not contiguous; pass a compact "
                                  << "row-major tensor";
      }
      expect *= t->shape[i];
    }
  }
  if (t->data == nullptr) NPU_THROW(kShapeMismatch) << kind << " " << k << " has no data";
}

// Visits every element of a descriptor's device view with its host flat index and its byte
// offset from ddr_addr. NHWC and ROWS share the row-major order of the view; NCHW transposes.
template <typename F>
void ForEachElement(const TensorDesc& d, F&& f) {
  const uint64_t N = d.view[0], H = d.view[1], W = d.view[2], C = d.view[3];
  for (uint64_t n = 0; n < N; ++n) {
    for (uint64_t h = 0; h < H; ++h) {
      for (uint64_t w = 0; w < W; ++w) {
        for (uint64_t c = 0; c < C; ++c) {
          const uint64_t host = d.host_layout == stream::kLayoutNCHW
                                    ? ((n * C + c) * H + h) * W + w
                                    : ((n * H + h) * W + w) * C + c;
          f(host, (n * H + h) * d.row_stride + (w * C + c) * 2);
        }
      }
    }
  }
}

class Machine {
 public:
  explicit Machine(const ParsedStream& ps)
      : ps_(ps),
        sram_(ps.config.sram_bytes, 0),
        arena_(ps.header.ddr_bytes - ps.header.weights_bytes, 0) {}

  // Host fp32 -> device fp16 (RNE) at the descriptor's place in the activation region.
  void StageIn(const TensorDesc& d, const DLTensor* t) {
    const float* src = reinterpret_cast<const float*>(static_cast<const char*>(t->data) +
                                                     t->byte_offset);
    uint8_t* base = Arena(d.ddr_addr);
    ForEachElement(d, [&](uint64_t host, uint64_t off) {
      const uint16_t h = FloatToHalfBits(src[host]);
      std::memcpy(base + off, &h, sizeof(h));
    });
  }

  // Device fp16 -> host fp32 (exact).
  void StageOut(const TensorDesc& d, DLTensor* t) const {
    float* dst = reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
    const uint8_t* base = arena_.data() + (d.ddr_addr - ps_.header.weights_bytes);
    ForEachElement(d, [&](uint64_t host, uint64_t off) {
      uint16_t h;
      std::memcpy(&h, base + off, sizeof(h));
      dst[host] = HalfBitsToFloat(h);
    });
  }

  void Dma(const stream::Command& cmd) {
    const stream::DmaOperands op = DmaOperandsOf(cmd);
    const bool load = cmd.opcode() == stream::kDmaLoad;
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint64_t src = op.src_addr + r * op.src_stride;
      const uint64_t dst = op.dst_addr + r * op.dst_stride;
      if (load) {
        ReadDdr(src, sram_.data() + dst, op.row_bytes);
      } else {
        std::memcpy(Arena(dst), sram_.data() + src, op.row_bytes);
      }
    }
  }

  void Conv2D(const stream::Command& cmd) {
    const stream::Conv2DOperands op = Conv2DOperandsOf(cmd);
    uint8_t* s = sram_.data();
    Conv2DRef(op, s + op.in_addr, s + op.w_addr,
              op.bias_addr == stream::kNoBias ? nullptr : s + op.bias_addr, s + op.out_addr);
  }

 private:
  // Only the activation region [weights_bytes, ddr_bytes) is writable, and it is per call.
  uint8_t* Arena(uint64_t ddr_addr) {
    return arena_.data() + (ddr_addr - ps_.header.weights_bytes);
  }

  // A read may straddle the weight region (in the blob) and the activation arena.
  void ReadDdr(uint64_t addr, uint8_t* dst, uint64_t n) {
    const uint64_t wb = ps_.header.weights_bytes;
    if (addr < wb) {
      const uint64_t k = std::min(n, wb - addr);
      std::memcpy(dst, ps_.weights + addr, k);
      dst += k;
      addr += k;
      n -= k;
    }
    if (n > 0) std::memcpy(dst, Arena(addr), n);
  }

  const ParsedStream& ps_;
  std::vector<uint8_t> sram_;
  std::vector<uint8_t> arena_;
};

}  // namespace

Stats Execute(const ParsedStream& ps, const std::vector<const DLTensor*>& inputs,
              const std::vector<DLTensor*>& outputs) {
  if (inputs.size() != ps.inputs.size() || outputs.size() != ps.outputs.size()) {
    NPU_THROW(kShapeMismatch) << "got " << inputs.size() << " inputs and " << outputs.size()
                              << " outputs, the model was compiled for " << ps.inputs.size()
                              << " and " << ps.outputs.size();
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    CheckHostTensor("input", k, inputs[k], ps.tensors[ps.inputs[k]]);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    CheckHostTensor("output", k, outputs[k], ps.tensors[ps.outputs[k]]);
  }

  Machine machine(ps);
  for (size_t k = 0; k < inputs.size(); ++k) machine.StageIn(ps.tensors[ps.inputs[k]], inputs[k]);

  const NPUConfig& cfg = ps.config;
  CycleModel model(cfg);
  Stats st;
  st.records.reserve(ps.commands.size());
  for (size_t i = 0; i < ps.commands.size(); ++i) {
    const stream::Command& cmd = ps.commands[i];
    const CommandTiming t = model.OnCommand(cmd);
    CommandRecord rec{static_cast<uint32_t>(i), cmd.opcode(), t.engine, t.issue, t.start, t.end,
                      0, 0};
    if (cmd.opcode() == stream::kDmaLoad || cmd.opcode() == stream::kDmaStore) {
      machine.Dma(cmd);
      rec.bus_bytes = CycleModel::DmaBusBytes(cfg, DmaOperandsOf(cmd));
      (cmd.opcode() == stream::kDmaLoad ? st.ddr_read_bytes : st.ddr_write_bytes) += rec.bus_bytes;
    } else if (cmd.opcode() == stream::kConv2D) {
      machine.Conv2D(cmd);
      const stream::Conv2DOperands op = Conv2DOperandsOf(cmd);
      rec.macs = SatMul(SatMul(SatMul(op.out_h, op.out_w), op.oc),
                        SatMul(SatMul(op.kh, op.kw), op.in_c));
      st.macs += rec.macs;
    }
    st.records.push_back(rec);
  }
  st.commands = ps.commands.size();
  st.total_cycles = model.TotalCycles();
  st.mac_cycles = model.BusyCycles(kEngineMac);
  for (uint32_t ch = 0; ch < cfg.dma_channels; ++ch) st.dma_cycles.push_back(model.BusyCycles(ch));

  for (size_t k = 0; k < outputs.size(); ++k) {
    machine.StageOut(ps.tensors[ps.outputs[k]], outputs[k]);
  }
  return st;
}

}  // namespace tvm_npu
