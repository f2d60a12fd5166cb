// Generated from python/tvm_npu/contract/spec.py by python -m tvm_npu.contract.generate.
// Do not edit: change the spec and regenerate (tests/contract/ checks this file).
/*!
 * \file tvm_npu/stream_format.h
 * \brief The command stream's on-blob layout, version 1.8 (docs/npu.md section 6). A runtime reads
 *        every older minor: a minor only appends (operands whose value 0 keeps the older meaning,
 *        dtypes, opcodes). 1.1: the pixel strides of CONV2D and POOL; the opcodes ELTWISE, UNARY
 *        and SOFTMAX; 1.2: the int16 dtype; ELTWISE's per-operand dtypes; 1.3: quantized staging
 *        (host fp32 <-> device int8 / int16) and the quantization table; 1.4: UNARY's silu (5) and
 *        gelu_tanh (6); SOFTMAX's scale and additive mask (attention); the opcodes NORM (LayerNorm
 *        and RMSNorm over a row), MATMUL (batched activation x activation, grouped B) and ROPE
 *        (rotary position embedding, rotate-half form); the DDR state region (state_bytes,
 *        state_space; tensor roles state and position; host dtype int64 of a position) and the
 *        operand pos_mode of DMA_LOAD, DMA_STORE, SOFTMAX and MATMUL (a KV cache kept across calls,
 *        addressed at a run-time position); CONV2D's w_dtype (fp16 activations with int8 weights
 *        and one fp32 scale per output channel; group-wise int4 / uint4 weights with fp16 scales
 *        under fp16 or int8 activations); MATMUL's b_dtype and b_scale_addr (an int8 B, e.g. an
 *        int8 KV cache, with one fp32 scale per B batch); MATMUL's int8 form (a_zp, b_zp, out_zp,
 *        scale: two int8 activations, requantized per tensor); SOFTMAX's and NORM's int8 forms
 *        (in_zp, in_scale, out_zp, out_scale); 1.5: the SRAM state area (header word 3,
 *        sram_state_bytes, formerly flags: the top of SRAM kept across calls and shared by state
 *        space); the tensor role sram_state (a state tensor in it); bit 2 of a DMA's pos_mode
 *        (sram_addr += p * sram_stride: new KV rows written into an SRAM cache at the run-time
 *        position); 1.6: SOFTMAX's window (a causal SOFTMAX over the last `window` cache rows of
 *        each query: sliding-window attention with its cache on the NPU); 1.7: the opcodes GN_STATS
 *        (a tile's per-group mean and M2 merged into an SRAM statistics buffer, Chan et al.'s
 *        formula) and GN_APPLY (a tile normalized with finished statistics, per-channel gamma /
 *        beta, an optional fused SiLU): GroupNorm over NHWC maps tiled in SRAM; 1.8: MATMUL's head
 *        slices: its a_addr, b_addr and out_addr and its batch strides need only be multiples of
 *        one SRAM beat (16 bytes; row strides still `alignment`), so a command can address one
 *        attention head's columns of a [S, H * D] tensor; batches may interleave within a row (a
 *        batch stride below one block, all batches' columns inside one row stride).
 *
 * Every structure is a run of little-endian u32 words (the header's version is two u16), so a
 * little-endian host reads one with a memcpy. The structs carry no behaviour: what operand values
 * mean beyond their layout is in tvm_npu/operand_rules.h, parsing and validation in
 * src/runtime/stream_parser.cc.
 */
#ifndef TVM_NPU_STREAM_FORMAT_H_
#define TVM_NPU_STREAM_FORMAT_H_

#include <cstdint>

