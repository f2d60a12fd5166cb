/*!
 * \file executor.cc
 * \brief The reference NPU: DMA engines and the MAC array as plain memory copies and the
 *        kernels (the fast ones of src/kernels/fast where they exist, each bit-identical to its
 *        reference; the reference ones otherwise, and at TVM_NPU_KERNELS=ref), timed by the
 *        cycle model, plus host <-> device staging of I/O.
 */
#include "runtime/executor.h"

#include <tvm_npu/operand_rules.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "kernels/fast/add_fast.h"
#include "kernels/fast/conv2d_fast.h"
#include "kernels/fast/eltwise_fast.h"
#include "kernels/fast/unary_fast.h"
#include "kernels/ref/add_ref.h"
#include "kernels/ref/conv2d_ref.h"
#include "kernels/ref/eltwise_ref.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/group_norm_ref.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/pool_ref.h"
#include "kernels/ref/rope_ref.h"
#include "kernels/ref/sat_count.h"
#include "kernels/ref/softmax_causal_ref.h"
#include "runtime/cycle_model.h"
#include "runtime/npu_error.h"
#include "runtime/position.h"
#include "runtime/sram_provenance.h"

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
    NPU_THROW(kShapeMismatch) << kind << " " << k << " is on device type " << t->device.device_type
                              << "; pass a CPU tensor";
  }
  // The parser admits fp32, int8 or int16 host tensors only (fp32 also for an int8 / int16 device
  // tensor staged with quantization, format 1.3).
  const bool fp = d.host_dtype == stream::kFP32;
  const uint8_t code = fp ? kDLFloat : kDLInt;
  const uint8_t bits = fp ? 32 : static_cast<uint8_t>(8 * stream::DTypeBytes(d.host_dtype));
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    NPU_THROW(kShapeMismatch) << kind << " " << k << " has dtype code " << int(t->dtype.code)
                              << " bits " << int(t->dtype.bits) << "; the model was compiled "
                              << "for " << (fp ? "float" : "int") << int(bits);
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

// Visits the device view as runs of elements contiguous in the host tensor: f(host flat index, byte
// offset from ddr_addr, elements, device step in elements, view row n * H + h). NHWC and ROWS share
// the row-major order of the view: a row (n, h) of W*C elements is one run, step 1. NCHW transposes
// it: a run is the W pixels of one channel of a row, C elements apart on the device (the C runs of a
// row come one after another).
template <typename F>
void ForEachRun(const TensorDesc& d, F&& f) {
  const uint64_t N = d.view[0], H = d.view[1], W = d.view[2], C = d.view[3];
  if (d.host_layout == stream::kLayoutNCHW && C != 1 && H * W != 1) {
    const uint64_t elem = stream::DTypeBytes(d.dtype);
    for (uint64_t n = 0; n < N; ++n) {
      for (uint64_t h = 0; h < H; ++h) {
        for (uint64_t c = 0; c < C; ++c) {
          f(((n * C + c) * H + h) * W, (n * H + h) * d.row_stride + c * elem, W, C, n * H + h);
        }
      }
    }
    return;
  }
  for (uint64_t r = 0; r < N * H; ++r) f(r * W * C, r * d.row_stride, W * C, uint64_t{1}, r);
}

