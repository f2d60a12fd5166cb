"""The NPU's binary contract, as data: the one place its numbers are written.

Opcodes and each command's operands in word order, the header, configuration block, tensor descriptor
and quantization-table layouts, the enum codes, the error codes and the configuration presets. Nothing
here computes: `layout.py` turns these tables into struct layouts (the Python packer and reader), and
`generate.py` writes them into include/tvm_npu/stream_format.h, include/tvm_npu/npu_config.h and the
tables of docs/npu.md (run ``python -m tvm_npu.contract.generate`` after editing this file;
tests/contract/test_contract_generated.py fails while a generated file is stale).

Conventions: every record is a run of little-endian words; a field is a u32 unless it says "type"
(u16, i32, f32) or "count" (an array). "c" names the C++ identifier where it differs from a rule the
generator could guess. "since" is the minor version a field or opcode appeared in (absent: 1.0); minor
versions only append, and a 0 in an appended operand keeps the older meaning.
"""

from typing import Any

# The tables below are laid out by hand, an entry or a few fields a line, to be read as a table.
# fmt: off

VERSION_MAJOR = 1

# Minor versions, oldest first; "c" names the C++ constant k<c>Minor that the parser checks against.
MINORS: list[dict[str, Any]] = [
    {"minor": 0, "added": "the first format"},
    {"minor": 1, "c": "VectorOps",
     "added": "the pixel strides of CONV2D and POOL; the opcodes ELTWISE, UNARY and SOFTMAX"},
    {"minor": 2, "c": "Int16", "added": "the int16 dtype; ELTWISE's per-operand dtypes"},
    {"minor": 3, "c": "QuantIo",
     "added": "quantized staging (host fp32 <-> device int8 / int16) and the quantization table"},
    {"minor": 4, "c": "Llm",
     "added": "UNARY's silu (5) and gelu_tanh (6); SOFTMAX's scale and additive mask (attention); "
              "the opcodes NORM (LayerNorm and RMSNorm over a row), MATMUL (batched activation x "
              "activation, grouped B) and ROPE (rotary position embedding, rotate-half form); the DDR "
              "state region (state_bytes, state_space; tensor roles state and position; host dtype int64 "
              "of a position) and the operand pos_mode of DMA_LOAD, DMA_STORE, SOFTMAX and MATMUL (a KV "
              "cache kept across calls, addressed at a run-time position); CONV2D's w_dtype (fp16 "
              "activations with int8 weights and one fp32 scale per output channel; group-wise int4 / uint4 "
              "weights with fp16 scales under fp16 or int8 activations); MATMUL's b_dtype and "
              "b_scale_addr (an int8 B, e.g. an int8 KV cache, with one fp32 scale per B batch); MATMUL's "
              "int8 form (a_zp, b_zp, out_zp, scale: two int8 activations, requantized per tensor); "
              "SOFTMAX's and NORM's int8 forms (in_zp, in_scale, out_zp, out_scale)"},
    {"minor": 5, "c": "SramState",
     "added": "the SRAM state area (header word 3, sram_state_bytes, formerly flags: the top of SRAM kept "
              "across calls and shared by state space); the tensor role sram_state (a state tensor in it); "
              "bit 2 of a DMA's pos_mode (sram_addr += p * sram_stride: new KV rows written into an SRAM "
              "cache at the run-time position)"},
    {"minor": 6, "c": "Band",
     "added": "SOFTMAX's window (a causal SOFTMAX over the last `window` cache rows of each query: "
              "sliding-window attention with its cache on the NPU)"},
    {"minor": 7, "c": "GroupNorm",
     "added": "the opcodes GN_STATS (a tile's per-group mean and M2 merged into an SRAM statistics "
              "buffer, Chan et al.'s formula) and GN_APPLY (a tile normalized with finished statistics, "
              "per-channel gamma / beta, an optional fused SiLU): GroupNorm over NHWC maps tiled in SRAM"},
    {"minor": 8, "c": "HeadSlices",
     "added": "MATMUL's head slices: its a_addr, b_addr and out_addr and its batch strides need only be "
              "multiples of one SRAM beat (16 bytes; row strides still `alignment`), so a command can "
              "address one attention head's columns of a [S, H * D] tensor; batches may interleave "
              "within a row (a batch stride below one block, all batches' columns inside one row stride)"},
]

# Named values of the format. "c" is the C++ constant, "py" the Python one (contract/stream.py).
CONSTANTS: list[dict[str, Any]] = [
    {"c": "kMagic", "py": "MAGIC", "value": 0x5355504E, "doc": 'the header\'s first word: the bytes "NPUS"'},
    {"c": "kWeightsAlignment", "py": "WEIGHTS_ALIGNMENT", "value": 128,
     "doc": "alignment of the weight region's offset in the blob"},
    {"c": "kSliceAlignment", "py": "SLICE_ALIGNMENT", "value": 16,
     "doc": "CONV2D and POOL input / output addresses, and (format 1.8) MATMUL's addresses and batch "
            "strides, need only be multiples of one SRAM beat, so a command can read or write a channel "
            "slice of a tensor or one attention head of it (docs/npu.md section 3)"},
    {"c": "kUnaryTableBytes", "py": "UNARY_TABLE_BYTES", "value": 256,
     "doc": "an int8 UNARY's table: one int8 output per input code, indexed by x + 128"},
    {"c": "kNoTable", "py": "NO_TABLE", "value": 0xFFFFFFFF, "doc": "UNARY table_addr: no table (fp16)"},
    {"c": "kNoBias", "py": "NO_BIAS", "value": 0xFFFFFFFF, "doc": "CONV2D bias_addr: no bias (fp16 only)"},
    {"c": "kNoParam", "py": "NO_PARAM", "value": 0xFFFFFFFF,
     "doc": "NORM gamma_addr / beta_addr: no scale (multiply by 1) / no shift (add 0)"},
    {"c": "kNoIoIndex", "py": "NO_IO", "value": 0xFFFFFFFF,
     "doc": "tensor descriptor io_index of a weight or bias"},
]

