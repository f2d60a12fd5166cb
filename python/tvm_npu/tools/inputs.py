"""A model's inputs however a user gives them: one array, a list in `main`'s order, a dict by name, or
.npy / .npz files; checked against `main`'s parameters before anything runs.

A bare array is one input, never a list of rows (numpy would iterate it along axis 0 and feed each row as
an input); an array of strings (a file name that went through `np.asarray`) is refused instead of
reaching TVM as dtype '<U1'. Every mistake is NPUError(ERR_SHAPE_MISMATCH) naming the input and what
it expects.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..contract.errors import NPUError


def _fail(message: str):
    raise NPUError("ERR_SHAPE_MISMATCH", message)


def read_file(path: str | os.PathLike) -> np.ndarray | dict:
    """The array of a .npy file, or the {name: array} of a .npz file (in the order it was saved)."""
    p = Path(path)
    if not p.is_file():
        _fail(f"input file {str(p)!r} does not exist")
    try:
        data = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        _fail(f"cannot read input file {str(p)!r} as .npy / .npz: {err}")
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            return {k: data[k] for k in data.files}
    return data


def signature(mod) -> list:
    """(name, shape, dtype) of each parameter of `mod["main"]`; a symbolic dimension is None."""
    out = []
    for p in mod["main"].params:
        dims = [int(d) if hasattr(d, "value") else None for d in p.ty.shape] if hasattr(p.ty, "shape") else None
        out.append((p.name, dims, str(p.ty.dtype)))
    return out


def _array(value, name: str) -> np.ndarray:
    if isinstance(value, (str, os.PathLike)):
        value = read_file(value)
        if isinstance(value, dict):
            if len(value) != 1:
                _fail(f"input {name}: the .npz file holds {len(value)} arrays ({', '.join(value)}); give one")
            value = next(iter(value.values()))
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        _fail(
            f"input {name}: expected a numeric array, got dtype {array.dtype} (load files with np.load, "
            "or pass their paths)"
        )
    return np.ascontiguousarray(array)


def as_arguments(inputs, params: list | None = None, names: list | None = None) -> list:
    """`inputs` as the list of arrays `main` takes.

    Parameters
    ----------
    inputs : numpy.ndarray, list, tuple, dict, str or os.PathLike
        One array (a model with one input), arrays in `main`'s order, {name: array}, or a .npy / .npz
        file; list items may be file paths too. A .npz file is {name: array}.
    params : list, optional
        `signature(mod)`; without it (an exported library) the arrays are taken in the order given and
        checked by the runtime.
    names : list, optional
        Without `params`: main's input names (an exported library's signature), which a dict or .npz
        must match.

    Returns
    -------
    list of numpy.ndarray
    """
    names = [n for n, _, _ in params] if params is not None else names
    if isinstance(inputs, (str, os.PathLike)):
        inputs = read_file(inputs)
    if isinstance(inputs, dict):
        if names is None:
            arrays = [_array(v, k) for k, v in inputs.items()]
        else:
            missing, extra = [n for n in names if n not in inputs], [k for k in inputs if k not in names]
            if missing or extra:
                _fail(f"main takes inputs {names}; missing {missing}, unknown {extra}")
            arrays = [_array(inputs[n], n) for n in names]
    elif isinstance(inputs, np.ndarray) or np.isscalar(inputs):
        arrays = [_array(inputs, names[0] if names else "0")]
    elif isinstance(inputs, (list, tuple)):
        arrays = [_array(v, names[i] if names and i < len(names) else str(i)) for i, v in enumerate(inputs)]
    else:
        _fail(f"inputs: give an array, a list, a dict by name or a .npy/.npz path, not {type(inputs).__name__}")
    if params is not None:
        check(arrays, params)
    return arrays


def check(arrays: list, params: list) -> None:
    """Number, shape (static dimensions) and dtype of `arrays` against `params` (`signature`)."""
    if len(arrays) != len(params):
        _fail(f"main takes {len(params)} input(s) ({', '.join(n for n, _, _ in params)}), {len(arrays)} given")
    for (name, dims, dtype), a in zip(params, arrays):
        shape_ok = dims is None or (a.ndim == len(dims) and all(d is None or d == s for d, s in zip(dims, a.shape)))
        if not shape_ok or str(a.dtype) != dtype:
            want = "?" if dims is None else tuple("?" if d is None else d for d in dims)
            _fail(f"input {name}: expected shape {want} {dtype}, got {tuple(a.shape)} {a.dtype}")