// Quantized staging in (docs/npu.md section 2, format 1.3), as TVM's llvm build of relax.quantize:
// q = clamp(round_half_even(fp32(x / s)) + z, lo, hi), a NaN giving hi. The quotient is clamped to
// [lo - z - 1, hi - z + 1] first, by compare-and-select as TVM's clamp (a NaN fails the compare and
// becomes the upper bound): the clamp of the rounded sum is then unchanged, and the quotient is
// small enough that adding and subtracting 1.5 * 2^23 rounds it to the nearest integer, ties to
// even (the default FP environment, as for every fp32 operation of the reference). `q` is written
// every `step` elements. Returns how many values the final clamp changed (NaN and +-inf included:
// the first clamp takes them one past the range): the input's saturated values (docs/npu.md
// section 2), counted where they are clamped so the count costs a compare.
template <typename T>
uint64_t QuantizeRun(const float* x, T* q, uint64_t n, uint64_t step, float scale, int32_t zp) {
  constexpr int32_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const float vlo = static_cast<float>(lo - zp - 1), vhi = static_cast<float>(hi - zp + 1);
  constexpr float kRound = 12582912.0f;
  uint64_t clamped = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v < vhi ? v : vhi;
    v = v > vlo ? v : vlo;
    const int32_t r = static_cast<int32_t>((v + kRound) - kRound) + zp;
    clamped += static_cast<uint64_t>(r < lo) + static_cast<uint64_t>(r > hi);
    q[i * step] = static_cast<T>(r < lo ? lo : (r > hi ? hi : r));
  }
  return clamped;
}

// Quantized staging out: x = fp32(q - z) * s, one rounding (q - z is exact in fp32); `q` is read
// every `step` elements.
template <typename T>
void DequantizeRun(const T* q, float* x, uint64_t n, uint64_t step, float scale, int32_t zp) {
  for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<float>(int32_t{q[i * step]} - zp) * scale;
}

class Machine {
 public:
  // `buffers` hold a zeroed SRAM of sram_bytes and a zeroed arena of ddr_bytes - weights_bytes.
  Machine(const ParsedStream& ps, ExecCache::Buffers* buffers, ExecCache* cache,
          const StateBinding* state, uint32_t position)
      : ps_(ps),
        sram_(buffers->sram),
        arena_(buffers->arena),
        weights_(cache != nullptr ? &cache->weights : nullptr),
        state_(state),
        position_(position) {}

  // Host fp32 -> device fp16 (RNE; a finite value beyond the fp16 range saturated to +-65504),
  // host fp32 -> device int8 / int16 quantized (format 1.3), or int8 / int16 unchanged (re-layout
  // only), at the descriptor's place in the activation region. Input k's counts go to `counts`.
  void StageIn(const TensorDesc& d, const DLTensor* t, size_t k, StagingCounts* counts) {
    const char* data = static_cast<const char*>(t->data) + t->byte_offset;
    const float* src = reinterpret_cast<const float*>(data);
    uint8_t* base = Arena(d.ddr_addr);
    const uint64_t elem = stream::DTypeBytes(d.dtype);
    const stream::QParams* q = QParamsOf(d);
    uint64_t& saturated = counts->saturated[k];
    std::vector<std::pair<uint64_t, uint64_t>>& rows = counts->clamped_rows[k];
    ForEachRun(d, [&](uint64_t host, uint64_t off, uint64_t n, uint64_t step, uint64_t row) {
      uint8_t* dst = base + off;
      uint64_t clamped = 0;
      if (d.dtype == stream::kFP16) {
        for (uint64_t i = 0; i < n; ++i) {
          const uint16_t h = SaturatingFloatToHalfBits(src[host + i], &saturated);
          std::memcpy(dst + i * step * sizeof(h), &h, sizeof(h));
        }
      } else if (q == nullptr && step == 1) {
        std::memcpy(dst, data + host * elem, n * elem);
      } else if (q == nullptr) {
        for (uint64_t i = 0; i < n; ++i) {
          std::memcpy(dst + i * step * elem, data + (host + i) * elem, elem);
        }
      } else if (d.dtype == stream::kInt8) {
        clamped = QuantizeRun(src + host, reinterpret_cast<int8_t*>(dst), n, step, q->scale,
                              q->zero_point);
      } else {
        clamped = QuantizeRun(src + host, reinterpret_cast<int16_t*>(dst), n, step, q->scale,
                              q->zero_point);
      }
      if (clamped == 0) return;
      counts->clamped[k] += clamped;
      if (!rows.empty() && rows.back().first == row) {
        rows.back().second += clamped;  // an NCHW row's next channel
      } else {
        rows.emplace_back(row, clamped);
      }
    });
  }