# Word 0 of a command: opcode in bits 0-7, then one wait field per engine, in this order.
WAITS: dict[str, Any] = {"engines": ["dma0", "dma1", "mac", "vector"], "shift": 8, "bits": 4, "no_wait": 15}
COMMAND_WORDS = 32  # word 0 and 31 operand words; unused ones are zero

# ---------------------------------------------------------------------------------------------------
# Records: the header, the configuration block, a tensor descriptor, a quantization table entry.
# ---------------------------------------------------------------------------------------------------

HEADER: dict[str, Any] = {
    "c": "Header",
    "fields": [
        {"name": "magic", "value": "MAGIC", "doc": 'the bytes "NPUS"'},
        {"name": "version_major", "type": "u16", "value": "VERSION_MAJOR",
         "doc": "a reader refuses another major version"},
        {"name": "version_minor", "type": "u16", "value": "VERSION_MINOR",
         "doc": "the newest minor this format defines; a reader refuses a newer one and reads every older"},
        {"name": "header_bytes", "value": "HEADER_BYTES", "doc": "the header's size"},
        {"name": "sram_state_bytes", "since": 5,
         "doc": "SRAM [sram_bytes - sram_state_bytes, sram_bytes), the SRAM state area, kept across calls "
                "(formerly `flags`, 0)",
         "comment": "format 1.5: the SRAM state area at the top of SRAM; 0 = none"},
        {"name": "num_tensors", "doc": "entries of the tensor table"},
        {"name": "num_commands", "doc": "entries of the command table, the last one END"},
        {"name": "weights_offset", "doc": "byte offset of the weight region in the blob, 128-aligned"},
        {"name": "weights_bytes", "doc": "the weight region's size (it is DDR [0, weights_bytes))"},
        {"name": "ddr_bytes", "doc": "DDR space the stream needs, weights included"},
        {"name": "sram_bytes_used", "doc": "SRAM the stream uses (at most `sram_bytes`)"},
        {"name": "num_inputs", "doc": "input arguments"},
        {"name": "num_outputs", "doc": "output arguments"},
        {"name": "crc32", "doc": "CRC-32/IEEE of every byte after the header"},
        {"name": "qparams_offset", "since": 3,
         "doc": "byte offset of the quantization table in the blob, 0 = none; a reserved word before",
         "comment": "format 1.3: the quantization table's offset in the blob, 0 = none"},
        {"name": "state_bytes", "since": 4,
         "doc": "bytes of the state region, DDR [ddr_bytes, ddr_bytes + state_bytes), kept across calls",
         "comment": "format 1.4: state region bytes after ddr_bytes; 0 = none"},
        {"name": "state_space", "since": 4,
         "doc": "0: the state is the module's own; k: shared by slot with every module whose stream says k",
         "comment": "format 1.4: 0 = own state; k = shared by slot"},
    ],
}

# The configuration block: the NPUConfig fields in block order ("display" says how docs/npu.md
# writes a value besides the number).
CONFIG: dict[str, Any] = {
    "c": "NPUConfig",
    "fields": [
        {"name": "clock_mhz", "doc": "core clock", "display": "clock"},
        {"name": "mac_rows", "doc": "MAC array rows (input-channel / tap dimension)"},
        {"name": "mac_cols", "doc": "MAC array columns (output-channel dimension)"},
        {"name": "fp16_rate_div", "doc": "an fp16 MAC takes this many int8 MAC slots"},
        {"name": "sram_bytes", "doc": "on-chip SRAM", "display": "size"},
        {"name": "sram_banks", "doc": "SRAM banks (interleaved every `alignment` bytes)"},
        {"name": "ddr_bytes_per_cycle", "doc": "DDR bandwidth, shared by all DMA channels"},
        {"name": "burst_bytes", "doc": "DDR burst size; a transfer moves whole bursts"},
        {"name": "dma_latency", "doc": "fixed cycles from DMA issue to its first burst"},
        {"name": "dma_channels", "doc": "DMA channels running concurrently with compute"},
        {"name": "vector_lanes", "doc": "vector-unit lanes (elements per cycle)"},
        {"name": "alignment", "doc": "alignment of every address and row stride (bytes)"},
        {"name": "op_overhead", "doc": "fixed cycles per compute command (setup, drain)"},
        {"name": "max_rank", "doc": "highest tensor rank an NPU op accepts"},
        {"name": "max_width", "doc": "largest width (W of a map, a vector row) accepted"},
        {"name": "max_tensors", "doc": "tensors one task (one command stream) may reference"},
    ],
}

