"""The lowering registry: composite name -> the function that turns one composite call into a Layer.

Each family of NPU ops is one module of this package whose lowering function registers, with `@lowers`,
under the names of its composites (partition/patterns.py, without the "npu." prefix). A new family is
its pattern there and its module here (imported in __init__.py); nothing else changes. Fused variants
find their family by dropping the suffixes patterns.py appends: "conv2d_bias_relu" lowers as "conv2d"
(the lowering reads the fused bias and activation from the composite's body).
"""

from __future__ import annotations

from ...contract.errors import NPUError
from ...partition.patterns import ACTIVATIONS, PREFIX

# Filled once, at import, by the @lowers decorators of this package, and only read after: a table of
# functions, not state that a build changes.
_LOWERINGS: dict = {}

# What patterns.py appends to a family's name for the ops fused after its op: "[_bias][_relu|_clip]".
FUSED_SUFFIXES = tuple(f"_{act}" for act in ACTIVATIONS) + ("_bias",)


def lowers(*names: str):
    """Register the decorated function as the lowering of the composites `names`.

    Parameters
    ----------
    *names : str
        Composite names without the "npu." prefix ("conv2d", "qconv2d"); fused variants need no entry.

    Returns
    -------
    callable
        The decorator. The function it registers takes a `composite.Composite` and returns its Layer,
        or None for a composite that becomes no layer (quantized staging).
    """

    def register(fn):
        for name in names:
            if name in _LOWERINGS:
                raise ValueError(f"composite {name} has two lowerings: {_LOWERINGS[name].__name__}, {fn.__name__}")
            _LOWERINGS[name] = fn
        return fn

    return register


def both_datapaths(*names: str) -> tuple:
    """`names` and their int8 forms ("conv2d" -> "conv2d", "qconv2d"; patterns.py's naming)."""
    return names + tuple(f"q{name}" for name in names)


def lowering_for(composite: str):
    """The lowering function of a composite.

    Parameters
    ----------
    composite : str
        The composite's name, e.g. "npu.qconv2d_bias_relu".

    Returns
    -------
    callable
        The function its family registered with `lowers`.

    Raises
    ------
    NPUError
        ERR_OP_NOT_SUPPORTED for a composite no family lowers: a pattern without its lowering is a
        compiler bug, caught here rather than as a wrong layer.
    """
    name = composite.removeprefix(f"{PREFIX}.")
    while name not in _LOWERINGS:
        base = next((name.removesuffix(s) for s in FUSED_SUFFIXES if name.endswith(s)), None)
        if base is None:
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"no lowering is registered for composite {composite}")
        name = base
    return _LOWERINGS[name]