  // Device fp16 -> host fp32 (exact), device int8 / int16 -> host fp32 dequantized (format 1.3), or
  // int8 / int16 unchanged.
  void StageOut(const TensorDesc& d, DLTensor* t) const {
    char* data = static_cast<char*>(t->data) + t->byte_offset;
    float* dst = reinterpret_cast<float*>(data);
    const uint8_t* base = arena_.data() + (d.ddr_addr - ps_.header.weights_bytes);
    const uint64_t elem = stream::DTypeBytes(d.dtype);
    const stream::QParams* q = QParamsOf(d);
    ForEachRun(d, [&](uint64_t host, uint64_t off, uint64_t n, uint64_t step, uint64_t) {
      const uint8_t* src = base + off;
      if (d.dtype == stream::kFP16) {
        for (uint64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, src + i * step * sizeof(h), sizeof(h));
          dst[host + i] = HalfBitsToFloat(h);
        }
      } else if (q == nullptr && step == 1) {
        std::memcpy(data + host * elem, src, n * elem);
      } else if (q == nullptr) {
        for (uint64_t i = 0; i < n; ++i) {
          std::memcpy(data + (host + i) * elem, src + i * step * elem, elem);
        }
      } else if (d.dtype == stream::kInt8) {
        DequantizeRun(reinterpret_cast<const int8_t*>(src), dst + host, n, step, q->scale,
                      q->zero_point);
      } else {
        DequantizeRun(reinterpret_cast<const int16_t*>(src), dst + host, n, step, q->scale,
                      q->zero_point);
      }
    });
  }

  void Dma(const stream::Command& cmd) {
    const stream::DmaOperands op = OperandsOf<stream::DmaOperands>(cmd);
    const bool load = cmd.opcode() == stream::kDmaLoad;
    for (uint64_t r = 0; r < op.rows; ++r) {
      const uint64_t src = op.src_addr + r * op.src_stride;
      const uint64_t dst = op.dst_addr + r * op.dst_stride;
      if (load) {
        ReadDdr(src, sram_.data() + dst, op.row_bytes);
      } else {
        std::memcpy(Writable(dst), sram_.data() + src, op.row_bytes);
      }
    }
  }

  void Conv2D(const stream::Command& cmd, size_t index) {
    const stream::Conv2DOperands op = OperandsOf<stream::Conv2DOperands>(cmd);
    uint8_t* s = sram_.data();
    fast::Conv2D(op, s + op.in_addr, s + op.w_addr,
                 op.bias_addr == stream::kNoBias ? nullptr : s + op.bias_addr, s + op.out_addr,
                 ps_.config.alignment, fast::ActiveLevel(), weights_, index);
  }

  // ADD and ELTWISE: `kernel` reads a and b and writes out, all three in SRAM.
  template <typename Op>
  void Binary(const stream::Command& cmd,
              void (*kernel)(const Op&, const uint8_t*, const uint8_t*, uint8_t*, fast::Level)) {
    const Op op = OperandsOf<Op>(cmd);
    uint8_t* s = sram_.data();
    kernel(op, s + op.a_addr, s + op.b_addr, s + op.out_addr, fast::ActiveLevel());
  }

  void Pool(const stream::Command& cmd) {
    const stream::PoolOperands op = OperandsOf<stream::PoolOperands>(cmd);
    uint8_t* s = sram_.data();
    PoolRef(op, s + op.in_addr, s + op.out_addr);
  }

  void Matmul(const stream::Command& cmd) {
    // The fast level calls the reference kernel for now (format 1.4's first slice).
    MatmulRef(OperandsOf<stream::MatmulOperands>(cmd), sram_.data());
  }

  // No fast kernel yet: the fast level runs the reference ROPE too.
  void Rope(const stream::Command& cmd) {
    RopeRef(OperandsOf<stream::RopeOperands>(cmd), sram_.data());
  }

  void Softmax(const stream::Command& cmd) {
    const stream::SoftmaxOperands op = OperandsOf<stream::SoftmaxOperands>(cmd);
    if (op.pos_mode != 0) {  // format 1.4: causal at the position (cmd is resolved)
      SoftmaxCausalRef(op, position_, sram_.data() + op.in_addr, sram_.data() + op.out_addr);
      return;
    }
    SoftmaxRef(op, sram_.data() + op.in_addr, op.mask_rows ? sram_.data() + op.mask_addr : nullptr,
               sram_.data() + op.out_addr);
  }

  // No fast kernel yet: the fast level runs the reference NORM too.
  void Norm(const stream::Command& cmd) {
    const stream::NormOperands op = OperandsOf<stream::NormOperands>(cmd);
    uint8_t* s = sram_.data();
    NormRef(op, s + op.in_addr, op.gamma_addr == stream::kNoParam ? nullptr : s + op.gamma_addr,
            op.beta_addr == stream::kNoParam ? nullptr : s + op.beta_addr, s + op.out_addr);
  }

  // Format 1.7's GroupNorm: the reference kernels at every level (no fast kernel yet).
  void GnStats(const stream::Command& cmd) {
    const stream::GnStatsOperands op = OperandsOf<stream::GnStatsOperands>(cmd);
    GnStatsRef(op, sram_.data() + op.in_addr, sram_.data() + op.stats_addr);
  }

  void GnApply(const stream::Command& cmd) {
    const stream::GnApplyOperands op = OperandsOf<stream::GnApplyOperands>(cmd);
    uint8_t* s = sram_.data();
    GnApplyRef(op, s + op.in_addr, s + op.stats_addr,
               op.gamma_addr == stream::kNoParam ? nullptr : s + op.gamma_addr,
               op.beta_addr == stream::kNoParam ? nullptr : s + op.beta_addr, s + op.out_addr);
  }

  void Unary(const stream::Command& cmd) {
    const stream::UnaryOperands op = OperandsOf<stream::UnaryOperands>(cmd);
    uint8_t* s = sram_.data();
    fast::Unary(op, s + op.in_addr, op.dtype == stream::kInt8 ? s + op.table_addr : nullptr,
                s + op.out_addr, fast::ActiveLevel());
  }

 private:
  // The scale and zero point of a descriptor staged with quantization, else nullptr. `d` is an
  // element of ps_.tensors (Execute passes them), so its index there is its table entry's.
  const stream::QParams* QParamsOf(const TensorDesc& d) const {
    if (ps_.qparams.empty() || !IsQuantized(d)) return nullptr;
    return &ps_.qparams[static_cast<size_t>(&d - ps_.tensors.data())];
  }

  // Only the activation region [weights_bytes, ddr_bytes) is writable, and it is per call.
  uint8_t* Arena(uint64_t ddr_addr) {
    return arena_.data() + (ddr_addr - ps_.header.weights_bytes);
  }

  // A DMA_STORE's destination: the activation arena, or a state tensor (format 1.4), whose range
  // the parser checked to lie inside one of them.
  uint8_t* Writable(uint64_t ddr_addr) {
    if (ddr_addr < ps_.header.ddr_bytes) return Arena(ddr_addr);
    for (const StateView& v : state_->views()) {
      if (ddr_addr >= v.begin && ddr_addr < v.end) return v.data + (ddr_addr - v.begin);
    }
    return nullptr;  // unreachable: CheckStateDma
  }

  // A read may straddle the weight region (in the blob) and the activation arena; one from the
  // state region lies in one state tensor.
  void ReadDdr(uint64_t addr, uint8_t* dst, uint64_t n) {
    if (addr >= ps_.header.ddr_bytes) {
      std::memcpy(dst, Writable(addr), n);
      return;
    }
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
  std::vector<uint8_t>& sram_;
  std::vector<uint8_t>& arena_;
  fast::WeightCache* weights_;
  const StateBinding* state_;
  uint32_t position_;
};