# The configurations the package names (tvm_npu.PRESETS); the first is the default. "c" is the
# static constructor of the C++ NPUConfig.
PRESETS: list[dict[str, Any]] = [
    {"name": "npu-ref", "c": "NpuRef", "values": {
        "clock_mhz": 1000, "mac_rows": 32, "mac_cols": 32, "fp16_rate_div": 4, "sram_bytes": 2097152,
        "sram_banks": 16, "ddr_bytes_per_cycle": 16, "burst_bytes": 128, "dma_latency": 64,
        "dma_channels": 2, "vector_lanes": 64, "alignment": 128, "op_overhead": 32, "max_rank": 4,
        "max_width": 2048, "max_tensors": 64}},
    {"name": "npu-small", "c": "NpuSmall", "values": {
        "clock_mhz": 500, "mac_rows": 16, "mac_cols": 16, "fp16_rate_div": 4, "sram_bytes": 524288,
        "sram_banks": 8, "ddr_bytes_per_cycle": 8, "burst_bytes": 128, "dma_latency": 64,
        "dma_channels": 2, "vector_lanes": 32, "alignment": 128, "op_overhead": 32, "max_rank": 4,
        "max_width": 2048, "max_tensors": 64}},
    # A laptop-class NPU (2024-25 parts: 40-50 int8 TOPS, fp16 at half rate, several MiB of scratchpad,
    # LPDDR5X shared with the CPU): 128 x 128 MACs at 1.8 GHz are 59 int8 TOPS; 48 B/cycle are 86 GB/s,
    # the NPU's share of a 136 GB/s LPDDR5X-8533 bus. An estimate's yardstick, not a model of one part.
    {"name": "npu-laptop", "c": "NpuLaptop", "values": {
        "clock_mhz": 1800, "mac_rows": 128, "mac_cols": 128, "fp16_rate_div": 2, "sram_bytes": 8388608,
        "sram_banks": 32, "ddr_bytes_per_cycle": 48, "burst_bytes": 128, "dma_latency": 120,
        "dma_channels": 2, "vector_lanes": 256, "alignment": 128, "op_overhead": 32, "max_rank": 4,
        "max_width": 4096, "max_tensors": 64}},
]

TENSOR: dict[str, Any] = {
    "c": "TensorDesc",
    "fields": [
        {"name": "role", "enum": "role", "doc": "what the tensor is"},
        {"name": "io_index", "doc": "argument position among inputs or among outputs; 0xFFFFFFFF otherwise"},
        {"name": "dtype", "enum": "dtype", "doc": "device dtype"},
        {"name": "host_dtype", "enum": "dtype", "doc": "the host argument's dtype"},
        {"name": "host_layout", "enum": "layout", "doc": "the host argument's layout"},
        {"name": "host_rank", "doc": "the host argument's rank"},
        {"name": "host_shape", "count": 4, "doc": "the host argument's shape (unused trailing entries 0)"},
        {"name": "view", "count": 4, "doc": "the device `[N, H, W, C]`", "comment": "device [N, H, W, C]"},
        {"name": "ddr_addr", "doc": "the device tensor's DDR address"},
        {"name": "row_stride", "doc": "bytes between the device tensor's rows"},
    ],
}

QPARAMS: dict[str, Any] = {
    "c": "QParams",
    "brief": "An entry of the quantization table (format 1.3): one per tensor descriptor, in order; two "
             "zero words for a tensor that is not staged with quantization.",
    "fields": [
        {"name": "scale", "type": "f32", "doc": "fp32, finite and > 0 for a quantized input or output"},
        {"name": "zero_point", "type": "i32", "doc": "int32, within the device dtype's range (0 for int16)"},
    ],
}

# ---------------------------------------------------------------------------------------------------
# Enum codes. "c" is the C++ enumerator, "doc_name" how docs/npu.md names the value, "field" the
# fields and operands that hold the enum.
# ---------------------------------------------------------------------------------------------------

