"""The activation functions of ONNX's recurrent ops (LSTM's f, g, h) as plain Relax ops.

Each is the exact formula of the ONNX operator list, written with ops TVM's CPU build runs exactly; the
partitioner then puts on the NPU what maps onto its commands (sigmoid, tanh, leaky relu, a relu or clip
fused into the add before it, scalar multiply and add) and leaves the rest (where, exp, log, divide) on
the CPU. Nothing is approximated here.

`activation_alpha` / `activation_beta` are consumed in the order of the functions, each function taking
only the values it uses; a function whose value the lists run out of gets onnxruntime's default
(LeakyRelu 0.01, HardSigmoid 0.2 / 0.5, Elu 1.0, otherwise 0: onnxruntime's ThresholdedRelu, Affine and
ScaledTanh default to 0, which the outputs are compared against).
"""

from __future__ import annotations

from tvm import relax

from ..contract.errors import NPUError

# name -> (uses alpha, uses beta, default alpha, default beta), as onnxruntime's rnn_helpers read them
USAGE = {
    "sigmoid": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "relu": (False, False, 0.0, 0.0),
    "affine": (True, True, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 0.0, 0.0),
    "scaledtanh": (True, True, 0.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


def _scalar(value: float) -> relax.Constant:
    return relax.const(float(value), "float32")


def _apply(name: str, x, alpha: float, beta: float):
    op = relax.op
    if name == "sigmoid":
        return op.sigmoid(x)
    if name == "tanh":
        return op.tanh(x)
    if name == "relu":
        return op.nn.relu(x)
    if name == "affine":
        return op.add(op.multiply(x, _scalar(alpha)), _scalar(beta))
    if name == "leakyrelu":
        return op.nn.leakyrelu(x, alpha)
    if name == "thresholdedrelu":
        return op.where(op.greater(x, _scalar(alpha)), x, _scalar(0.0))
    if name == "scaledtanh":
        return op.multiply(op.tanh(op.multiply(x, _scalar(beta))), _scalar(alpha))
    if name == "hardsigmoid":
        return op.clip(op.add(op.multiply(x, _scalar(alpha)), _scalar(beta)), 0.0, 1.0)
    if name == "elu":
        return op.where(
            op.greater_equal(x, _scalar(0.0)), x, op.multiply(op.subtract(op.exp(x), _scalar(1.0)), _scalar(alpha))
        )
    if name == "softsign":
        return op.divide(x, op.add(op.abs(x), _scalar(1.0)))
    assert name == "softplus", name
    return op.log(op.add(op.exp(x), _scalar(1.0)))


def activations(attr, defaults: tuple, directions: int) -> list:
    """Per direction, the functions (callables expr -> expr) of the `activations` attribute, or the
    `defaults` (e.g. LSTM's Sigmoid, Tanh, Tanh); NPUError(ERR_INVALID_MODEL) for an unknown name or a
    list of the wrong length."""
    names = [a.decode() if isinstance(a, bytes) else str(a) for a in attr.get("activations", [])]
    if not names:
        names = list(defaults) * directions
    elif len(names) == len(defaults) and directions == 2:
        names = names * 2  # one list for both directions, as onnxruntime reads it
    if len(names) != len(defaults) * directions:
        raise NPUError(
            "ERR_INVALID_MODEL", f"recurrent op: activations {names} must name {len(defaults)} functions per direction"
        )
    alphas, betas = list(attr.get("activation_alpha", [])), list(attr.get("activation_beta", []))
    funcs = []
    for name in names:
        key = name.lower()
        if key not in USAGE:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"recurrent op: activation {name!r} is not one of ONNX's ({', '.join(USAGE)}); "
                "export the model with one of them",
            )
        uses_alpha, uses_beta, alpha, beta = USAGE[key]
        if uses_alpha and alphas:
            alpha = float(alphas.pop(0))
        if uses_beta and betas:
            beta = float(betas.pop(0))
        funcs.append(lambda x, key=key, alpha=alpha, beta=beta: _apply(key, x, alpha, beta))
    return [funcs[k : k + len(defaults)] for k in range(0, len(funcs), len(defaults))]