// Nominal MACs: one per weight tap and output element; depthwise reads one channel per output.
uint64_t Conv2DMacs(const stream::Conv2DOperands& op) {
  const uint64_t per_output = SatMul(SatMul(op.kh, op.kw), stream::IsDepthwise(op) ? 1 : op.in_c);
  return SatMul(SatMul(SatMul(op.out_h, op.out_w), op.oc), per_output);
}

}  // namespace

ExecCache::ExecCache(const ParsedStream& ps)
    : sram_bytes_(ps.config.sram_bytes),
      arena_bytes_(ps.header.ddr_bytes - ps.header.weights_bytes),
      sram_dirty_(0),
      arena_dirty_(0) {
  const uint64_t wb = ps.header.weights_bytes;
  for (const stream::Command& cmd : ps.widest) {  // the widest footprints of any position
    sram_dirty_ = std::max(sram_dirty_, SramWrites(cmd, sram_bytes_).end);
    if (cmd.opcode() == stream::kDmaStore &&
        OperandsOf<stream::DmaOperands>(cmd).dst_addr < ps.header.ddr_bytes) {
      const auto op = OperandsOf<stream::DmaOperands>(cmd);
      arena_dirty_ = std::max(
          arena_dirty_, op.dst_addr - wb + SatMul(op.rows, std::max(op.dst_stride, op.row_bytes)));
    }
  }
  for (uint32_t k : ps.inputs) {
    const TensorDesc& d = ps.tensors[k];
    if (d.role == stream::kRolePosition) continue;  // a register, never staged
    arena_dirty_ = std::max(
        arena_dirty_, d.ddr_addr - wb + SatMul(uint64_t{d.view[0]} * d.view[1], d.row_stride));
  }
  for (uint32_t k : ps.sram_state_tensors) {  // format 1.5: copied in before every call
    const TensorDesc& d = ps.tensors[k];
    sram_dirty_ = std::max(sram_dirty_, d.ddr_addr + SatMul(uint64_t{d.view[1]}, d.row_stride));
  }
  sram_dirty_ = std::min(sram_dirty_, sram_bytes_);
  arena_dirty_ = std::min(arena_dirty_, arena_bytes_);
  weights.SetConstantKeys(ConstantWeightCommands(ps));
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1);
  resident_ = ResidentLoads(ps);
  retained_ = std::make_shared<const std::vector<ByteRange>>(LoadedBytes(ps, resident_));
}

