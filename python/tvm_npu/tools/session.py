"""Sessions: streaming inference with carried state (StreamingSession), and asynchronous calls with a
timeout (AsyncModel, below).

A recurrent model runs chunk by chunk, its state carried from call to call:

    sess = tvm_npu.StreamingSession.from_onnx(onnx_model, state={"h0": "Y_h", "c0": "Y_c"})
    for chunk in audio_chunks:               # each [T_chunk, batch, features], the model's chunk length
        y = sess(X=chunk)["Y"]
    sess.reset()                             # the next utterance starts from zero state

`state` maps each state input of the model (an LSTM's initial_h / initial_c) to the output that holds its
value after the chunk (Y_h / Y_c). Between calls the state stays in the session's device tensors (it is
never converted back to numpy); feeding a sequence in K chunks gives exactly the result of feeding it
whole (tests/tools/test_session.py). The chunk length is the model's static sequence length.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import tvm

from .. import runtime
from ..contract.errors import NPUError


def _shape(value_info) -> tuple:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


class StreamingSession:
    """A compiled model whose `state` inputs are fed from its own outputs of the previous call."""

    def __init__(self, ex, inputs: dict, outputs: list, state: dict):
        """`ex`: a built executable; `inputs`: {name: shape} in argument order; `outputs`: output names
        in order; `state`: {state input name: output name}."""
        if not isinstance(state, dict):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"state is {{state input: output}}, e.g. {{'h0': 'Y_h', 'c0': 'Y_c'}}, not {type(state).__name__}",
            )
        unknown = [k for k in state if k not in inputs] + [v for v in state.values() if v not in outputs]
        if unknown:
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"state names {unknown} are not inputs / outputs of the "
                f"model (inputs {list(inputs)}, outputs {outputs})",
            )
        dynamic = [k for k in state if not all(isinstance(d, int) and d > 0 for d in inputs[k])]
        if dynamic:
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"state inputs {dynamic} have symbolic or zero dimensions {[list(inputs[k]) for k in dynamic]}: "
                "the session starts them at zeros of a fixed shape; export the model with static state shapes",
            )
        self.model = runtime.Model(ex)  # checked calls, one at a time (runtime/boundary.py)
        self.vm = self.model.vm
        self.inputs, self.outputs, self.state_map = inputs, outputs, state
        self._lock = threading.RLock()  # a call and a reset from two threads never mix one state
        self.reset()

    @classmethod
    def from_onnx(cls, model: onnx.ModelProto, state: dict, config=None) -> StreamingSession:
        """Import and build `model` for the NPU (`tvm_npu.build`), then wrap it."""
        from ..build import build
        from ..frontend.onnx import from_onnx, read_model

        if isinstance(model, str | bytes) or hasattr(model, "__fspath__"):
            model = read_model(model)  # a path or the bytes, as tvm_npu.from_onnx takes them
        if not isinstance(model, onnx.ModelProto):
            raise NPUError(
                "ERR_INVALID_MODEL", f"from_onnx takes an onnx.ModelProto or a .onnx path, not {type(model).__name__}"
            )
        ex = build(from_onnx(model), config=config)
        return cls(ex, {i.name: _shape(i) for i in model.graph.input}, [o.name for o in model.graph.output], state)

    def saturated_inputs(self) -> int:
        """Float32 input values beyond the fp16 range that the NPU saturated to +-65504 over this
        session's calls (docs/npu.md section 2; `runtime.saturated_inputs`)."""
        return runtime.saturated_inputs(self.vm)

    def clamped_inputs(self) -> int:
        """Float32 input values an int8 / int16 input's staging clamped to its range (NaN and +-inf
        included) over this session's calls (docs/npu.md section 2; `runtime.clamped_inputs`)."""
        return runtime.clamped_inputs(self.vm)

    def reset(self):
        """Zero state: the next call starts a new sequence."""
        with self._lock:
            self.state = {name: tvm.runtime.tensor(np.zeros(self.inputs[name], np.float32)) for name in self.state_map}

    def __call__(self, *positional, **feeds) -> dict:
        """Run one chunk; `feeds` are the non-state inputs by name. Returns {output name: numpy array}."""
        want = [n for n in self.inputs if n not in self.state_map]
        if positional:
            raise NPUError(
                "ERR_SHAPE_MISMATCH", f"feed the inputs by name: session({', '.join(f'{n}=...' for n in want)})"
            )
        if sorted(feeds) != sorted(want):
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"feed {want} (the state inputs "
                f"{list(self.state_map)} come from the previous call); got "
                f"{sorted(feeds)}",
            )
        with self._lock:
            result = self.model.call("main", *[self.state[n] if n in self.state else feeds[n] for n in self.inputs])
            outs = list(result) if len(self.outputs) > 1 else [result]
            named = dict(zip(self.outputs, outs))
            for inp, out in self.state_map.items():
                self.state[inp] = named[out]
            return {k: v.numpy() for k, v in named.items()}


class AsyncModel:
    """Asynchronous calls of a built model: `start` returns at once, `Pending.wait(timeout)` collects.

        am = tvm_npu.AsyncModel(ex)
        pending = am.start(x)
        pending.poll()                 # True once done
        y = pending.wait(timeout=0.1)  # NPUError ERR_TIMEOUT if not done in 100 ms; wait again later

    Calls run one at a time on a worker thread (a Relax VM is not re-entrant; load one AsyncModel per
    thread of parallel work). The call releases the GIL, so Python keeps running meanwhile. A timeout
    leaves the call running and the model usable.
    """

    def __init__(self, ex, entry: str = "main"):
        from concurrent.futures import ThreadPoolExecutor

        self.model = runtime.Model(ex)
        self.vm = self.model.vm
        self.entry = entry
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tvm_npu")

    def saturated_inputs(self) -> int:
        """Float32 input values beyond the fp16 range that the NPU saturated to +-65504 over the calls
        so far (docs/npu.md section 2; `runtime.saturated_inputs`)."""
        return runtime.saturated_inputs(self.vm)

    def clamped_inputs(self) -> int:
        """Float32 input values an int8 / int16 input's staging clamped to its range (NaN and +-inf
        included) over the calls so far (docs/npu.md section 2; `runtime.clamped_inputs`)."""
        return runtime.clamped_inputs(self.vm)

    def start(self, *inputs) -> Pending:
        """Start a call of the entry function on `inputs`, checked here against the compiled signature
        (NPUError ERR_SHAPE_MISMATCH at once, runtime/boundary.py)."""
        args = runtime.check_arguments(self.model.signature(self.entry), inputs, self.entry)
        function = self.model.function(self.entry)

        def call():
            with self.model.lock:
                return function(*args)

        return Pending(self._worker.submit(call))


class Pending:
    """A started call of an AsyncModel."""

    def __init__(self, future):
        self._future = future

    def poll(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float | None = None):
        """The call's result (numpy arrays, a list for several outputs); NPUError ERR_TIMEOUT when it
        has not finished within `timeout` seconds (None: wait as long as it takes)."""
        import math
        import numbers
        from concurrent.futures import TimeoutError as FutureTimeout

        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or math.isnan(timeout) or timeout < 0
        ):
            raise NPUError("ERR_INVALID_CONFIG", f"timeout={timeout!r}: pass seconds as a number >= 0, or None")
        if timeout is not None and timeout > threading.TIMEOUT_MAX:  # inf, 1e300: as long as it takes
            timeout = None
        try:
            out = self._future.result(timeout=timeout)
        except FutureTimeout:
            raise NPUError(
                "ERR_TIMEOUT", f"the call did not finish within {timeout} s; wait again, or allow more time"
            ) from None
        return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]