ENUMS: dict[str, dict[str, Any]] = {
    "dtype": {"c": "DType", "field": "`dtype`, `host_dtype`, `a_dtype`, `b_dtype`, `out_dtype`, `w_dtype`", "values": [
        {"name": "float16", "code": 1, "c": "kFP16", "doc_name": "fp16", "bytes": 2,
         "use": "activations and weights on the float datapath"},
        {"name": "int8", "code": 2, "c": "kInt8", "bytes": 1,
         "use": "activations and weights on the integer datapath"},
        {"name": "int32", "code": 3, "c": "kInt32", "bytes": 4,
         "use": "biases and accumulators of the integer datapath"},
        {"name": "float32", "code": 4, "c": "kFP32", "doc_name": "fp32", "bytes": 4,
         "use": "biases of the float datapath, host tensors"},
        {"name": "int16", "code": 5, "c": "kInt16", "bytes": 2, "since": 2,
         "comment": "format 1.2: ELTWISE operands and results, region inputs and outputs",
         "use": "16-bit tensors of the integer datapath (an LSTM's cell state): `ELTWISE` operands and "
                "results, region inputs and outputs (format 1.2)"},
        {"name": "int64", "code": 6, "c": "kInt64", "bytes": 8, "since": 4,
         "comment": "format 1.4: the host dtype of a position input only",
         "use": "the host dtype of a `position` input (the step model's int64 position; format 1.4)"},
        # bytes 0: no tensor has these dtypes (the tensor table refuses a 0-byte dtype); CONV2D reads
        # them from w_dtype's low byte, two codes a byte.
        {"name": "int4", "code": 7, "c": "kInt4", "bytes": 0, "doc_size": "½", "since": 4,
         "comment": "format 1.4: CONV2D w_dtype only (bits 0-7; the group size in bits 8-15)",
         "use": "group-wise weights -8..7 with fp16 scales, two a byte: `CONV2D`'s `w_dtype` only (format 1.4)"},
        {"name": "uint4", "code": 8, "c": "kUInt4", "bytes": 0, "doc_size": "½", "since": 4,
         "comment": "format 1.4: CONV2D w_dtype only, with a uint4 zero point per group",
         "use": "group-wise weights 0..15 with fp16 scales and uint4 zero points, two a byte: `CONV2D`'s "
                "`w_dtype` only (format 1.4)"},
    ]},
    "role": {"c": "Role", "field": "tensor `role`", "values": [
        {"name": "input", "code": 1, "c": "kRoleInput"},
        {"name": "output", "code": 2, "c": "kRoleOutput"},
        {"name": "weight", "code": 3, "c": "kRoleWeight"},
        {"name": "bias", "code": 4, "c": "kRoleBias"},
        {"name": "state", "code": 5, "c": "kRoleState", "since": 4,
         "doc": "a tensor of the state region, kept across calls; `io_index` is its slot",
         "comment": "format 1.4: in the state region, kept across calls; io_index = slot"},
        {"name": "position", "code": 6, "c": "kRolePosition", "since": 4,
         "doc": "the input read into the position register, never staged",
         "comment": "format 1.4: the input read into the position register"},
        {"name": "sram_state", "code": 7, "c": "kRoleSramState", "since": 5,
         "doc": "a state tensor in the SRAM state area, kept across calls; `ddr_addr` is its SRAM address, "
                "`io_index` its slot",
         "comment": "format 1.5: in the SRAM state area; ddr_addr = its SRAM address"},
    ]},
    "layout": {"c": "HostLayout", "field": "tensor `host_layout`", "values": [
        {"name": "NHWC", "code": 0, "c": "kLayoutNHWC"},
        {"name": "NCHW", "code": 1, "c": "kLayoutNCHW"},
        {"name": "ROWS", "code": 2, "c": "kLayoutRows",
         "doc": "row-major `[..., K]` viewed as `[1, prod(...), 1, K]`",
         "comment": "row-major [..., K] viewed as [1, prod(...), 1, K]"},
    ]},
    "activation": {"c": "Activation", "field": "`act`", "values": [
        {"name": "none", "code": 0, "c": "kActNone"},
        {"name": "relu", "code": 1, "c": "kActRelu"},
        {"name": "clip", "code": 2, "c": "kActClip"},
    ]},
    "pool_kind": {"c": "PoolKind", "field": "`POOL` `kind`", "values": [
        {"name": "avg", "code": 0, "c": "kPoolAvg", "doc_name": "average"},
        {"name": "max", "code": 1, "c": "kPoolMax"},
    ]},
    "eltwise_kind": {"c": "EltwiseKind", "field": "`ELTWISE` `kind`", "values": [
        {"name": "add", "code": 0, "c": "kEltAdd"},
        {"name": "subtract", "code": 1, "c": "kEltSub", "doc": "`a - b`"},
        {"name": "multiply", "code": 2, "c": "kEltMul"},
        {"name": "maximum", "code": 3, "c": "kEltMax"},
        {"name": "minimum", "code": 4, "c": "kEltMin"},
    ]},
    "b_mode": {"c": "BMode", "field": "`ELTWISE` `b_mode`",
               "brief": "What ELTWISE's b is: same shape as a, one row of `channels` elements, or one "
                        "element.",
               "values": [
        {"name": "same", "code": 0, "c": "kBSame", "doc": "the shape of `a`"},
        {"name": "channel", "code": 1, "c": "kBChannel", "doc": "one row of `channels` elements"},
        {"name": "scalar", "code": 2, "c": "kBScalar", "doc": "one element"},
    ]},
    "unary_func": {"c": "UnaryFunc", "field": "`UNARY` `func`", "values": [
        {"name": "sigmoid", "code": 0, "c": "kUnarySigmoid", "fp32": "`1 / (1 + exp(-x))`",
         "guarantee": "within 1 fp16 ulp"},
        {"name": "tanh", "code": 1, "c": "kUnaryTanh", "fp32": "`tanh(x)`", "guarantee": "within 1 fp16 ulp"},
        {"name": "hardswish", "code": 2, "c": "kUnaryHardSwish",
         "fp32": "`t = x + 3`; `t = min(max(t, 0), 6)`; `t = t / 6`; `y = x * t`", "guarantee": "bit-exact"},
        {"name": "gelu", "code": 3, "c": "kUnaryGelu",
         "fp32": "`0.5 * x * erfc(-x * 0.70710677)` (the erf form; erfc keeps the negative tail accurate)",
         "guarantee": "within 1 fp16 ulp"},
        {"name": "leaky_relu", "code": 4, "c": "kUnaryLeakyRelu", "doc_name": "leaky relu",
         "fp32": "`x < 0 ? x * alpha : x` (`alpha` an fp32 operand)", "guarantee": "bit-exact"},
        {"name": "silu", "code": 5, "c": "kUnarySilu", "since": 4,
         "fp32": "`e = exp(-x)`; `d = 1 + e`; `y = x / d` (x * sigmoid(x) with one rounding fewer)",
         "guarantee": "within 1 fp16 ulp"},
        {"name": "gelu_tanh", "code": 6, "c": "kUnaryGeluTanh", "doc_name": "gelu (tanh)", "since": 4,
         "fp32": "`u = x * x`; `u = u * x`; `u = 0.044715 * u`; `u = x + u`; `u = 1.5957691216 * u`; "
                 "`e = exp(-u)`; `d = 1 + e`; `y = x / d` (`0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * "
                 "x^3)))` as `x * sigmoid(2 * ...)`: the sum `1 + tanh` cancels for x < 0)",
         "guarantee": "within 1 fp16 ulp"},
    ]},
    "norm_kind": {"c": "NormKind", "field": "`NORM` `kind`", "values": [
        {"name": "layernorm", "code": 0, "c": "kNormLayer", "since": 4,
         "doc": "`(x - mean) / sqrt(var + eps) * gamma + beta`"},
        {"name": "rmsnorm", "code": 1, "c": "kNormRms", "since": 4, "doc": "`x / sqrt(mean(x^2) + eps) * gamma`"},
    ]},
}

# ---------------------------------------------------------------------------------------------------
# Opcodes. "operands" are words 1.. in order; "c_struct" is the C++ operand struct, "c_fields" its
# field names where they differ (DMA_LOAD and DMA_STORE share one struct: source, then destination);
# "operands_since" maps an operand appended in a later minor to that minor; "comments" annotate an operand
# in the C++ struct; "enums" name an operand's enum; "notes" go to the struct's comment (the first
# completes its brief, the others after an empty one are its details).
# ---------------------------------------------------------------------------------------------------

