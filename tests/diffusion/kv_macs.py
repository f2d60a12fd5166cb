"""The MACs of a Relax UNet's matmuls and conv2ds counted from their static shapes (numpy): the
independent count the prompt-hoisting tests hold the build's and the runtime's MACs to."""

import numpy as np
import tvm
from tvm import relax

EHS = "encoder_hidden_states"


def dims(expr) -> list:
    return [int(d) for d in expr.ty.shape]


def layers(func, reading=None) -> list:
    """The MACs of each of `func`'s matmuls and conv2ds from their static shapes; with `reading`, only
    the matmuls whose left operand is the input of that name (the cross-attention's to_k / to_v)."""
    total = []

    def visit(e):
        if not (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)):
            return
        out = int(np.prod(dims(e)))
        if e.op.name == "relax.matmul":
            a = e.args[0]
            if reading is None or (isinstance(a, relax.Var) and a.name == reading):
                total.append(out * dims(a)[-1])
        elif e.op.name == "relax.nn.conv2d" and reading is None:
            total.append(out * int(np.prod(dims(e.args[1])[1:])))

    relax.analysis.post_order_visit(func, visit)
    return total


def macs(func, reading=None) -> int:
    return sum(layers(func, reading))
