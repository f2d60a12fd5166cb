"""One checked boundary for every call into compiled code: the arguments against the compiled signature,
and one call at a time on a VM.

TVM's VM checks its arguments itself, but with its internal text ("Check failed ... match_cast"), and a
Relax VM called from two threads at once corrupts the heap (it is not re-entrant). `Model` wraps one
VirtualMachine: each call is checked against the signature the executable carries and runs under the
model's lock. `tvm_npu.Model`, `AsyncModel`, `StreamingSession` and the `LLM` call through it.

The signature is read from the executable itself, so it is there for a library loaded from a file as
much as for a fresh build: TVM's VM lowering keeps, for every parameter of an entry function, the
annotation it checks the argument against ("ErrorContext(fn=main, loc=param[0], param=x,
annotation=R.Tensor((1, 3, 32, 32), dtype="float32"))") in the executable's constant pool, which its
`stats` function prints. `signature` parses those.

What a call may pass for a tensor parameter: a numpy array (any strides: it is copied into a compact
tensor) or a `tvm.runtime.Tensor` (compact, on the CPU), of exactly the compiled dtype (native byte
order) and shape; a symbolic dimension takes any size, the same size wherever its name recurs. Anything
else is NPUError(ERR_SHAPE_MISMATCH) naming the input and what to pass.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

import numpy as np

from ..contract.errors import NPUError

# One annotation of the constant pool: the entry function, the parameter's index and name, its annotation.
_CONTEXT = re.compile(r'ErrorContext\(fn=([^,]+), loc=param\[(\d+)\], param=([^,]*), annotation=(.*?)\) "(?=, |\])')
_TENSOR = re.compile(r'R\.Tensor\((?:\((.*)\), )?dtype="(\w+)"\)$')
_INT = re.compile(r"(?:T\.int64\()?(\d+)\)?$")


@dataclass(frozen=True)
class Param:
    """A parameter of an entry function: `dims` (an int, or a str naming a symbolic size, per axis; None
    when the rank is unknown) and `dtype` for a tensor; `dtype` None for anything else (a tuple, a
    shape), which is passed through unchecked."""

    name: str
    dtype: str | None
    dims: tuple | None

    def describe(self) -> str:
        if self.dtype is None:
            return "a value"
        return f"{self.dtype} {list(self.dims) if self.dims is not None else '[...]'}"


def _dims(text: str | None) -> tuple | None:
    if text is None:
        return None
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _INT.match(part)
        out.append(int(m.group(1)) if m else part)
    return tuple(out)


def _stats(executable) -> str:
    for get in (lambda: executable.stats(), lambda: executable["stats"](), lambda: executable.mod["stats"]()):
        try:
            return str(get())
        except (AttributeError, KeyError, TypeError):
            continue
    return ""


def signature(executable, entry: str = "main") -> list[Param] | None:
    """The parameters of `entry` in `executable` (a built Executable or a loaded library), from the
    annotations its VM lowering kept (module docstring); None when it carries none for `entry`."""
    found = {}
    for fn, index, name, annotation in _CONTEXT.findall(_stats(executable)):
        if fn != entry:
            continue
        m = _TENSOR.match(annotation)
        found[int(index)] = Param(name, m.group(2), _dims(m.group(1))) if m else Param(name, None, None)
    if not found or sorted(found) != list(range(len(found))):
        return None
    return [found[i] for i in range(len(found))]


def _fail(message: str):
    raise NPUError("ERR_SHAPE_MISMATCH", message)


def _what(value) -> str:
    import tvm  # pylint: disable=import-outside-toplevel

    if isinstance(value, np.ndarray | np.generic):
        order = " (big-endian)" if value.dtype.byteorder == ">" else ""
        return f"{value.dtype.name}{order} {list(np.shape(value))}"
    if isinstance(value, tvm.runtime.Tensor):
        return f"tvm tensor {value.dtype} {list(value.shape)}"
    return f"a Python {type(value).__name__}"


def check_arguments(params: list[Param] | None, args: tuple, entry: str = "main") -> list:
    """`args` as the VM takes them (numpy arrays copied into compact tensors) once each matches
    `params` (`signature`); NPUError(ERR_SHAPE_MISMATCH) saying what to pass otherwise. Without a
    signature (None) the arguments are only converted."""
    import tvm  # pylint: disable=import-outside-toplevel

    if params is not None and len(args) != len(params):
        want = ", ".join(f"{p.name}: {p.describe()}" for p in params)
        _fail(f"{entry} takes {len(params)} input(s) ({want}), {len(args)} given")
    sizes: dict = {}
    out = []
    for i, value in enumerate(args):
        p = params[i] if params is not None else Param(str(i), None, None)
        head = f"input {i} '{p.name}' of {entry}: {p.describe()} expected, got {_what(value)}"
        if p.dtype is None:  # a tuple or shape parameter: the VM checks it
            if isinstance(value, np.ndarray):
                value = tvm.runtime.tensor(np.ascontiguousarray(value))
            out.append(value)
            continue
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(value, np.ndarray):
            dtype, shape = value.dtype, tuple(value.shape)
            if dtype.byteorder == ">":
                _fail(f"{head}: convert it to native byte order with .astype(np.{np.dtype(p.dtype).name})")
            dtype = dtype.name
        elif isinstance(value, tvm.runtime.Tensor):
            dtype, shape = str(value.dtype), tuple(int(d) for d in value.shape)
            if value.device.dlpack_device_type() != 1:
                _fail(f"{head}: on {value.device}; pass a CPU tensor (tvm.runtime.tensor(array))")
            strides = getattr(value, "strides", None)
            if strides is not None and tuple(strides) != tuple(_compact(shape)):
                _fail(f"{head}: strided (strides {list(strides)}); pass a compact copy")
        else:
            hint = "a dict of inputs" if isinstance(value, dict) else "an array"
            _fail(f"{head}: pass a numpy array (np.asarray(value, np.{p.dtype})) or a tvm tensor, not {hint}")
        if dtype != p.dtype:
            _fail(f"{head}: cast with .astype(np.{p.dtype})")
        _check_shape(p, shape, sizes, head)
        out.append(tvm.runtime.tensor(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value)
    return out


def _compact(shape: tuple) -> list:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _check_shape(p: Param, shape: tuple, sizes: dict, head: str) -> None:
    if p.dims is None:
        return
    if len(shape) != len(p.dims):
        _fail(f"{head}: rank {len(shape)}, the model takes rank {len(p.dims)}")
    for axis, (want, got) in enumerate(zip(p.dims, shape)):
        if isinstance(want, int):
            if want != got:
                _fail(f"{head}: axis {axis} is {got}, the model was compiled for {want}")
        elif got == 0:  # TVM's generated code divides by a symbolic size (SIGFPE on 0)
            _fail(f"{head}: axis {axis} ({want}) is 0; give each axis at least one element")
        elif want.isidentifier() and sizes.setdefault(want, (got, p.name))[0] != got:  # one size per name
            _fail(f"{head}: axis {axis} ({want}) is {got}, but {want} is {sizes[want][0]} in '{sizes[want][1]}'")


class Model:
    """A compiled model behind the checked boundary: ``Model(ex_or_library)(x, ...)``.

    `executable` is what `tvm_npu.build` / `tvm.compile` return or what `tvm_npu.load_module` loaded.
    ``model(*args)`` runs ``main``, ``model.run(entry, *args)`` any entry function, with every argument
    checked first (`check_arguments`); the result is numpy (a list for several outputs), or the VM's
    own objects from ``model.call``. Calls from several threads take turns on the model's lock: a
    Relax VM is not re-entrant. For parallel work, make one Model per thread."""

    def __init__(self, executable, device=None):
        import tvm  # pylint: disable=import-outside-toplevel
        from tvm import relax  # pylint: disable=import-outside-toplevel

        if isinstance(executable, str | os.PathLike):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"Model takes a built or loaded model, not the path {str(executable)!r}: load it first with "
                "tvm_npu.load_module(path)",
            )
        if not isinstance(executable, tvm.runtime.Module | tvm.runtime.Executable):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f'Model takes what tvm_npu.build / tvm.compile(..., target="npu") return or what '
                f"tvm_npu.load_module loaded, not {type(executable).__name__}",
            )
        if device is not None and not isinstance(device, tvm.runtime.Device):
            raise NPUError("ERR_INVALID_CONFIG", f"device={device!r}: pass tvm.cpu() (or leave it out)")
        self.executable = executable
        try:
            self.vm = relax.VirtualMachine(executable, device or tvm.cpu())
        except (AttributeError, RuntimeError, ValueError) as err:  # a library that is not a VM executable
            raise NPUError(
                "ERR_BAD_ARTIFACT",
                f"not a compiled model (no Relax VM executable inside: {type(err).__name__}): give a library "
                "written by tvm_npu.export_library",
            ) from None
        self.lock = threading.RLock()
        self._signatures: dict = {}

    def signature(self, entry: str = "main") -> list[Param] | None:
        """The parameters of `entry` (`boundary.signature`), read once."""
        if entry not in self._signatures:
            self._signatures[entry] = signature(self.executable, entry)
        return self._signatures[entry]

    def function(self, entry: str):
        try:
            return self.vm[entry]
        except (AttributeError, KeyError, RuntimeError):
            raise NPUError("ERR_SHAPE_MISMATCH", f"the model has no entry function {entry!r}") from None

    def call(self, entry: str, *args):
        """Run `entry` on checked `args` under the lock; the VM's result as it is."""
        checked = check_arguments(self.signature(entry), args, entry)
        with self.lock:
            return self.function(entry)(*checked)

    def run(self, entry: str, *args):
        """`call`, its result as numpy arrays (a list for a tuple of outputs)."""
        return as_numpy(self.call(entry, *args))

    def __call__(self, *args, **named):
        if named:
            _fail(f"main takes its inputs in order, not by name ({', '.join(named)}=): call model(x, ...)")
        return self.run("main", *args)


def as_numpy(out):
    """A VM result as numpy: one array, or a list for a tuple of outputs."""
    return out.numpy() if hasattr(out, "numpy") else [as_numpy(o) for o in out]