_DMA_C_FIELDS = ["channel", "src_addr", "dst_addr", "rows", "row_bytes", "src_stride", "dst_stride", "pos_mode"]
# pos_mode (format 1.4): which operands add the run-time position p (docs/npu.md section 3).
_DMA_POS = {"pos_mode": "format 1.4: bit 0 ddr_addr += p * ddr_stride, bit 1 rows += p"}
_DMA_NOTES = ["", "", ("Both list channel, source, destination, rows, row_bytes, source stride, destination "
                       "stride: DDR to SRAM for DMA_LOAD, SRAM to DDR for DMA_STORE."),
              "Format 1.5: pos_mode bit 2 moves the SRAM side, sram_addr += p * sram_stride."]

OPCODES: list[dict[str, Any]] = [
    {"name": "END", "code": 0x00, "c": "kEnd", "engine": None, "operands": [],
     "doc": "end of stream (must be the last command, and only there)"},
    {"name": "DMA_LOAD", "code": 0x01, "c": "kDmaLoad", "engine": "dma", "c_struct": "DmaOperands",
     "operands": ["channel", "ddr_addr", "sram_addr", "rows", "row_bytes", "ddr_stride", "sram_stride", "pos_mode"],
     "operands_since": {"pos_mode": 4}, "comments": _DMA_POS,
     "c_fields": _DMA_C_FIELDS, "notes": _DMA_NOTES, "doc": "2-D copy DDR -> SRAM"},
    {"name": "DMA_STORE", "code": 0x02, "c": "kDmaStore", "engine": "dma", "c_struct": "DmaOperands",
     "operands": ["channel", "sram_addr", "ddr_addr", "rows", "row_bytes", "sram_stride", "ddr_stride", "pos_mode"],
     "operands_since": {"pos_mode": 4}, "comments": _DMA_POS,
     "c_fields": _DMA_C_FIELDS, "notes": _DMA_NOTES, "doc": "2-D copy SRAM -> DDR"},
    {"name": "CONV2D", "code": 0x10, "c": "kConv2D", "engine": "mac", "c_struct": "Conv2DOperands",
     "operands": ["dtype", "in_addr", "in_h", "in_w", "in_c", "in_stride", "w_addr", "w_stride", "kh", "kw",
                  "oc", "bias_addr", "out_addr", "out_h", "out_w", "out_stride", "stride_h", "stride_w",
                  "dil_h", "dil_w", "pad_top", "pad_left", "act", "clip_lo", "clip_hi", "groups", "in_zp",
                  "out_zp", "in_pstride", "out_pstride", "w_dtype"],
     "operands_since": {"in_pstride": 1, "out_pstride": 1, "w_dtype": 4},
     "comments": {"in_pstride": "bytes between input pixels; 0: packed (in_c elements)",
                  "out_pstride": "bytes between output pixels; 0: packed (oc elements)",
                  "w_dtype": "format 1.4: weights' dtype, 0 = `dtype`; int8; int4 / uint4 | g << 8"},
     "notes": ["addresses are SRAM offsets, strides are bytes.",
               "",
               "fp16: clip_lo / clip_hi are fp32 bits, in_zp = out_zp = 0, bias_addr may be kNoBias.",
               ("int8: clip_lo / clip_hi are the int32 clamp bounds, zero points int32 (two's complement), "
                "act 0, bias_addr is the requantization block. groups is 1, or in_c (= oc) for depthwise."),
               ("fp16 with w_dtype int8 (format 1.4): the weights are int8 codes, bias_addr is the "
                "dequantization block: two rows of OC fp32, bias then the weights' scale, laid out as the "
                "requantization block."),
               ("w_dtype int4 (7) / uint4 (8) | g << 8, g in {32, 64, 128} (format 1.4): dense only (kh = kw = "
                "1, groups 1, in_c % g == 0), rows of in_c / 2 bytes, low nibble first; bias_addr is the int4 "
                "dequantization block: bias row, requantization row (int8 only), fp16 scales [in_c / g][oc], "
                "then (uint4) zero points [in_c / g][ceil(oc / 2)] from the next alignment boundary.")],
     "doc": "convolution (dense = 1x1 conv; depthwise = groups == channels) + bias + activation "
            "(+ requantization)"},
    {"name": "ADD", "code": 0x20, "c": "kAdd", "engine": "vector", "c_struct": "AddOperands",
     "operands": ["dtype", "a_addr", "a_stride", "b_addr", "b_stride", "out_addr", "out_stride", "rows",
                  "row_elems", "act", "clip_lo", "clip_hi", "a_zp", "b_zp", "out_zp", "a_mult", "b_mult",
                  "shift"],
     "notes": ["out = a + b over `rows` rows of `row_elems` elements."],
     "doc": "elementwise add of two equally shaped tiles + activation (+ requantization)"},
    {"name": "POOL", "code": 0x21, "c": "kPool", "engine": "vector", "c_struct": "PoolOperands",
     "operands": ["dtype", "kind", "in_addr", "in_h", "in_w", "c", "in_stride", "out_addr", "out_h", "out_w",
                  "out_stride", "kh", "kw", "stride_h", "stride_w", "pad_top", "pad_left", "act", "clip_lo",
                  "clip_hi", "in_zp", "out_zp", "scale", "in_pstride", "out_pstride"],
     "enums": {"kind": "pool_kind"},
     "operands_since": {"in_pstride": 1, "out_pstride": 1},
     "comments": {"in_pstride": "bytes between input pixels; 0: packed (c elements)",
                  "out_pstride": "bytes between output pixels; 0: packed (c elements)"},
     "notes": ["the input tile follows CONV2D's tiling rules.",
               "",
               "int8: scale is the fp32 bit pattern of the requantization scale S (finite, > 0); fp16: 0."],
     "doc": "average or max pooling over a window (global pooling = window of the whole map)"},
    {"name": "ELTWISE", "code": 0x22, "c": "kEltwise", "engine": "vector", "c_struct": "EltwiseOperands",
     "since": 1,
     "operands": ["dtype", "kind", "b_mode", "a_addr", "a_stride", "b_addr", "b_stride", "out_addr",
                  "out_stride", "rows", "row_elems", "channels", "act", "clip_lo", "clip_hi", "a_zp", "b_zp",
                  "out_zp", "a_mult", "b_mult", "shift", "a_dtype", "b_dtype", "out_dtype"],
     "enums": {"kind": "eltwise_kind", "b_mode": "b_mode"},
     "operands_since": {"a_dtype": 2, "b_dtype": 2, "out_dtype": 2},
     "comments": {"channels": "b's length in mode kBChannel, else 0",
                  "a_dtype": "format 1.2: the operand's own dtype, 0 = `dtype`",
                  "b_dtype": "format 1.2: the operand's own dtype, 0 = `dtype`",
                  "out_dtype": "format 1.2: the result's own dtype, 0 = `dtype`"},
     "notes": [("out = a (kind) b over `rows` rows of `row_elems` elements, b broadcast per b_mode. "
                "int8 fields as for ADD (b_mult 0 for multiply).")],
     "doc": "elementwise add / subtract / multiply / maximum / minimum with a broadcast `b` + activation "
            "(+ requantization) (format 1.1; int8 or int16 operands, 1.2)"},
    {"name": "UNARY", "code": 0x23, "c": "kUnary", "engine": "vector", "c_struct": "UnaryOperands",
     "since": 1,
     "operands": ["dtype", "func", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems",
                  "table_addr", "alpha"],
     "enums": {"func": "unary_func"},
     "notes": ["out = f(in) over `rows` rows of `row_elems` elements.",
               "",
               "fp16: table_addr is kNoTable, alpha the fp32 bits of leaky relu's slope (0 otherwise).",
               "int8: table_addr is the 256-byte table in SRAM, alpha 0."],
     "doc": "sigmoid, tanh, hardswish, gelu, leaky relu (silu, gelu tanh: format 1.4); int8 through a 256-entry "
            "table (format 1.1)"},
    {"name": "SOFTMAX", "code": 0x24, "c": "kSoftmax", "engine": "vector", "c_struct": "SoftmaxOperands",
     "since": 1,
     "operands": ["dtype", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems", "scale",
                  "mask_addr", "mask_stride", "mask_rows", "mask_row0", "pos_mode", "in_zp", "in_scale",
                  "out_zp", "out_scale", "window"],
     "operands_since": {"scale": 4, "mask_addr": 4, "mask_stride": 4, "mask_rows": 4, "mask_row0": 4,
                        "pos_mode": 4, "in_zp": 4, "in_scale": 4, "out_zp": 4, "out_scale": 4, "window": 6},
     "comments": {"scale": "format 1.4: fp32 bits of the factor on x; 0 = none (x as is)",
                  "mask_addr": "format 1.4: SRAM address of the fp16 mask rows; 0 without a mask",
                  "mask_stride": "format 1.4: bytes between mask rows; 0 without a mask",
                  "mask_rows": "format 1.4: mask rows; 0 = no mask",
                  "mask_row0": "format 1.4: row r reads mask row (mask_row0 + r) % mask_rows",
                  "pos_mode": "format 1.4: bit 0 causal (row_elems + p, docs/npu.md 3)",
                  "in_zp": "format 1.4, int8: the input's zero point (-128..127); fp16: 0",
                  "in_scale": "format 1.4, int8: fp32 bits of the input's scale (> 0); fp16: 0",
                  "out_zp": "format 1.4, int8: the output's zero point (-128..127); fp16: 0",
                  "out_scale": "format 1.4, int8: fp32 bits of the output's scale (> 0); fp16: 0",
                  "window": "format 1.6, causal: also hide e + window <= p + r % row_elems"},
     "notes": ["each of `rows` rows of `row_elems` fp16 elements normalized on its own.",
               "",
               ("format 1.4: z = x * scale + mask[(mask_row0 + r) % mask_rows][e] in fp32 (two roundings, "
                "no fused multiply-add) before the max / exp / sum / divide; 0 operands keep 1.1's softmax."),
               ("int8 (format 1.4): x = fp32(q - in_zp) * in_scale, the fp32 softmax, then "
                "clamp(round_half_even(y / out_scale) + out_zp, -128, 127); the mask stays fp16.")],
     "doc": "softmax over each row (a matrix's last axis), fp16 (format 1.1; scale and additive mask, 1.4; "
            "int8 codes in and out, 1.4)"},
    {"name": "NORM", "code": 0x28, "c": "kNorm", "engine": "vector", "c_struct": "NormOperands",
     "since": 4,
     "operands": ["dtype", "kind", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems",
                  "gamma_addr", "beta_addr", "eps", "in_zp", "in_scale", "out_zp", "out_scale"],
     "enums": {"kind": "norm_kind"},
     "comments": {"gamma_addr": "row_elems fp32 scales in SRAM, or kNoParam (1)",
                  "beta_addr": "row_elems fp32 shifts in SRAM, or kNoParam (0); rmsnorm: kNoParam",
                  "eps": "fp32 bits, finite and >= 0",
                  "in_zp": "int8: the input's zero point (-128..127); fp16: 0",
                  "in_scale": "int8: fp32 bits of the input's scale (> 0); fp16: 0",
                  "out_zp": "int8: the output's zero point (-128..127); fp16: 0",
                  "out_scale": "int8: fp32 bits of the output's scale (> 0); fp16: 0"},
     "notes": ["each of `rows` rows of `row_elems` fp16 elements normalized on its own (format 1.4).",
               "",
               ("int8: x = fp32(q - in_zp) * in_scale, the fp32 steps of the fp16 form, then "
                "clamp(round_half_even(y / out_scale) + out_zp, -128, 127).")],
     "doc": "LayerNorm or RMSNorm over each row (a matrix's last axis), fp16 or int8 codes, fp32 gamma / beta "
            "(format 1.4)"},
    {"name": "GN_STATS", "code": 0x29, "c": "kGnStats", "engine": "vector", "c_struct": "GnStatsOperands",
     "since": 7,
     "operands": ["dtype", "in_addr", "in_stride", "rows", "row_pixels", "channels", "groups", "stats_addr",
                  "first"],
     "comments": {"dtype": "fp16 only (int8: ERR_OP_NOT_SUPPORTED)",
                  "in_stride": "bytes between the tile's rows (a row: row_pixels packed pixels)",
                  "row_pixels": "pixels per row (W of the map), 1..max_width",
                  "channels": "C, 1..max_width, a multiple of groups",
                  "groups": "G >= 1; group g is channels [g * C / G, (g + 1) * C / G)",
                  "stats_addr": "G records {u32 count, fp32 mean, fp32 m2} (12 bytes) in SRAM",
                  "first": "1: overwrite the records; 0: merge into them"},
     "notes": [("the tile's statistics per group merged into the SRAM records (format 1.7, docs/npu.md "
                "section 2)."),
               "",
               ("Per group: n = rows * row_pixels * C / G; s, the in-order fp32 sum from +0.0 over rows, "
                "then pixels, then the group's channels; mean = s / n; m2 the in-order sum of (x - mean)^2; "
                "then Chan's merge with the record (section 2).")],
     "doc": "a tile's per-group count, mean and M2 (sum of squared deviations) merged into an SRAM statistics "
            "buffer: GroupNorm's statistics over tiles of an NHWC fp16 map (format 1.7)"},
    {"name": "GN_APPLY", "code": 0x2A, "c": "kGnApply", "engine": "vector", "c_struct": "GnApplyOperands",
     "since": 7,
     "operands": ["dtype", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_pixels", "channels",
                  "groups", "stats_addr", "gamma_addr", "beta_addr", "eps", "silu"],
     "comments": {"dtype": "fp16 only (int8: ERR_OP_NOT_SUPPORTED)",
                  "row_pixels": "pixels per row (W of the map), 1..max_width",
                  "channels": "C, 1..max_width, a multiple of groups",
                  "groups": "G >= 1, as the GN_STATS that wrote the records",
                  "stats_addr": "the G records GN_STATS wrote",
                  "gamma_addr": "C fp32 scales in SRAM, or kNoParam (1)",
                  "beta_addr": "C fp32 shifts in SRAM, or kNoParam (0)",
                  "eps": "fp32 bits, finite and >= 0",
                  "silu": "1: y / (1 + exp(-y)) before the rounding; 0: none"},
     "notes": ["a tile normalized with its groups' finished statistics (format 1.7, docs/npu.md section 2).",
               "",
               ("Per element of group g, channel c: var = m2 / fp32(count), d = sqrt(var + eps), "
                "y = (x - mean) / d, y = y * gamma[c], y = y + beta[c], with silu y = y / (1 + exp(-y)); "
                "one rounding to fp16.")],
     "doc": "GroupNorm's normalization of a tile of an NHWC fp16 map with the statistics GN_STATS wrote, "
            "per-channel fp32 gamma / beta, an optional fused SiLU (format 1.7)"},
    {"name": "ROPE", "code": 0x2C, "c": "kRope", "engine": "vector", "c_struct": "RopeOperands",
     "since": 4,
     "operands": ["dtype", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems", "cos_addr",
                  "sin_addr", "cs_stride", "cs_rows", "cs_row0"],
     "comments": {"row_elems": "D, even: h = D / 2 is the rotated half",
                  "cos_addr": "SRAM address of cs_rows fp16 rows of row_elems cos values",
                  "sin_addr": "SRAM address of cs_rows fp16 rows of row_elems sin values",
                  "cs_stride": "bytes between cos rows (and between sin rows)",
                  "cs_rows": "rows of the cos / sin table (>= 1)",
                  "cs_row0": "row r reads cos / sin row (cs_row0 + r) % cs_rows (< cs_rows)"},
     "notes": [("rotary position embedding, rotate-half form (format 1.4): with h = row_elems / 2, c / s the "
                "cos / sin row (cs_row0 + r) % cs_rows, y[i] = x[i] * c[i] - x[i + h] * s[i] for i < h and "
                "y[i] = x[i] * c[i] + x[i - h] * s[i] for i >= h; fp16 in and out, fp32 products (exact) and "
                "one fp32 add or subtract, one rounding to fp16.")],
     "doc": "rotary position embedding over each row (rotate-half form: `x * cos + rotate_half(x) * sin`), "
            "fp16, cos / sin rows shared by every head (format 1.4)"},
    {"name": "MATMUL", "code": 0x30, "c": "kMatmul", "engine": "mac", "c_struct": "MatmulOperands",
     "since": 4,
     "operands": ["dtype", "batch", "b_group", "m", "k", "n", "b_transposed", "a_addr", "a_stride",
                  "a_bstride", "b_addr", "b_stride", "b_bstride", "out_addr", "out_stride", "out_bstride",
                  "pos_mode", "b_dtype", "b_scale_addr", "a_zp", "b_zp", "out_zp", "scale"],
     "comments": {"b_group": "batches sharing one B: batch o reads B batch o / b_group (>= 1)",
                  "b_transposed": "0: B stored [K, N] (rows of N); 1: B stored [N, K] (rows of K)",
                  "a_addr": "format 1.8: a multiple of 16 (a head slice); before, of `alignment`",
                  "a_bstride": "bytes between A's batches (as the *_bstride of B and out)",
                  "pos_mode": "format 1.4: bit 0 n += p, bit 1 k += p",
                  "b_dtype": "0 = `dtype`; int8 (2) under fp16: B holds int8 codes",
                  "b_scale_addr": "b_dtype int8: SRAM address of one fp32 scale per B batch",
                  "a_zp": "int8: A's zero point (int32, -128..127); fp16: 0",
                  "b_zp": "int8: B's zero point (int32, -128..127); fp16: 0",
                  "out_zp": "int8: the output's zero point (int32, -128..127); fp16: 0",
                  "scale": "int8: fp32 bits of the requantization scale S (finite, > 0); fp16: 0"},
     "notes": [("out[o] = A[o] x B[o / b_group] for o in [0, batch): A[o] is [m, k], out[o] is [m, n], "
                "all in SRAM, strides in bytes."),
               ("format 1.8, head slices: a_addr, b_addr, out_addr and the batch strides multiples of 16; "
                "a batch stride may be below one block when every batch's columns lie inside one row "
                "stride ((batches - 1) * bstride + row bytes <= row stride): attention's heads of a "
                "[S, H * D] tensor, addressed in place. The cycle formula is unchanged."),
               "",
               "fp16 (format 1.4): fp32 accumulation in k order, one rounding to fp16.",
               ("fp16 with b_dtype int8: B holds int8 codes, the exact products a * q summed as above, then "
                "one fp32 multiply by the B batch's scale, one rounding to fp16."),
               ("int8 (format 1.4): sum of (a - a_zp) * (b - b_zp) in int32, requantized like CONV2D with "
                "one scale S: clamp(out_zp + round_half_even(fp32(acc) * S), -128, 127); b_dtype 0.")],
     "doc": "batched matrix product of two SRAM tensors (attention's Q x K^T and P x V; grouped-query "
            "attention by `b_group`), fp16 (`B` fp16, or int8 with one fp32 scale per B batch) or int8 with "
            "per-tensor requantization (format 1.4)"},
]