namespace {

// Zeroed buffers shared by every module of the process, by (SRAM bytes, arena bytes). Modules hold no
// buffers between calls: TVM 0.27 keeps a loaded library's modules alive after the executable is
// dropped, so buffers kept per module would pin megabytes per load (docs/reliability.md). Leaked on
// purpose: modules may still release into it during static destruction at exit.
struct BufferPool {
  std::mutex mutex;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::unique_ptr<ExecCache::Buffers>>> free;
};
BufferPool& Pool() {
  static BufferPool* pool = new BufferPool();
  return *pool;
}
// Idle buffers kept per size: as many as calls that commonly run at once.
constexpr size_t kIdleBuffersPerSize = 4;

}  // namespace

std::unique_ptr<ExecCache::Buffers> ExecCache::Acquire() {
  std::unique_ptr<Buffers> b;
  {
    BufferPool& pool = Pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    auto it = pool.free.find({sram_bytes_, arena_bytes_});
    if (it != pool.free.end() && !it->second.empty()) {
      // Preferably buffers this stream left: they hold its resident loads already.
      auto& idle = it->second;
      auto mine =
          std::find_if(idle.begin(), idle.end(), [&](const auto& x) { return x->owner == id_; });
      if (mine == idle.end()) mine = idle.end() - 1;
      b = std::move(*mine);
      idle.erase(mine);
    }
  }
  if (b == nullptr) {
    b = std::make_unique<Buffers>();
    b->sram.assign(sram_bytes_, 0);
    b->arena.assign(arena_bytes_, 0);
  } else if (b->owner != id_ && b->retained != nullptr) {
    for (const ByteRange& r : *b->retained)
      std::memset(b->sram.data() + r.begin, 0, r.end - r.begin);
    b->owner = 0;
    b->retained.reset();
  }
  return b;
}

