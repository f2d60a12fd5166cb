"""Stage 3c — layouts: how the NPU stores each 4-D tensor of a region (docs/npu.md section 3), decided in
one place for the region cuts (regions.py) and the lowering (backend/lower) alike.

A 4-D tensor is an NCHW (or NHWC) map when a spatial op reads or writes it (conv2d, pooling, a channel
concat, an elementwise op whose second operand is per channel), and rows of its last axis (ROWS:
[1, prod(dims[:-1]), 1, last], the host bytes as they are) when a row-wise op does (matmul, dense, softmax,
norm, rope, an elementwise op whose second operand is per last-axis element). A reshape keeps the stored
rows in one layout or the other; a permute view (constraint_permute_view) has a map on one side and its
pixels as rows on the other. Ops that work element by element (add, activations, a same-shape or
scalar elementwise op, requantization, staging) store their operands and result alike, so the 4-D tensors
of such an op form one group with one layout. A group that no op constrains stays an NCHW map. Tensors of
another rank are always rows.

Two ops of one region that want a tensor in two layouts cannot both be lowered: regions.py cuts the region
between them, so the tensor crosses DDR and each region reads it in its own layout.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.values import static_shape
from .constraints import NCHW, NHWC, ROWS, permute_view_layouts, reshape_layouts
from .patterns import PREFIX

ANY = frozenset((NCHW, NHWC, ROWS))
# Composite families (names without "npu." / "npu.q" and fused suffixes) whose 4-D tensors are all rows.
ROW_FAMILIES = ("dense", "matmul", "softmax", "layer_norm", "rms_norm", "rope", "slice_rows")


def _rank4(expr) -> bool:
    shape = static_shape(expr) if isinstance(expr, relax.Var) else None
    return shape is not None and len(shape) == 4


def channel_layouts(out_shape, b_shape) -> frozenset | None:
    """The layouts in which an elementwise op's operand `b_shape`, broadcast along one axis of a 4-D result,
    is per element of the stored row (ELTWISE's per-channel b, docs/npu.md section 6): axis 1 in an NCHW
    map, the last axis in rows or an NHWC map; None for a same-shape or scalar b (any layout)."""
    if b_shape is None or len(out_shape) != 4 or len(b_shape) > 4 or list(b_shape) == list(out_shape):
        return None
    full = [1] * (4 - len(b_shape)) + list(b_shape)
    varying = tuple(i for i, d in enumerate(full) if d != 1)
    if varying == (0, 1) and full[0] == out_shape[0]:  # one vector per image: the image's row of an NCHW map
        varying = (1,)
    return {(1,): frozenset((NCHW,)), (3,): frozenset((ROWS, NHWC))}.get(varying)


def _family(func: relax.Function) -> str:
    name = str(func.attrs["Composite"]).removeprefix(f"{PREFIX}.")
    return name[1:] if name.startswith("q") else name  # the int8 form: "qconv2d" (patterns.py's naming)


def _calls(func: relax.Function) -> dict:
    calls: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op):
                calls.setdefault(b.value.op.name.removeprefix("relax."), []).append(b.value)
    return calls


def _region_var(func: relax.Function, args, expr):
    """The region value behind an operand of a composite's op (through its dequantize in int8)."""
    env = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    params = dict(zip(func.params, args))
    while isinstance(expr, relax.Var) and expr in env:
        expr = env[expr]
        if isinstance(expr, relax.Call) and expr.op.name == "relax.dequantize":
            expr = expr.args[0]
    return params.get(expr)


def composite_rules(func: relax.Function, args, out) -> list:
    """[(region vars that share one layout, the layouts they may take)] of one composite call."""
    family, calls = _family(func), _calls(func)
    tensors = [a for a in args if _rank4(a)] + ([out] if _rank4(out) else [])
    if family.startswith("conv2d"):
        return [(tensors, frozenset((str(calls["nn.conv2d"][0].attrs.data_layout),)))]
    if family in ("max_pool2d", "avg_pool2d"):
        return [(tensors, frozenset((str(calls[f"nn.{family}"][0].attrs.layout),)))]
    if family.startswith("group_norm"):  # GN_STATS / GN_APPLY read and write NHWC pixels: an NCHW map
        return [(tensors, frozenset((NCHW,)))]
    if family in ("global_avg_pool", "concat", "resize"):  # a 4-D concat joins channels (a rows concat is not 4-D)
        return [(tensors, frozenset((NCHW,)))]
    if family.startswith(ROW_FAMILIES):
        return [(tensors, frozenset((ROWS,)))]
    if family == "permute_view":  # the map on one side, its pixels as rows on the other
        call = calls["permute_dims"][0]
        src, dst = permute_view_layouts(call)
        x, y = (_region_var(func, args, call.args[0]), out)
        return [(g, frozenset((lay,))) for g, lay in (([x] if _rank4(x) else [], src), ([y] if _rank4(y) else [], dst))]
    if family == "reshape":
        call = calls["reshape"][0]
        return [(tensors, reshape_layouts(static_shape(call.args[0]), static_shape(call)))]
    if family.startswith("eltwise_"):
        call = calls[family.split("_")[1]][0]
        out_shape = static_shape(call)
        for arg in call.args[:2]:  # the operand broadcast along one axis, if any
            layouts = channel_layouts(out_shape, static_shape(arg))
            if layouts is not None:
                b = _region_var(func, args, arg)
                rest = [t for t in tensors if b is None or not t.same_as(b)]
                return [(rest, layouts)] + ([([b], layouts)] if _rank4(b) else [])
    return [(tensors, ANY)]  # element by element: operands and result alike


class Layouts:
    """The layout of every 4-D region tensor of a run of composite calls, or the conflict that prevents one."""

    def __init__(self, calls):
        """`calls`: (result var, composite function, args) of each composite call, in order."""
        self._parent: dict = {}
        self._allowed: dict = {}  # group root -> the layouts every op of the group allows
        self._who: dict = {}  # group root -> (composite, layouts) that constrained it
        self.conflict: str | None = None
        for out, func, args in calls:
            for group, allowed in composite_rules(func, args, out):
                self._add(group, allowed, str(func.attrs["Composite"]))

    def _root(self, v):
        while not self._parent.setdefault(v, v).same_as(v):
            v = self._parent[v]
        return v

    def _add(self, group: list, allowed: frozenset, composite: str) -> None:
        if not group:
            return
        roots = list(dict.fromkeys(self._root(v) for v in group))
        keep = roots[0]
        want = allowed
        who = [(composite, allowed)] if allowed != ANY else []
        for r in roots:
            want = want & self._allowed.pop(r, ANY)
            who += self._who.pop(r, [])
            self._parent[r] = keep
        self._parent[keep] = keep
        self._allowed[keep], self._who[keep] = want, who
        if not want and self.conflict is None:
            wants = ", ".join(f"{c} {'/'.join(sorted(a))}" for c, a in who)
            self.conflict = f"tensor {group[0].name} is wanted as {wants}"

    def layout(self, var) -> str:
        """How `var` is stored: ROWS unless it is 4-D; a 4-D tensor takes its group's layout (NCHW when
        free to)."""
        if not _rank4(var):
            return ROWS
        allowed = self._allowed.get(self._root(var), ANY) if var in self._parent else ANY
        return next((layout for layout in (NCHW, ROWS, NHWC) if layout in allowed), NCHW)