# The operands that hold an fp32 bit pattern (docs/npu.md section 6), which a listing writes as a number
# (tools/listing.py): always (None), or under the command's `dtype` named (fp16's clamps; int8's are int32).
FP32_OPERANDS: dict[str, dict[str, str | None]] = {
    "CONV2D": {"clip_lo": "float16", "clip_hi": "float16"},
    "ADD": {"clip_lo": "float16", "clip_hi": "float16"},
    "POOL": {"clip_lo": "float16", "clip_hi": "float16", "scale": None},
    "ELTWISE": {"clip_lo": "float16", "clip_hi": "float16"},
    "UNARY": {"alpha": None},
    "SOFTMAX": {"scale": None, "in_scale": None, "out_scale": None},
    "NORM": {"eps": None, "in_scale": None, "out_scale": None},
    "GN_APPLY": {"eps": None},
    "MATMUL": {"scale": None},
}

# ---------------------------------------------------------------------------------------------------
# Error codes (docs/npu.md section 7): raised in Python as tvm_npu.NPUError, thrown by the C++
# runtime as the tvm-ffi error kind NPUError with a message that starts with the name.
# ---------------------------------------------------------------------------------------------------

ERRORS: list[dict[str, Any]] = [
    dict(zip(("name", "value", "c", "doc"), e))
    for e in [
        ("NPU_OK", 0, "kOk", "success"),
        ("ERR_INVALID_ADDR", 1, "kInvalidAddr", "an address or range outside its space, or misaligned"),
        ("ERR_OP_NOT_SUPPORTED", 2, "kOpNotSupported", "an operation or parameter the NPU cannot execute"),
        ("ERR_TASK_TOO_COMPLEX", 3, "kTaskTooComplex", "a task needs more than `max_tensors` tensors"),
        ("ERR_SRAM_OVERFLOW", 4, "kSramOverflow",
         "a working set does not fit SRAM; the message gives bytes and budget"),
        ("ERR_BAD_STREAM", 5, "kBadStream", "a command stream that is damaged, truncated or of another version"),
        ("ERR_SHAPE_MISMATCH", 6, "kShapeMismatch",
         "a run-time argument whose shape or dtype differs from the compiled one"),
        ("ERR_TIMEOUT", 7, "kTimeout", "a run that exceeded its time budget"),
        ("ERR_INVALID_MODEL", 8, "kInvalidModel",
         "a model that cannot be read: no such file, not ONNX, truncated, or failing the ONNX checker"),
        ("ERR_INVALID_CONFIG", 9, "kInvalidConfig",
         "an NPU configuration that is unknown or inconsistent, or a swept value that does not parse"),
        ("ERR_BAD_ARTIFACT", 10, "kBadArtifact",
         "an exported library that is truncated, damaged (its checksum trailer disagrees) or without the trailer"),
        ("ERR_POSITION_RANGE", 11, "kPositionRange",
         "a run-time position outside what the stream accepts (position + tokens > max_context); the state is "
         "left unchanged: reset, or compile with a larger max_context"),
        ("ERR_MEMORY_OVERFLOW", 12, "kMemoryOverflow",
         "a state (a KV cache of max_context rows) that does not fit the memory the NPU addresses; the message "
         "gives bytes needed and available: lower max_context"),
        ("ERR_LLM_CONTEXT", 13, "kLlmContext",
         "an LLM prompt or sequence longer than the compiled max_context; the cache is left unchanged"),
        ("ERR_LLM_TOKEN", 14, "kLlmToken", "an LLM token id outside [0, vocab); the cache is left unchanged"),
        ("ERR_LLM_STATE", 15, "kLlmState", "an LLM decode before any prefill (no sequence started)"),
    ]
]
# fmt: on