void ExecCache::Release(std::unique_ptr<Buffers> b, bool completed) {
  // Back to all zeros (only the bytes this stream can write), as every pooled buffer is, but for
  // the resident loads' bytes after a call that ran to the end.
  // memset with a null pointer is undefined even for 0 bytes (an empty arena has no data()).
  uint64_t from = 0;
  if (completed) {
    for (const ByteRange& r : *retained_) {
      if (r.begin > from)
        std::memset(b->sram.data() + from, 0, std::min(r.begin, sram_dirty_) - from);
      from = std::max(from, r.end);
      if (from >= sram_dirty_) break;
    }
    b->owner = id_;
    b->retained = retained_;
  } else {
    b->owner = 0;
    b->retained.reset();
  }
  if (sram_dirty_ > from) std::memset(b->sram.data() + from, 0, sram_dirty_ - from);
  if (arena_dirty_ != 0) std::memset(b->arena.data(), 0, arena_dirty_);
  BufferPool& pool = Pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  auto& idle = pool.free[{sram_bytes_, arena_bytes_}];
  if (idle.size() < kIdleBuffersPerSize) idle.push_back(std::move(b));
}

Stats TimeStream(const ParsedStream& ps, uint32_t position) {
  const NPUConfig& cfg = ps.config;
  CycleModel model(cfg);
  Stats st;
  st.records.reserve(ps.commands.size());
  for (size_t i = 0; i < ps.commands.size(); ++i) {
    // Format 1.4: a pos_mode command is timed with its effective operands (section 5).
    const stream::Command cmd = Resolve(ps.commands[i], position);
    const CommandTiming t = model.OnCommand(cmd);
    CommandRecord rec{
        static_cast<uint32_t>(i), cmd.opcode(), t.engine, t.issue, t.start, t.end, 0, 0};
    if (cmd.opcode() == stream::kDmaLoad || cmd.opcode() == stream::kDmaStore) {
      rec.bus_bytes = CycleModel::DmaBusBytes(cfg, OperandsOf<stream::DmaOperands>(cmd));
      (cmd.opcode() == stream::kDmaLoad ? st.ddr_read_bytes : st.ddr_write_bytes) += rec.bus_bytes;
    } else if (cmd.opcode() == stream::kConv2D) {
      rec.macs = Conv2DMacs(OperandsOf<stream::Conv2DOperands>(cmd));
      st.macs += rec.macs;  // vector ops do no MACs
    } else if (cmd.opcode() == stream::kMatmul) {
      const auto op = OperandsOf<stream::MatmulOperands>(cmd);
      rec.macs = SatMul(SatMul(SatMul(op.batch, op.m), op.n), op.k);
      st.macs += rec.macs;
    }
    st.records.push_back(rec);
  }
  st.commands = ps.commands.size();
  st.total_cycles = model.TotalCycles();
  st.mac_cycles = model.BusyCycles(kEngineMac);
  st.vector_cycles = model.BusyCycles(kEngineVector);
  for (uint32_t ch = 0; ch < cfg.dma_channels; ++ch) st.dma_cycles.push_back(model.BusyCycles(ch));
  return st;
}