namespace tvm_npu {
namespace stream {

constexpr uint32_t kMagic = 0x5355504E;  // bytes "NPUS"
constexpr uint16_t kVersionMajor = 1;
constexpr uint16_t kVersionMinor = 8;
// 1.1: the pixel strides of CONV2D and POOL; the opcodes ELTWISE, UNARY and SOFTMAX.
constexpr uint16_t kVectorOpsMinor = 1;
// 1.2: the int16 dtype; ELTWISE's per-operand dtypes.
constexpr uint16_t kInt16Minor = 2;
// 1.3: quantized staging (host fp32 <-> device int8 / int16) and the quantization table.
constexpr uint16_t kQuantIoMinor = 3;
// 1.4: UNARY's silu (5) and gelu_tanh (6); SOFTMAX's scale and additive mask (attention); the
// opcodes NORM (LayerNorm and RMSNorm over a row), MATMUL (batched activation x activation, grouped
// B) and ROPE (rotary position embedding, rotate-half form); the DDR state region (state_bytes,
// state_space; tensor roles state and position; host dtype int64 of a position) and the operand
// pos_mode of DMA_LOAD, DMA_STORE, SOFTMAX and MATMUL (a KV cache kept across calls, addressed at a
// run-time position); CONV2D's w_dtype (fp16 activations with int8 weights and one fp32 scale per
// output channel; group-wise int4 / uint4 weights with fp16 scales under fp16 or int8 activations);
// MATMUL's b_dtype and b_scale_addr (an int8 B, e.g. an int8 KV cache, with one fp32 scale per B
// batch); MATMUL's int8 form (a_zp, b_zp, out_zp, scale: two int8 activations, requantized per
// tensor); SOFTMAX's and NORM's int8 forms (in_zp, in_scale, out_zp, out_scale).
constexpr uint16_t kLlmMinor = 4;
// 1.5: the SRAM state area (header word 3, sram_state_bytes, formerly flags: the top of SRAM kept
// across calls and shared by state space); the tensor role sram_state (a state tensor in it); bit 2
// of a DMA's pos_mode (sram_addr += p * sram_stride: new KV rows written into an SRAM cache at the
// run-time position).
constexpr uint16_t kSramStateMinor = 5;
// 1.6: SOFTMAX's window (a causal SOFTMAX over the last `window` cache rows of each query:
// sliding-window attention with its cache on the NPU).
constexpr uint16_t kBandMinor = 6;
// 1.7: the opcodes GN_STATS (a tile's per-group mean and M2 merged into an SRAM statistics buffer,
// Chan et al.'s formula) and GN_APPLY (a tile normalized with finished statistics, per-channel
// gamma / beta, an optional fused SiLU): GroupNorm over NHWC maps tiled in SRAM.
constexpr uint16_t kGroupNormMinor = 7;
// 1.8: MATMUL's head slices: its a_addr, b_addr and out_addr and its batch strides need only be
// multiples of one SRAM beat (16 bytes; row strides still `alignment`), so a command can address
// one attention head's columns of a [S, H * D] tensor; batches may interleave within a row (a batch
// stride below one block, all batches' columns inside one row stride).
constexpr uint16_t kHeadSlicesMinor = 8;

constexpr uint32_t kHeaderBytes = 64;
constexpr uint32_t kConfigOffset = 64;
constexpr uint32_t kConfigBytes = 64;
constexpr uint32_t kTensorTableOffset = 128;
constexpr uint32_t kTensorBytes = 64;
constexpr uint32_t kQParamsBytes = 8;
constexpr uint32_t kCommandBytes = 128;
constexpr uint32_t kCommandWords = 32;
// Alignment of the weight region's offset in the blob.
constexpr uint32_t kWeightsAlignment = 128;
// CONV2D and POOL input / output addresses, and (format 1.8) MATMUL's addresses and batch strides,
// need only be multiples of one SRAM beat, so a command can read or write a channel slice of a
// tensor or one attention head of it (docs/npu.md section 3).
constexpr uint32_t kSliceAlignment = 16;
// An int8 UNARY's table: one int8 output per input code, indexed by x + 128.
constexpr uint32_t kUnaryTableBytes = 256;
// UNARY table_addr: no table (fp16).
constexpr uint32_t kNoTable = 0xFFFFFFFF;
// CONV2D bias_addr: no bias (fp16 only).
constexpr uint32_t kNoBias = 0xFFFFFFFF;
// NORM gamma_addr / beta_addr: no scale (multiply by 1) / no shift (add 0).
constexpr uint32_t kNoParam = 0xFFFFFFFF;
// Tensor descriptor io_index of a weight or bias.
constexpr uint32_t kNoIoIndex = 0xFFFFFFFF;

enum Opcode : uint32_t {
  kEnd = 0x00,
  kDmaLoad = 0x01,
  kDmaStore = 0x02,
  kConv2D = 0x10,
  kAdd = 0x20,
  kPool = 0x21,
  kEltwise = 0x22,
  kUnary = 0x23,
  kSoftmax = 0x24,
  kNorm = 0x28,
  kGnStats = 0x29,
  kGnApply = 0x2A,
  kRope = 0x2C,
  kMatmul = 0x30,
};

/*! \brief The opcode's name as written in docs/npu.md section 4, or "unknown". */
inline const char* OpcodeName(uint32_t opcode) {
  switch (opcode) {
    case kEnd: return "END";
    case kDmaLoad: return "DMA_LOAD";
    case kDmaStore: return "DMA_STORE";
    case kConv2D: return "CONV2D";
    case kAdd: return "ADD";
    case kPool: return "POOL";
    case kEltwise: return "ELTWISE";
    case kUnary: return "UNARY";
    case kSoftmax: return "SOFTMAX";
    case kNorm: return "NORM";
    case kGnStats: return "GN_STATS";
    case kGnApply: return "GN_APPLY";
    case kRope: return "ROPE";
    case kMatmul: return "MATMUL";
    default: return "unknown";
  }
}

enum DType : uint32_t {
  kFP16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kFP32 = 4,
  kInt16 = 5,  // format 1.2: ELTWISE operands and results, region inputs and outputs
  kInt64 = 6,  // format 1.4: the host dtype of a position input only
  kInt4 = 7,   // format 1.4: CONV2D w_dtype only (bits 0-7; the group size in bits 8-15)
  kUInt4 = 8,  // format 1.4: CONV2D w_dtype only, with a uint4 zero point per group
};

enum Role : uint32_t {
  kRoleInput = 1,
  kRoleOutput = 2,
  kRoleWeight = 3,
  kRoleBias = 4,
  kRoleState = 5,      // format 1.4: in the state region, kept across calls; io_index = slot
  kRolePosition = 6,   // format 1.4: the input read into the position register
  kRoleSramState = 7,  // format 1.5: in the SRAM state area; ddr_addr = its SRAM address
};

enum HostLayout : uint32_t {
  kLayoutNHWC = 0,
  kLayoutNCHW = 1,
  kLayoutRows = 2,  // row-major [..., K] viewed as [1, prod(...), 1, K]
};

enum Activation : uint32_t {
  kActNone = 0,
  kActRelu = 1,
  kActClip = 2,
};

enum PoolKind : uint32_t {
  kPoolAvg = 0,
  kPoolMax = 1,
};

enum EltwiseKind : uint32_t {
  kEltAdd = 0,
  kEltSub = 1,
  kEltMul = 2,
  kEltMax = 3,
  kEltMin = 4,
};

/*! \brief What ELTWISE's b is: same shape as a, one row of `channels` elements, or one element. */
enum BMode : uint32_t {
  kBSame = 0,
  kBChannel = 1,
  kBScalar = 2,
};

enum UnaryFunc : uint32_t {
  kUnarySigmoid = 0,
  kUnaryTanh = 1,
  kUnaryHardSwish = 2,
  kUnaryGelu = 3,
  kUnaryLeakyRelu = 4,
  kUnarySilu = 5,
  kUnaryGeluTanh = 6,
};

enum NormKind : uint32_t {
  kNormLayer = 0,
  kNormRms = 1,
};

/*!
 * \brief Wait fields of word 0 (docs/npu.md section 5): one 4-bit field per engine, engine e at
 *        bits 8 + 4 * e. A value k in 0..14 holds the command until at most k commands are
 *        outstanding on that engine; kNoWait means no wait. Engines are numbered DMA0, DMA1, MAC,
 *        VECTOR.
 */
constexpr uint32_t kNumWaitFields = 4;
constexpr uint32_t kWaitShift = 8;
constexpr uint32_t kWaitFieldBits = 4;
constexpr uint32_t kNoWait = 15;

struct Header {
  uint32_t magic;
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t header_bytes;
  uint32_t sram_state_bytes;  // format 1.5: the SRAM state area at the top of SRAM; 0 = none
  uint32_t num_tensors;
  uint32_t num_commands;
  uint32_t weights_offset;
  uint32_t weights_bytes;
  uint32_t ddr_bytes;
  uint32_t sram_bytes_used;
  uint32_t num_inputs;
  uint32_t num_outputs;
  uint32_t crc32;
  uint32_t qparams_offset;  // format 1.3: the quantization table's offset in the blob, 0 = none
  uint32_t state_bytes;     // format 1.4: state region bytes after ddr_bytes; 0 = none
  uint32_t state_space;     // format 1.4: 0 = own state; k = shared by slot
};

/*!
 * \brief An entry of the quantization table (format 1.3): one per tensor descriptor, in order; two
 *        zero words for a tensor that is not staged with quantization.
 */
struct QParams {
  float scale;
  int32_t zero_point;
};

struct TensorDesc {
  uint32_t role;
  uint32_t io_index;
  uint32_t dtype;
  uint32_t host_dtype;
  uint32_t host_layout;
  uint32_t host_rank;
  uint32_t host_shape[4];
  uint32_t view[4];  // device [N, H, W, C]
  uint32_t ddr_addr;
  uint32_t row_stride;
};

/*!
 * \brief A raw command: word 0 = opcode | wait fields << 8 (bits 24-31 zero), words 1..31 operands.
 */
struct Command {
  uint32_t words[kCommandWords];

