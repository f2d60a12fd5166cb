"""Graph-fuzzer families beyond the plain op DAGs of graph_fuzz.py (issue 19): graphs that TVM compiles
for the CPU and that the NPU build must compile too, with the right answer, a reasoned CPU fallback or a
documented coded refusal.

A family spec is a graph_fuzz spec with a "family" key; its nodes mix graph_fuzz's node kinds (so NPU
regions form around the new ones) with the kinds below, which this module emits:

- "shape": shape computations. `shape_flatten` Reshape(v, Concat(Slice(Shape(v), 0, 1),
  Slice(Shape(Flatten(v)), 1, 2))); `shape_rows` v reshaped to [N, C, H * W, 1] from slices of three
  shapes; `shape_expand` a constant Expand-ed to Shape(v), added to v; `expand_input` Expand(v, s) to a
  shape s given at run time (an int64 graph input: the importer binds the result with match_cast, so
  no region merges and what follows has a symbolic shape); `constant_of_shape` ConstantOfShape(
  Shape(v)) multiplied with v; `reshape_allowzero` Reshape(v, [d0, -1], allowzero=1). (TVM's importer
  cannot take a Gather of a shape, or a constant, in a new shape: such graphs are left out.)
- "constants": constants in every operand position. `const_full` a binary op with a constant of v's
  whole shape on either side; `const_concat` Concat with a constant first or second; `const_matmul`
  MatMul(constant, v); `const_conv` Conv of a constant image, added to v; `gram` MatMul(v, v^T) (no
  constant operand at all); `conv_weight_input` Conv(v, W) with W a graph input.
- "dynamic": a graph_fuzz DAG whose input has a symbolic first or last dimension (dim_param "N"; run
  with the spec's concrete size): its ops stay on the CPU (NPU_E_DYNAMIC_SHAPE). Half of them have a
  static part beside it (`static_input`: a conv + relu of a second, static input s0, and graph_fuzz
  nodes after it), which the NPU takes.
- "ops": `maxpool_dil` MaxPool with dilations 2; `bn_train` BatchNormalization training_mode=1;
  `softmax_large` Softmax of v times 100 - 3000 (fp16 would overflow without the max subtracted);
  `clip_inverted` Clip with min > max; `matmul_integer` / `conv_integer` MatMulInteger / ConvInteger of
  v quantized by QuantizeLinear; `lstm` an LSTM over v's rows with W / R / B as graph inputs, or
  peepholes.

Specs with graph inputs beyond "input" list them in "inputs": [[name, shape], ...] (float32, drawn
standard normal by graph_fuzz.inputs_for) or [name, shape, values] (int64, those values).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graph_fuzz

FAMILIES = ("shape", "constants", "dynamic", "ops")
KINDS = {
    "shape": ("shape_flatten", "shape_rows", "shape_expand", "expand_input", "constant_of_shape", "reshape_allowzero"),
    "constants": ("const_full", "const_concat", "const_matmul", "const_conv", "gram", "conv_weight_input"),
    "dynamic": ("static_input",),
    "ops": ("maxpool_dil", "bn_train", "softmax_large", "clip_inverted", "matmul_integer", "conv_integer", "lstm"),
}
ALL_KINDS = {k for ks in KINDS.values() for k in ks}
# The families drawn on the int8 datapath too (a third of them), with these kinds: the int8 oracle of
# graph_fuzz.py (numpy reference or onnxruntime) takes one float input.
INT8_FAMILIES = ("constants", "ops")
INT8_KINDS = ("const_full", "const_concat", "const_matmul", "maxpool_dil", "clip_inverted", "softmax_large")
# Kinds whose every form fits a 4-D map, a matrix, or both.
MAP_ONLY = {"shape_rows", "const_conv", "conv_weight_input", "maxpool_dil", "bn_train", "conv_integer"}
MATRIX_ONLY = {"const_matmul", "gram", "matmul_integer", "lstm"}


def out_shape(op, shapes, a):
    x = shapes[0]
    if op == "shape_flatten":
        return [x[0], int(np.prod(x[1:]))]
    if op == "shape_rows":
        return [x[0], x[1], x[2] * x[3], 1]
    if op == "reshape_allowzero":
        return [x[0], int(np.prod(x[1:]))]
    if op == "const_concat":
        return [d + a["extra"] if i == a["axis"] else d for i, d in enumerate(x)]
    if op == "const_matmul":
        return [a["rows"], x[1]]
    if op == "gram":
        return [x[0], x[0]]
    if op == "conv_weight_input":
        return [x[0], a["cout"], x[2], x[3]]
    if op == "maxpool_dil":
        return x[:2] + [graph_fuzz.conv_out(d, a["k"], 1, 2, 0, 0) for d in x[2:]]
    if op == "matmul_integer":
        return [x[0], a["n"]]
    if op == "conv_integer":
        return [x[0], a["cout"], x[2], x[3]]
    if op == "static_input":
        return [1, a["cout"]] + a["shape"][2:]
    if op == "lstm":
        return [x[0], a["hidden"] * (2 if a["direction"] == "bidirectional" else 1)]
    return list(x)


def node_depth(op, a, x) -> int:
    """fp16 roundings a node adds to its longest path: 1 for graph_fuzz's kinds; an LSTM's steps chain
    six ops each; a softmax of logits scaled by s sees their fp16 rounding error, u |logit| (|v| < ~5),
    amplified: it counts as 5 s roundings (the comparison then only catches non-finite or wild values)."""
    if op == "lstm":
        return 6 * x[0]  # (the two directions of a bidirectional one run side by side)
    if op == "softmax_large":
        return int(5 * a["scale"])
    if op in ("const_conv", "shape_expand", "constant_of_shape", "bn_train", "matmul_integer", "conv_integer"):
        return 2
    return 1


@st.composite
def family_specs(draw, family=None):
    """A family spec: a short graph_fuzz DAG, one to three nodes of the family, and more graph_fuzz nodes
    after them (so their results feed NPU ops)."""
    family = family or draw(st.sampled_from(FAMILIES))
    dtype = draw(st.sampled_from(["fp16", "fp16", "int8"])) if family in INT8_FAMILIES else "fp16"
    base = draw(graph_fuzz.graph_specs(dtype=dtype, max_nodes=2 if family != "dynamic" else 5, big=False))
    spec = {**base, "family": family, "inputs": []}
    shapes = [list(spec["input"])]
    for op, args, a in spec["nodes"]:
        shapes.append(_shape(op, [shapes[i] for i in args], a))
    if family == "dynamic":
        spec["dynamic"] = [draw(st.sampled_from([0, len(spec["input"]) - 1]))]
        if draw(st.booleans()):  # a static part beside the dynamic one: it stays on the NPU
            c, side = draw(st.sampled_from([1, 4, 8])), draw(st.integers(3, 12))
            node = [
                "static_input",
                [0],
                {"name": "s0", "shape": [1, c, side, side], "cout": draw(st.sampled_from([4, 8]))},
            ]
            spec["inputs"].append(["s0", node[2]["shape"]])
            spec["nodes"].append(node)
            shapes.append(_shape(node[0], [shapes[0]], node[2]))
            for _ in range(draw(st.integers(0, 2))):
                node = draw(graph_fuzz._node(shapes, len(shapes) - 1, "fp16", False))
                if node is not None:
                    spec["nodes"].append(node)
                    shapes.append(_shape(node[0], [shapes[i] for i in node[1]], node[2]))
    else:
        for _ in range(draw(st.integers(1, 3))):
            v = draw(st.integers(max(0, len(shapes) - 2), len(shapes) - 1))
            node = draw(_family_node(family, shapes, v, spec))
            if node is not None:
                spec["nodes"].append(node)
                shapes.append(_shape(node[0], [shapes[i] for i in node[1]], node[2]))
        for _ in range(draw(st.integers(0, 2))):  # NPU ops reading the family's values
            node = draw(graph_fuzz._node(shapes, len(shapes) - 1, dtype, False))
            if node is not None:
                spec["nodes"].append(node)
                shapes.append(_shape(node[0], [shapes[i] for i in node[1]], node[2]))
    used = {i for _, args, _ in spec["nodes"] for i in args}
    sinks = [i for i in range(1, len(shapes)) if i not in used]
    spec["outputs"] = (sinks[-1:] if dtype == "int8" else sinks[-3:]) or [len(shapes) - 1]
    return spec


def _shape(op, shapes, a):
    return out_shape(op, shapes, a) if op in ALL_KINDS else graph_fuzz.out_shape(op, shapes, a)


@st.composite
def _family_node(draw, family, shapes, v, spec):
    x = shapes[v]
    kinds = [k for k in KINDS[family] if (k not in MAP_ONLY or len(x) == 4) and (k not in MATRIX_ONLY or len(x) == 2)]
    if spec["dtype"] == "int8":  # one float input, quantized by onnxruntime's quantize_static
        kinds = [k for k in kinds if k in INT8_KINDS]
    op = draw(st.sampled_from(kinds))
    a: dict = {}
    if op == "expand_input":
        a = {"name": f"s{len(spec['inputs'])}"}
        spec["inputs"].append([a["name"], [len(x)], [1] + x[1:]])  # an int64 input with fixed values
    elif op == "const_full":
        a = {"kind": draw(st.sampled_from(graph_fuzz.BINARY)), "const_first": draw(st.booleans())}
    elif op == "const_concat":
        a = {"axis": 1 if len(x) == 4 else draw(st.sampled_from([0, 1])), "extra": draw(st.integers(1, 8))}
        a["const_first"] = draw(st.booleans())
    elif op == "const_matmul":
        a = {"rows": draw(st.integers(1, 16))}
    elif op == "const_conv":
        a = {"cin": draw(st.sampled_from([1, 3, 8]))}
    elif op == "conv_weight_input":
        a = {"cout": draw(st.sampled_from([1, 4, 8])), "name": f"w{len(spec['inputs'])}"}
        spec["inputs"].append([a["name"], [a["cout"], x[1], 3, 3]])
    elif op == "maxpool_dil":
        a = {"k": draw(st.sampled_from([2, 3]))}
        if min(out_shape(op, [x], a)[2:]) < 1:
            return None
    elif op == "bn_train":
        a = {"eps": 1e-3}
        if x[0] * x[2] * x[3] < 2:  # a variance of one value
            return None
    elif op == "softmax_large":
        a = {"scale": draw(st.sampled_from([100.0, 700.0, 3000.0])), "axis": -1}
    elif op == "clip_inverted":
        a = {"lo": draw(st.sampled_from([0.5, 2.0])), "hi": draw(st.sampled_from([-1.0, 0.0, 0.25]))}
    elif op == "matmul_integer":
        a = {"n": draw(st.integers(1, 32)), "zp": draw(st.sampled_from([0, 3]))}
    elif op == "conv_integer":
        a = {"cout": draw(st.sampled_from([1, 4, 8])), "zp": draw(st.sampled_from([0, 3]))}
    elif op == "lstm":
        a = {
            "hidden": draw(st.sampled_from([4, 8])),
            "direction": draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
            "as_inputs": draw(st.booleans()),
            "peepholes": draw(st.booleans()),
        }
        if x[1] > 64:
            return None
        if a["as_inputs"]:
            dirs, h, k = (2 if a["direction"] == "bidirectional" else 1), a["hidden"], x[1]
            a["names"] = [f"{n}{len(spec['inputs'])}" for n in "WRB"]
            spec["inputs"] += [[a["names"][0], [dirs, 4 * h, k]], [a["names"][1], [dirs, 4 * h, h]]]
            spec["inputs"].append([a["names"][2], [dirs, 8 * h]])
    return [op, [v], a]


# --------------------------------------------------------------------------------------------------
# Spec -> ONNX


def emit(b, op, ins, x, a):
    """Emit node kind `op` of this module into graph_fuzz's _Builder `b`; returns its output name."""
    rng = b.rng
    i64 = np.int64
    if op in ("shape_flatten", "shape_rows"):
        # (TVM's importer takes a concat of shape slices as a new shape, not one with a constant or a
        # Gather in it: "Reshape requires the input new shape to be Shape".)
        def dims(value, lo, hi):
            return b.node("Slice", [b.node("Shape", [value]), b.const([lo], i64), b.const([hi], i64)])

        if op == "shape_flatten":
            target = b.node("Concat", [dims(ins[0], 0, 1), dims(b.node("Flatten", ins), 1, 2)], axis=0)
        else:
            rows = dims(b.node("Flatten", ins, axis=2), 1, 2)
            one = dims(b.node("GlobalAveragePool", ins), 3, 4)
            target = b.node("Concat", [dims(ins[0], 0, 2), rows, one], axis=0)
        return b.node("Reshape", [ins[0], target])
    if op == "shape_expand":
        c = rng.uniform(0.5, 1.5, [1, x[1], 1, 1] if len(x) == 4 else [1, x[1]])
        return b.node("Add", [ins[0], b.node("Expand", [b.const(c), b.node("Shape", ins)])])
    if op == "expand_input":
        return b.node("Expand", [ins[0], a["name"]])
    if op == "constant_of_shape":
        value = helper.make_tensor("value", TensorProto.FLOAT, [1], [float(rng.uniform(0.5, 1.5))])
        return b.node("Mul", [b.node("ConstantOfShape", [b.node("Shape", ins)], value=value), ins[0]])
    if op == "reshape_allowzero":
        return b.node("Reshape", [ins[0], b.const([x[0], -1], i64)], allowzero=1)
    if op == "const_full":
        c = b.const(rng.uniform(0.5, 1.5, x) * rng.choice([-1, 1], x))
        return b.node(a["kind"], [c, ins[0]] if a["const_first"] else [ins[0], c])
    if op == "const_concat":
        shape = [a["extra"] if i == a["axis"] else d for i, d in enumerate(x)]
        c = b.const(rng.standard_normal(shape))
        return b.node("Concat", [c, ins[0]] if a["const_first"] else [ins[0], c], axis=a["axis"])
    if op == "const_matmul":
        return b.node("MatMul", [b.const(rng.standard_normal((a["rows"], x[0])) / np.sqrt(x[0])), ins[0]])
    if op == "const_conv":
        image = b.const(rng.standard_normal((x[0], a["cin"], x[2], x[3])))
        w = b.const(rng.standard_normal((x[1], a["cin"], 3, 3)) / np.sqrt(9 * a["cin"]))
        conv = b.node("Conv", [image, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        return b.node("Add", [conv, ins[0]])
    if op == "gram":
        return b.node("MatMul", [ins[0], b.node("Transpose", ins, perm=[1, 0])])
    if op == "conv_weight_input":
        return b.node("Conv", [ins[0], a["name"]], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    if op == "static_input":  # a conv + relu of the static input s0 (its argument only orders it)
        w = rng.standard_normal((a["cout"], a["shape"][1], 3, 3)) / np.sqrt(9 * a["shape"][1])
        return b.node("Relu", [b.node("Conv", [a["name"], b.const(w)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    if op == "maxpool_dil":
        return b.node("MaxPool", ins, kernel_shape=[a["k"]] * 2, dilations=[2, 2])
    if op == "bn_train":
        c = x[1]
        args = [rng.uniform(0.5, 1.5, c), rng.standard_normal(c) * 0.1, rng.standard_normal(c) * 0.1]
        args.append(rng.uniform(0.5, 1.5, c))
        return b.node("BatchNormalization", ins + [b.const(v) for v in args], epsilon=a["eps"], training_mode=1)
    if op == "softmax_large":
        return b.node("Softmax", [b.node("Mul", [ins[0], b.const(a["scale"])])], axis=a["axis"])
    if op == "clip_inverted":
        return b.node("Clip", [ins[0], b.const(a["lo"]), b.const(a["hi"])])
    if op in ("matmul_integer", "conv_integer"):
        scale = 0.05
        q = b.node("QuantizeLinear", [ins[0], b.const(scale), b.const(np.uint8(128), np.uint8)])
        if op == "matmul_integer":
            w = rng.integers(-20, 20, (x[1], a["n"])).astype(np.int8)
            y = b.node("MatMulInteger", [q, b.const(w, np.int8), b.const(np.uint8(128), np.uint8)])
        else:
            w = rng.integers(-20, 20, (a["cout"], x[1], 3, 3)).astype(np.int8)
            y = b.node("ConvInteger", [q, b.const(w, np.int8), b.const(np.uint8(128), np.uint8)], pads=[1] * 4)
        wscale = 1.0 / (20 * np.sqrt(w[0].size))
        return b.node("Mul", [b.node("Cast", [y], to=TensorProto.FLOAT), b.const(scale * wscale)])
    if op == "lstm":
        return _lstm(b, ins, x, a)
    raise ValueError(f"unknown node kind {op}")


def _lstm(b, ins, x, a):
    """An LSTM over the rows of v ([T, K] -> sequence of T steps, batch 1), Y reshaped to [T, dirs * H]."""
    rng, h, k = b.rng, a["hidden"], x[1]
    dirs = 2 if a["direction"] == "bidirectional" else 1
    seq = b.node("Reshape", [ins[0], b.const([x[0], 1, k], np.int64)])
    if a["as_inputs"]:
        w, r, bias = a["names"]
    else:
        w = b.const(rng.standard_normal((dirs, 4 * h, k)) / np.sqrt(k))
        r = b.const(rng.standard_normal((dirs, 4 * h, h)) / np.sqrt(h))
        bias = b.const(rng.standard_normal((dirs, 8 * h)) * 0.1)
    inputs = [seq, w, r, bias]
    if a["peepholes"]:
        inputs += ["", "", "", b.const(rng.standard_normal((dirs, 3 * h)) * 0.1)]
    y = b.node("LSTM", inputs, hidden_size=h, direction=a["direction"])
    # Y: [T, dirs, 1, H] -> [T, 1, dirs, H] -> [T, dirs * H]
    y = b.node("Transpose", [y], perm=[0, 2, 1, 3])
    return b.node("Reshape", [y, b.const([x[0], dirs * h], np.int64)])


def graph_inputs(spec) -> list:
    """The ONNX graph inputs of a spec: "input" (its first axis named "N" when dynamic) and "inputs"."""
    shape = list(spec["input"])
    for axis in spec.get("dynamic", []):
        shape[axis] = "N"  # (a name, not a size: the importer makes it a symbolic variable)
    infos = [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)]
    infos += [
        helper.make_tensor_value_info(n, TensorProto.INT64 if value else TensorProto.FLOAT, s)
        for n, s, *value in spec.get("inputs", [])
    ]
    return infos


def output_shape(spec, shape):
    """An output's declared shape: with a dynamic input, every axis named (the importer infers them)."""
    return [f"d{i}" for i in range(len(shape))] if spec.get("dynamic") else shape