StagingCounts Execute(const ParsedStream& ps, const std::vector<const DLTensor*>& inputs,
                      const std::vector<DLTensor*>& outputs, ExecCache* cache,
                      const StateBinding* state, CommandCounts* counts) {
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
  // Format 1.4: out of range is refused here, before anything is staged or run (state unchanged).
  const uint32_t position = CallPosition(ps, inputs);
  const StateBinding no_state(ParsedStream{});
  if (state == nullptr) state = &no_state;
  if (state->empty() && !(ps.state_tensors.empty() && ps.sram_state_tensors.empty())) {
    NPU_THROW(kBadStream) << "a stream with state tensors runs on a module that binds them";
  }

  // Buffers go back to the cache (cleared) however the call ends, also by an exception.
  std::unique_ptr<ExecCache::Buffers> own;
  if (cache != nullptr) {
    own = cache->Acquire();
  } else {
    own = std::make_unique<ExecCache::Buffers>();
    own->sram.assign(ps.config.sram_bytes, 0);
    own->arena.assign(ps.header.ddr_bytes - ps.header.weights_bytes, 0);
  }
  struct Return {
    ExecCache* cache;
    std::unique_ptr<ExecCache::Buffers>* buffers;
    bool completed = false;
    ~Return() {
      if (cache != nullptr) cache->Release(std::move(*buffers), completed);
    }
  } give_back{cache, &own};
  // This stream's resident loads are still in place from its previous call on these buffers.
  const std::vector<bool>* skip =
      cache != nullptr && own->owner == cache->id() ? &cache->resident_loads() : nullptr;
  Machine machine(ps, own.get(), cache, state, position);
  // Format 1.5: the SRAM state area holds what the space's last call left there. The emulator's
  // SRAM is per call, so the kept bytes come in before command 0 and go back after the last one
  // (a call that fails midway leaves them as they were).
  for (const StateView& v : state->sram_views()) {
    std::memcpy(own->sram.data() + v.begin, v.data, v.end - v.begin);
  }
  StagingCounts staged(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (static_cast<int64_t>(k) == ps.position_input) continue;  // read into the register
    machine.StageIn(ps.tensors[ps.inputs[k]], inputs[k], k, &staged);
  }

  // One after another in program order; when they would overlap on the hardware is the cycle
  // model's business (TimeStream, once per stream).
  if (counts != nullptr) counts->Resize(ps.commands.size());
  std::atomic<uint64_t> saturated_results{0};
  for (size_t i = 0; i < ps.commands.size(); ++i) {
    const stream::Command cmd = Resolve(ps.commands[i], position);  // static as it was, or 1.4's
    saturated_results.store(0, std::memory_order_relaxed);
    const ref::SatScope count(counts != nullptr ? &saturated_results : nullptr);
    switch (cmd.opcode()) {
      case stream::kDmaLoad:
        if (skip == nullptr || !(*skip)[i]) machine.Dma(cmd);
        break;
      case stream::kDmaStore: machine.Dma(cmd); break;
      case stream::kConv2D: machine.Conv2D(cmd, i); break;
      case stream::kAdd: machine.Binary(cmd, fast::Add); break;
      case stream::kPool: machine.Pool(cmd); break;
      case stream::kEltwise: machine.Binary(cmd, fast::Eltwise); break;
      case stream::kUnary: machine.Unary(cmd); break;
      case stream::kSoftmax: machine.Softmax(cmd); break;
      case stream::kNorm: machine.Norm(cmd); break;
      case stream::kGnStats: machine.GnStats(cmd); break;
      case stream::kGnApply: machine.GnApply(cmd); break;
      case stream::kMatmul: machine.Matmul(cmd); break;
      case stream::kRope: machine.Rope(cmd); break;
      default: break;  // END
    }
    if (counts != nullptr) {
      CountOutputs(cmd, own->sram.data(), i, counts);
      counts->saturated[i] = saturated_results.load(std::memory_order_relaxed);
    }
  }
  for (const StateView& v : state->sram_views()) {
    std::memcpy(v.data, own->sram.data() + v.begin, v.end - v.begin);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    machine.StageOut(ps.tensors[ps.outputs[k]], outputs[k]);
  }
  give_back.completed = true;
  return staged;
}

}  // namespace tvm_npu