  uint32_t opcode() const { return words[0] & 0xFF; }
  /*! \brief The wait field for engine `e`: 0..14 outstanding commands, or kNoWait. */
  uint32_t wait(uint32_t e) const { return (words[0] >> (kWaitShift + kWaitFieldBits * e)) & 0xF; }
};

/*!
 * \brief Operands of DMA_LOAD and DMA_STORE, words 1..8.
 *
 * Both list channel, source, destination, rows, row_bytes, source stride, destination stride: DDR
 * to SRAM for DMA_LOAD, SRAM to DDR for DMA_STORE.
 * Format 1.5: pos_mode bit 2 moves the SRAM side, sram_addr += p * sram_stride.
 */
struct DmaOperands {
  uint32_t channel;
  uint32_t src_addr;
  uint32_t dst_addr;
  uint32_t rows;
  uint32_t row_bytes;
  uint32_t src_stride;
  uint32_t dst_stride;
  uint32_t pos_mode;  // format 1.4: bit 0 ddr_addr += p * ddr_stride, bit 1 rows += p
};
constexpr uint32_t kDmaOperandWords = 8;
// A 1.0 stream has 7 DMA_LOAD operands.
constexpr uint32_t kDmaOperandWords10 = 7;
// A 1.1 stream has 7 DMA_LOAD operands.
constexpr uint32_t kDmaOperandWords11 = 7;
// A 1.2 stream has 7 DMA_LOAD operands.
constexpr uint32_t kDmaOperandWords12 = 7;
// A 1.3 stream has 7 DMA_LOAD operands.
constexpr uint32_t kDmaOperandWords13 = 7;

/*!
 * \brief Operands of CONV2D, words 1..31: addresses are SRAM offsets, strides are bytes.
 *
 * fp16: clip_lo / clip_hi are fp32 bits, in_zp = out_zp = 0, bias_addr may be kNoBias.
 * int8: clip_lo / clip_hi are the int32 clamp bounds, zero points int32 (two's complement), act 0,
 * bias_addr is the requantization block. groups is 1, or in_c (= oc) for depthwise.
 * fp16 with w_dtype int8 (format 1.4): the weights are int8 codes, bias_addr is the dequantization
 * block: two rows of OC fp32, bias then the weights' scale, laid out as the requantization block.
 * w_dtype int4 (7) / uint4 (8) | g << 8, g in {32, 64, 128} (format 1.4): dense only (kh = kw = 1,
 * groups 1, in_c % g == 0), rows of in_c / 2 bytes, low nibble first; bias_addr is the int4
 * dequantization block: bias row, requantization row (int8 only), fp16 scales [in_c / g][oc], then
 * (uint4) zero points [in_c / g][ceil(oc / 2)] from the next alignment boundary.
 */
struct Conv2DOperands {
  uint32_t dtype;
  uint32_t in_addr;
  uint32_t in_h;
  uint32_t in_w;
  uint32_t in_c;
  uint32_t in_stride;
  uint32_t w_addr;
  uint32_t w_stride;
  uint32_t kh;
  uint32_t kw;
  uint32_t oc;
  uint32_t bias_addr;
  uint32_t out_addr;
  uint32_t out_h;
  uint32_t out_w;
  uint32_t out_stride;
  uint32_t stride_h;
  uint32_t stride_w;
  uint32_t dil_h;
  uint32_t dil_w;
  uint32_t pad_top;
  uint32_t pad_left;
  uint32_t act;
  uint32_t clip_lo;
  uint32_t clip_hi;
  uint32_t groups;
  uint32_t in_zp;
  uint32_t out_zp;
  uint32_t in_pstride;   // bytes between input pixels; 0: packed (in_c elements)
  uint32_t out_pstride;  // bytes between output pixels; 0: packed (oc elements)
  uint32_t w_dtype;      // format 1.4: weights' dtype, 0 = `dtype`; int8; int4 / uint4 | g << 8
};
constexpr uint32_t kConv2DOperandWords = 31;
// A 1.0 stream has 28 CONV2D operands.
constexpr uint32_t kConv2DOperandWords10 = 28;
// A 1.1 stream has 30 CONV2D operands.
constexpr uint32_t kConv2DOperandWords11 = 30;
// A 1.2 stream has 30 CONV2D operands.
constexpr uint32_t kConv2DOperandWords12 = 30;
// A 1.3 stream has 30 CONV2D operands.
constexpr uint32_t kConv2DOperandWords13 = 30;

/*! \brief Operands of ADD, words 1..18: out = a + b over `rows` rows of `row_elems` elements. */
struct AddOperands {
  uint32_t dtype;
  uint32_t a_addr;
  uint32_t a_stride;
  uint32_t b_addr;
  uint32_t b_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;
  uint32_t act;
  uint32_t clip_lo;
  uint32_t clip_hi;
  uint32_t a_zp;
  uint32_t b_zp;
  uint32_t out_zp;
  uint32_t a_mult;
  uint32_t b_mult;
  uint32_t shift;
};
constexpr uint32_t kAddOperandWords = 18;

/*!
 * \brief Operands of POOL, words 1..25: the input tile follows CONV2D's tiling rules.
 *
 * int8: scale is the fp32 bit pattern of the requantization scale S (finite, > 0); fp16: 0.
 */
struct PoolOperands {
  uint32_t dtype;
  uint32_t kind;  // PoolKind
  uint32_t in_addr;
  uint32_t in_h;
  uint32_t in_w;
  uint32_t c;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_h;
  uint32_t out_w;
  uint32_t out_stride;
  uint32_t kh;
  uint32_t kw;
  uint32_t stride_h;
  uint32_t stride_w;
  uint32_t pad_top;
  uint32_t pad_left;
  uint32_t act;
  uint32_t clip_lo;
  uint32_t clip_hi;
  uint32_t in_zp;
  uint32_t out_zp;
  uint32_t scale;
  uint32_t in_pstride;   // bytes between input pixels; 0: packed (c elements)
  uint32_t out_pstride;  // bytes between output pixels; 0: packed (c elements)
};
constexpr uint32_t kPoolOperandWords = 25;
// A 1.0 stream has 23 POOL operands.
constexpr uint32_t kPoolOperandWords10 = 23;

/*!
 * \brief Operands of ELTWISE, words 1..24: out = a (kind) b over `rows` rows of `row_elems`
 *        elements, b broadcast per b_mode. int8 fields as for ADD (b_mult 0 for multiply).
 */
struct EltwiseOperands {
  uint32_t dtype;
  uint32_t kind;    // EltwiseKind
  uint32_t b_mode;  // BMode
  uint32_t a_addr;
  uint32_t a_stride;
  uint32_t b_addr;
  uint32_t b_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;
  uint32_t channels;  // b's length in mode kBChannel, else 0
  uint32_t act;
  uint32_t clip_lo;
  uint32_t clip_hi;
  uint32_t a_zp;
  uint32_t b_zp;
  uint32_t out_zp;
  uint32_t a_mult;
  uint32_t b_mult;
  uint32_t shift;
  uint32_t a_dtype;    // format 1.2: the operand's own dtype, 0 = `dtype`
  uint32_t b_dtype;    // format 1.2: the operand's own dtype, 0 = `dtype`
  uint32_t out_dtype;  // format 1.2: the result's own dtype, 0 = `dtype`
};
constexpr uint32_t kEltwiseOperandWords = 24;
// A 1.1 stream has 21 ELTWISE operands.
constexpr uint32_t kEltwiseOperandWords11 = 21;

/*!
 * \brief Operands of UNARY, words 1..10: out = f(in) over `rows` rows of `row_elems` elements.
 *
 * fp16: table_addr is kNoTable, alpha the fp32 bits of leaky relu's slope (0 otherwise).
 * int8: table_addr is the 256-byte table in SRAM, alpha 0.
 */
struct UnaryOperands {
  uint32_t dtype;
  uint32_t func;  // UnaryFunc
  uint32_t in_addr;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;
  uint32_t table_addr;
  uint32_t alpha;
};
constexpr uint32_t kUnaryOperandWords = 10;

/*!
 * \brief Operands of SOFTMAX, words 1..18: each of `rows` rows of `row_elems` fp16 elements
 *        normalized on its own.
 *
 * format 1.4: z = x * scale + mask[(mask_row0 + r) % mask_rows][e] in fp32 (two roundings, no fused
 * multiply-add) before the max / exp / sum / divide; 0 operands keep 1.1's softmax.
 * int8 (format 1.4): x = fp32(q - in_zp) * in_scale, the fp32 softmax, then clamp(round_half_even(y
 * / out_scale) + out_zp, -128, 127); the mask stays fp16.
 */
struct SoftmaxOperands {
  uint32_t dtype;
  uint32_t in_addr;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;
  uint32_t scale;        // format 1.4: fp32 bits of the factor on x; 0 = none (x as is)
  uint32_t mask_addr;    // format 1.4: SRAM address of the fp16 mask rows; 0 without a mask
  uint32_t mask_stride;  // format 1.4: bytes between mask rows; 0 without a mask
  uint32_t mask_rows;    // format 1.4: mask rows; 0 = no mask
  uint32_t mask_row0;    // format 1.4: row r reads mask row (mask_row0 + r) % mask_rows
  uint32_t pos_mode;     // format 1.4: bit 0 causal (row_elems + p, docs/npu.md 3)
  uint32_t in_zp;        // format 1.4, int8: the input's zero point (-128..127); fp16: 0
  uint32_t in_scale;     // format 1.4, int8: fp32 bits of the input's scale (> 0); fp16: 0
  uint32_t out_zp;       // format 1.4, int8: the output's zero point (-128..127); fp16: 0
  uint32_t out_scale;    // format 1.4, int8: fp32 bits of the output's scale (> 0); fp16: 0
  uint32_t window;       // format 1.6, causal: also hide e + window <= p + r % row_elems
};
constexpr uint32_t kSoftmaxOperandWords = 18;
// A 1.1 stream has 7 SOFTMAX operands.
constexpr uint32_t kSoftmaxOperandWords11 = 7;
// A 1.2 stream has 7 SOFTMAX operands.
constexpr uint32_t kSoftmaxOperandWords12 = 7;
// A 1.3 stream has 7 SOFTMAX operands.
constexpr uint32_t kSoftmaxOperandWords13 = 7;
// A 1.4 stream has 17 SOFTMAX operands.
constexpr uint32_t kSoftmaxOperandWords14 = 17;
// A 1.5 stream has 17 SOFTMAX operands.
constexpr uint32_t kSoftmaxOperandWords15 = 17;

/*!
 * \brief Operands of NORM, words 1..15: each of `rows` rows of `row_elems` fp16 elements normalized
 *        on its own (format 1.4).
 *
 * int8: x = fp32(q - in_zp) * in_scale, the fp32 steps of the fp16 form, then
 * clamp(round_half_even(y / out_scale) + out_zp, -128, 127).
 */
struct NormOperands {
  uint32_t dtype;
  uint32_t kind;  // NormKind
  uint32_t in_addr;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;
  uint32_t gamma_addr;  // row_elems fp32 scales in SRAM, or kNoParam (1)
  uint32_t beta_addr;   // row_elems fp32 shifts in SRAM, or kNoParam (0); rmsnorm: kNoParam
  uint32_t eps;         // fp32 bits, finite and >= 0
  uint32_t in_zp;       // int8: the input's zero point (-128..127); fp16: 0
  uint32_t in_scale;    // int8: fp32 bits of the input's scale (> 0); fp16: 0
  uint32_t out_zp;      // int8: the output's zero point (-128..127); fp16: 0
  uint32_t out_scale;   // int8: fp32 bits of the output's scale (> 0); fp16: 0
};
constexpr uint32_t kNormOperandWords = 15;

/*!
 * \brief Operands of GN_STATS, words 1..9: the tile's statistics per group merged into the SRAM
 *        records (format 1.7, docs/npu.md section 2).
 *
 * Per group: n = rows * row_pixels * C / G; s, the in-order fp32 sum from +0.0 over rows, then
 * pixels, then the group's channels; mean = s / n; m2 the in-order sum of (x - mean)^2; then Chan's
 * merge with the record (section 2).
 */
struct GnStatsOperands {
  uint32_t dtype;  // fp16 only (int8: ERR_OP_NOT_SUPPORTED)
  uint32_t in_addr;
  uint32_t in_stride;  // bytes between the tile's rows (a row: row_pixels packed pixels)
  uint32_t rows;
  uint32_t row_pixels;  // pixels per row (W of the map), 1..max_width
  uint32_t channels;    // C, 1..max_width, a multiple of groups
  uint32_t groups;      // G >= 1; group g is channels [g * C / G, (g + 1) * C / G)
  uint32_t stats_addr;  // G records {u32 count, fp32 mean, fp32 m2} (12 bytes) in SRAM
  uint32_t first;       // 1: overwrite the records; 0: merge into them
};
constexpr uint32_t kGnStatsOperandWords = 9;

/*!
 * \brief Operands of GN_APPLY, words 1..14: a tile normalized with its groups' finished statistics
 *        (format 1.7, docs/npu.md section 2).
 *
 * Per element of group g, channel c: var = m2 / fp32(count), d = sqrt(var + eps), y = (x - mean) /
 * d, y = y * gamma[c], y = y + beta[c], with silu y = y / (1 + exp(-y)); one rounding to fp16.
 */
struct GnApplyOperands {
  uint32_t dtype;  // fp16 only (int8: ERR_OP_NOT_SUPPORTED)
  uint32_t in_addr;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_pixels;  // pixels per row (W of the map), 1..max_width
  uint32_t channels;    // C, 1..max_width, a multiple of groups
  uint32_t groups;      // G >= 1, as the GN_STATS that wrote the records
  uint32_t stats_addr;  // the G records GN_STATS wrote
  uint32_t gamma_addr;  // C fp32 scales in SRAM, or kNoParam (1)
  uint32_t beta_addr;   // C fp32 shifts in SRAM, or kNoParam (0)
  uint32_t eps;         // fp32 bits, finite and >= 0
  uint32_t silu;        // 1: y / (1 + exp(-y)) before the rounding; 0: none
};
constexpr uint32_t kGnApplyOperandWords = 14;

/*!
 * \brief Operands of ROPE, words 1..12: rotary position embedding, rotate-half form (format 1.4):
 *        with h = row_elems / 2, c / s the cos / sin row (cs_row0 + r) % cs_rows, y[i] = x[i] *
 *        c[i] - x[i + h] * s[i] for i < h and y[i] = x[i] * c[i] + x[i - h] * s[i] for i >= h; fp16
 *        in and out, fp32 products (exact) and one fp32 add or subtract, one rounding to fp16.
 */
struct RopeOperands {
  uint32_t dtype;
  uint32_t in_addr;
  uint32_t in_stride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t rows;
  uint32_t row_elems;  // D, even: h = D / 2 is the rotated half
  uint32_t cos_addr;   // SRAM address of cs_rows fp16 rows of row_elems cos values
  uint32_t sin_addr;   // SRAM address of cs_rows fp16 rows of row_elems sin values
  uint32_t cs_stride;  // bytes between cos rows (and between sin rows)
  uint32_t cs_rows;    // rows of the cos / sin table (>= 1)
  uint32_t cs_row0;    // row r reads cos / sin row (cs_row0 + r) % cs_rows (< cs_rows)
};
constexpr uint32_t kRopeOperandWords = 12;

/*!
 * \brief Operands of MATMUL, words 1..23: out[o] = A[o] x B[o / b_group] for o in [0, batch): A[o]
 *        is [m, k], out[o] is [m, n], all in SRAM, strides in bytes.
 *
 *
 * fp16 (format 1.4): fp32 accumulation in k order, one rounding to fp16.
 * fp16 with b_dtype int8: B holds int8 codes, the exact products a * q summed as above, then one
 * fp32 multiply by the B batch's scale, one rounding to fp16.
 * int8 (format 1.4): sum of (a - a_zp) * (b - b_zp) in int32, requantized like CONV2D with one
 * scale S: clamp(out_zp + round_half_even(fp32(acc) * S), -128, 127); b_dtype 0.
 */
struct MatmulOperands {
  uint32_t dtype;
  uint32_t batch;
  uint32_t b_group;  // batches sharing one B: batch o reads B batch o / b_group (>= 1)
  uint32_t m;
  uint32_t k;
  uint32_t n;
  uint32_t b_transposed;  // 0: B stored [K, N] (rows of N); 1: B stored [N, K] (rows of K)
  uint32_t a_addr;        // format 1.8: a multiple of 16 (a head slice); before, of `alignment`
  uint32_t a_stride;
  uint32_t a_bstride;  // bytes between A's batches (as the *_bstride of B and out)
  uint32_t b_addr;
  uint32_t b_stride;
  uint32_t b_bstride;
  uint32_t out_addr;
  uint32_t out_stride;
  uint32_t out_bstride;
  uint32_t pos_mode;      // format 1.4: bit 0 n += p, bit 1 k += p
  uint32_t b_dtype;       // 0 = `dtype`; int8 (2) under fp16: B holds int8 codes
  uint32_t b_scale_addr;  // b_dtype int8: SRAM address of one fp32 scale per B batch
  uint32_t a_zp;          // int8: A's zero point (int32, -128..127); fp16: 0
  uint32_t b_zp;          // int8: B's zero point (int32, -128..127); fp16: 0
  uint32_t out_zp;        // int8: the output's zero point (int32, -128..127); fp16: 0
  uint32_t scale;         // int8: fp32 bits of the requantization scale S (finite, > 0); fp16: 0
};
constexpr uint32_t kMatmulOperandWords = 23;

static_assert(sizeof(Header) == kHeaderBytes, "header layout");
static_assert(sizeof(TensorDesc) == kTensorBytes, "tensor descriptor layout");
static_assert(sizeof(QParams) == kQParamsBytes, "quantization table entry layout");
static_assert(sizeof(Command) == kCommandBytes, "command layout");
static_assert(sizeof(DmaOperands) == 4 * kDmaOperandWords, "DMA_LOAD / DMA_STORE operand layout");
static_assert(sizeof(Conv2DOperands) == 4 * kConv2DOperandWords, "CONV2D operand layout");
static_assert(sizeof(AddOperands) == 4 * kAddOperandWords, "ADD operand layout");
static_assert(sizeof(PoolOperands) == 4 * kPoolOperandWords, "POOL operand layout");
static_assert(sizeof(EltwiseOperands) == 4 * kEltwiseOperandWords, "ELTWISE operand layout");
static_assert(sizeof(UnaryOperands) == 4 * kUnaryOperandWords, "UNARY operand layout");
static_assert(sizeof(SoftmaxOperands) == 4 * kSoftmaxOperandWords, "SOFTMAX operand layout");
static_assert(sizeof(NormOperands) == 4 * kNormOperandWords, "NORM operand layout");
static_assert(sizeof(GnStatsOperands) == 4 * kGnStatsOperandWords, "GN_STATS operand layout");
static_assert(sizeof(GnApplyOperands) == 4 * kGnApplyOperandWords, "GN_APPLY operand layout");
static_assert(sizeof(RopeOperands) == 4 * kRopeOperandWords, "ROPE operand layout");
static_assert(sizeof(MatmulOperands) == 4 * kMatmulOperandWords, "MATMUL operand layout");

/*! \brief Bytes per element of a stream dtype, 0 for an unknown code. */
inline uint32_t DTypeBytes(uint32_t dtype) {
  switch (dtype) {
    case kFP16: return 2;
    case kInt8: return 1;
    case kInt32: return 4;
    case kFP32: return 4;
    case kInt16: return 2;
    case kInt64: return 8;
    case kInt4: return 0;
    case kUInt4: return 0;
    default: return 0;
  }
}

}  // namespace stream
}  // namespace tvm_npu

#endif  // TVM_NPU_STREAM_FORMAT_H_
