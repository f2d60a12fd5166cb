"""`tvm_npu.llm.compile` and the `LLM` it returns: prefill, decode, generate on two compiled step models.

The KV cache stays on the NPU when the compiler takes every layer's attention (kv_cache="npu", the
default; backend/kv_cache.py): the two steps are compiled as their resident variants, whose attention
regions share one state space, so the cache is one set of state slots both steps read and write, and a
call passes only the ids and the position. Otherwise (kv_cache="host", or a model whose attention the
compiler refuses; the build reports say why) the host holds it (a list of float32 tensors, K and V per
layer, T = max_context rows each), passed to every step call, which returns the new cache. Every
argument is checked before anything runs, so a bad call raises a coded NPUError and leaves the cache and
the sequence as they were (docs/llm.md, "Errors").
"""

from __future__ import annotations

import functools
import numbers
import secrets
import threading
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from .. import runtime
from ..backend import kv_cache as kv_cache_mod
from ..contract.config import get_config
from ..contract.errors import NPUError
from ..partition.report import BuildReport
from ..quantization import quantize_weights_int4, quantize_weights_int8
from ..quantization.weight_int4 import GROUP_SIZES, METHODS, weight_formats
from . import kv_calibration, one_library, prefill_w4a8, sampling, steps, weight_calibration
from .kv_saturation import saturation_counter
from .step_runner import StepRunner


def _placements(report: BuildReport) -> list[dict]:
    return [
        {"op": p.op, "device": p.device, "composite": p.composite, "code": p.code, "precision": p.precision}
        for p in report.placements
    ]


def _regions(report: BuildReport) -> dict:
    """What the profile needs of each region: the command -> layer map and the layers' dtypes."""
    return {
        sym: {
            "command_layers": list(r.get("command_layers", [])),
            "layers": [{"name": lay["name"], "dtype": lay["dtype"]} for lay in r.get("layers", [])],
        }
        for sym, r in report.regions.items()
    }


# State space -> id of the LLM whose sequence its cache holds. The runtime shares a space's cache between
# every module naming it; two LLMs of one artifact loaded in one process name the same space, so one of
# them may overwrite the other's cache. A decode checks it still owns the cache (ERR_LLM_STATE otherwise)
# rather than continue on another sequence's rows. Process-wide by nature, like the runtime's state store.
_OWNER: dict = {}
# State space -> the lock every LLM naming it holds for a whole prefill, decode, generate or reset, and
# its ownership check: two LLMs of one artifact used from two threads take turns instead of interleaving
# their steps on the one cache (the runtime's state store is shared by the space's id, baked into the
# streams, so a second load cannot get a space of its own). A host-held cache's LLM has a lock of its
# own: its VM, like any Relax VM, must not run two calls at once.
_SPACE_LOCKS: dict = {}
_SPACE_LOCKS_LOCK = threading.Lock()


def _space_lock(space: int) -> threading.RLock:
    with _SPACE_LOCKS_LOCK:
        return _SPACE_LOCKS.setdefault(space, threading.RLock())


def _state_space() -> int:
    """A state space for one compiled LLM: non-zero, and unlike another LLM's of this process (a space is
    one cache for every module that names it, docs/npu.md section 3)."""
    return secrets.randbits(31) | 1


def compile(
    model,
    max_context: int | None = None,
    config="npu-ref",
    weights: str = "fp16",
    prefill_len=None,
    kv_cache="npu",
    kv_dtype: str = "float16",
    calibration=None,
    group_size: int = 128,
    kv_placement: str = "auto",
    weight_method: str = "rtn",
    prefill_activations: str = "fp16",
):
    """Compile a decoder's prefill and decode steps for the NPU (NPU regions, the rest on the CPU).

    Parameters
    ----------
    model : callable, (step model, step model) or step model
        A builder `model(seq_len=S, max_context=T)` returning a step model (e.g.
        `functools.partial(tvm_npu.models.decoder.gpt2_step, layers=2)`), a (prefill, decode) pair, or
        one step model at seq_len 1. A step model is an ONNX ModelProto, a path or a Relax IRModule
        with the `tvm_npu.step` metadata (docs/llm.md).
    max_context : int, optional
        T, the static cache's rows (required with a builder; checked against the step models).
    config : NPUConfig or str
        The NPU to compile for.
    weights : str
        "fp16" (the NPU's fp16 datapath), or "int8": every constant dense weight as int8 codes with one
        fp32 scale per output column (symmetric max-abs, `tvm_npu.quantization.quantize_weights_int8`),
        activations fp16 (W8A16, CONV2D's `w_dtype`): one byte per weight read per token instead of two.
        "int4": int4 codes with one fp16 scale per `group_size` weights along K (round to nearest,
        `tvm_npu.quantize(weight_bits=4)`; W4A16): half a byte per weight, plus the scales. A model whose
        dense weights are already group-wise quantized (MatMulNBits, blocked DequantizeLinear) keeps its
        own codes with any `weights`.
    prefill_len : int, optional
        The prefill bucket S (default 32, at most max_context) with a builder.
    kv_cache : str
        "npu" (default): the cache resident on the NPU when the compiler takes every layer's attention
        (else held by the host, the reports' rejections saying why); "host": held by the host.
    kv_dtype : str
        The resident cache's elements: "float16" (default), or "int8": int8 codes with one fp32 scale per
        layer, KV head and K / V, `max|x| / 127` from a calibration run of the float32 model on the host
        (llm/kv_calibration.py); a value beyond a head's calibrated range saturates (docs/llm.md, "An
        int8 KV cache"). Needs kv_cache="npu"; if the compiler keeps the cache on the host anyway (a
        refused attention), that cache is float32 and `meta["kv_dtype"]` says so.
    calibration : list of int arrays, optional
        kv_dtype="int8": the prompts (1-D token ids, 1..max_context each) of the calibration run; default
        8 seeded random prompts of min(32, max_context) ids. weight_method "gptq" / "awq": token ids of
        representative text (any length; cut into prefill-bucket chunks, llm/weight_calibration.py),
        required.
    group_size : int
        With weights="int4": 32, 64 or 128 weights per scale (a layer whose K it does not divide stays
        fp16).
    weight_method : str
        With weights="int4", how the codes are chosen: "rtn" (default, round to nearest), "gptq" (each
        column's rounding error spread over the columns after it, from the layers' calibration inputs) or
        "awq" (activation-aware per-input-channel scales folded into the norm before; the rest round to
        nearest). Both need `calibration`. The prefill and decode steps get the same codes.
    prefill_activations : str
        "fp16" (default), or "int8": the prefill step as W4A8 (int8 activations, one calibrated scale per
        tensor, under the same int4 codes; llm/prefill_w4a8.py) while decode stays W4A16: prefill is
        compute-bound and int8 MACs are faster, decode is bound by the weights' bytes. Needs
        weights="int4", weight_method "rtn" or "gptq", `calibration` (its prefill-bucket chunks calibrate
        the activations) and two step models (a builder or a pair). What stays float (the attention, the
        softmax, the cache writes) is in `lm.meta["prefill_quantization"]` and the prefill placements'
        "precision".
    kv_placement : str
        Where the resident cache lives (docs/llm.md, "Where the cache lives"): "auto" (default) in SRAM
        when the whole cache takes at most half of it, else in DDR; "sram" in SRAM whenever it fits
        (ERR_SRAM_OVERFLOW naming the bytes otherwise); "ddr" in the DDR state region. An SRAM cache is
        read by no DDR transfer: a decode step moves only its weights and activations.
        `lm.meta["kv_placement"]` and `lm.profile()[step]["kv_placement"]` say where it went.

    Returns
    -------
    LLM
    """
    for name, value in (("max_context", max_context), ("prefill_len", prefill_len)):
        if value is not None:  # 64.0, 0, True: ERR_INVALID_CONFIG here, not a TypeError in the builder
            sampling.count(name, value)
    if weights not in ("fp16", "int8", "int4"):
        raise NPUError("ERR_INVALID_CONFIG", f'weights={weights!r}: use "fp16", "int8" or "int4"')
    if weights == "int4" and group_size not in GROUP_SIZES:
        raise NPUError("ERR_INVALID_CONFIG", f"group_size={group_size!r}: use one of {GROUP_SIZES}")
    if kv_cache not in ("npu", "host"):
        raise NPUError("ERR_INVALID_CONFIG", f'kv_cache={kv_cache!r}: use "npu" or "host"')
    if not isinstance(kv_dtype, str) or kv_dtype not in ("float16", "int8"):
        raise NPUError("ERR_INVALID_CONFIG", f'kv_dtype={kv_dtype!r}: use "float16" or "int8"')
    if kv_dtype == "int8" and kv_cache == "host":
        raise NPUError(
            "ERR_INVALID_CONFIG",
            'kv_dtype="int8" is the NPU-resident cache\'s: use kv_cache="npu" (a host-held cache is float32)',
        )
    if kv_placement not in kv_cache_mod.PLACEMENTS:
        raise NPUError("ERR_INVALID_CONFIG", f"kv_placement={kv_placement!r}: use one of {kv_cache_mod.PLACEMENTS}")
    if weight_method not in METHODS:
        raise NPUError("ERR_INVALID_CONFIG", f"weight_method={weight_method!r}: use one of {METHODS}")
    if weight_method != "rtn" and weights != "int4":
        raise NPUError("ERR_INVALID_CONFIG", f'weight_method={weight_method!r} chooses int4 codes: pass weights="int4"')
    if weight_method != "rtn" and calibration is None:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"weight_method={weight_method!r} needs calibration=[token ids of representative text, ...]",
        )
    prefill_w4a8.check(prefill_activations, weights, weight_method, calibration)
    int8_prefill = prefill_activations == "int8"
    if calibration is not None and kv_dtype != "int8" and weight_method == "rtn" and not int8_prefill:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            "calibration= chooses the int8 KV cache's scales, GPTQ / AWQ weights or a W4A8 prefill's scales: "
            'pass kv_dtype="int8", weight_method="gptq" / "awq" or prefill_activations="int8"',
        )
    cfg = get_config(config)
    (pre_mod, pre_info), (dec_mod, dec_info) = steps.resolve(model, max_context, prefill_len)
    if int8_prefill and pre_mod is dec_mod:  # one step model serving both steps is known only now
        prefill_w4a8.refuse_one_step()
    wanted = kv_placement if kv_cache == "npu" else "ddr"
    if kv_cache == "npu":  # a cache that fits nowhere: the coded OOM now, before anything of T rows exists
        kv_cache_mod.check_fits(cfg, [pre_info, dec_info], kv_dtype == "int8", kv_placement)
    where, area = kv_cache_mod.placement(cfg, dec_info, kv_dtype == "int8", wanted)
    float_formats = weight_formats(dec_mod)  # a float weight ("fp16") is what `weights` quantizes
    if weights == "int8":  # W8A16: every constant dense weight as int8 codes and per-column fp32 scales
        same = pre_mod is dec_mod
        dec_mod = quantize_weights_int8(dec_mod)
        pre_mod = dec_mod if same else quantize_weights_int8(pre_mod)
    if weights == "int4":  # W4A16: int4 codes, one fp16 scale per group of K; both steps the same codes
        same, data, float_pre = pre_mod is dec_mod, None, pre_mod
        memo: dict = {}
        if weight_method != "rtn" or int8_prefill:
            data = weight_calibration.batches(weight_calibration.check(calibration, pre_info["vocab"]), pre_info)

        def int4(mod):
            return quantize_weights_int4(
                mod, group_size, method=weight_method, calibration_data=data, progress=False, memo=memo
            )[0]

        pre_mod = int4(pre_mod)
        dec_mod = pre_mod if same else int4(dec_mod)
        if int8_prefill:  # W4A8 on the float prefill step, the codes the memo holds (decode's)
            pre_mod, prefill_quant = prefill_w4a8.quantize(float_pre, data, group_size, weight_method, memo)
    formats = weight_formats(dec_mod, float_formats)
    scales = None
    if kv_dtype == "int8":  # the model as compiled (int8 weights included), run on the host
        # calibration= that also chose weights or activations is text that may pass max_context: not prompts
        kv_prompts = calibration if weight_method == "rtn" and not int8_prefill else None
        prompts = kv_calibration.check_prompts(kv_prompts, dec_info["vocab"], dec_info["max_context"])
        scales = kv_calibration.kv_scales(dec_mod, dec_info, prompts)
    pairs = [("prefill", pre_mod, pre_info), ("decode", dec_mod, dec_info)]
    pairs = pairs[1:] if pre_mod is dec_mod else pairs
    space = _state_space()

    def build_all(resident: bool) -> tuple[dict, dict]:
        kv = {"state_space": space, "kv_scales": scales, "sram_area": area} if resident else None
        return one_library.build_steps(pairs, cfg, kv)

    try:
        built, reports = build_all(kv_cache == "npu")
    except NPUError as err:  # "auto": a step's attention needs more SRAM beside the cache than is left
        if kv_placement != "auto" or not area or err.code != "ERR_SRAM_OVERFLOW":
            raise
        where, area = "ddr", 0
        built, reports = build_all(kv_cache == "npu")
    resident = all(r.kv_cache.get("resident") for r in reports.values())
    if kv_cache == "npu" and kv_placement != "auto" and not resident:
        _refuse_host_for_memory(reports, kv_placement)
    if kv_cache == "npu" and not resident and any(r.kv_cache.get("resident") for r in reports.values()):
        built, reports = build_all(False)  # one step took the cache and the other did not: both keep it on the host
    if int8_prefill and kv_cache == "npu" and not resident:  # the quantizer's rewrite may hide the attention
        refused = [r["detail"] for r in reports["prefill"].kv_cache.get("refused", [])] if "prefill" in reports else []
        warnings.warn(
            f'prefill_activations="int8": the KV cache is host-held (float32), not resident ({"; ".join(refused)}); '
            'lm.reports[step].kv_cache["refused"] says why; prefill_activations="fp16" may keep it resident',
            stacklevel=2,
        )
    if kv_dtype == "int8" and not resident:  # not wrong (float32 is exact-er), but not what was asked
        warnings.warn(
            'kv_dtype="int8": the compiler keeps this model\'s cache on the host (float32; '
            'lm.reports[step].kv_cache["refused"] says why), so there is no int8 cache',
            stacklevel=2,
        )
    meta = {
        "format": one_library.FORMAT,
        "step": dec_info,
        "prefill_len": pre_info["seq_len"],
        "config": cfg.to_dict(),
        "weights": weights,
        "group_size": group_size if weights == "int4" else 0,
        "weight_method": weight_method if weights == "int4" else "",
        "prefill_activations": prefill_activations,
        "prefill_quantization": prefill_quant if int8_prefill else None,
        "shared": pre_mod is dec_mod,
        "kv_cache": "npu" if resident else "host",
        "kv_dtype": (kv_dtype if resident else "float32"),
        "kv_placement": where if resident else "host",
        "sram_state_bytes": area if resident else 0,
        "kv_scales": scales if resident else None,
        "state_space": space if resident else 0,
        "placements": {k: _placements(r) for k, r in reports.items()},
        "regions": {k: _regions(r) for k, r in reports.items()},
        "weight_formats": formats,
        "generation": steps.generation(model),  # an onnxruntime-genai folder's token ids and search defaults
    }
    for r in reports.values():
        r.weight_formats = formats
    lm = LLM(one_library.link(built, meta), meta)
    lm.reports = reports
    return lm


def _refuse_host_for_memory(reports: dict, kv_placement: str) -> None:
    """An explicit kv_placement whose attention the partition refused for its SRAM (NPU_E_SRAM: more query
    heads per KV head than check_fits's least count) is the coded error, never a quiet host-held cache."""
    for step, report in reports.items():
        for r in report.kv_cache.get("refused", []):
            if r["code"] == "NPU_E_SRAM":
                raise NPUError(
                    "ERR_SRAM_OVERFLOW",
                    f"kv_placement={kv_placement!r}: the {step} step's attention cannot run on the NPU "
                    f"({r['detail']}): compile with a smaller max_context, a configuration with more SRAM, or "
                    "kv_cache='host' (the host holds the cache)",
                )


def _serialized(method):
    """`method` under the LLM's lock (its state space's, for a resident cache): see _SPACE_LOCKS."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class LLM:
    """A compiled decoder: `prefill(ids)`, `decode(token)`, `generate(ids, ...)`, `reset()`, `profile()`,
    `memory()`, `export_library(path)`; `placements` says where each op of each step ran.

    `executable` is the one VM executable (or loaded library) with the entry functions "prefill" and
    "decode" (llm/one_library.py). Safe to share between threads: each call runs whole under a lock,
    one per state space, so LLMs loaded twice from one artifact take turns on their one NPU cache too;
    a decode whose cache another LLM took over since its prefill is ERR_LLM_STATE."""

    def __init__(self, executable, meta: dict):
        self.meta = meta
        self.executable = executable
        self.artifact: Path | None = None  # the file tvm_npu.llm.load read this LLM from (export copies it)
        self._vm = relax.VirtualMachine(executable, tvm.cpu())
        modules = runtime.npu_modules(self._vm)
        info = meta["step"]
        self.layers, self.vocab, self.max_context = info["layers"], info["vocab"], info["max_context"]
        self.prefill_len = meta["prefill_len"]
        self._cache_shape = (1, info["kv_heads"], self.max_context, info["head_dim"])
        self.resident = meta.get("kv_cache") == "npu"  # the cache is the steps' shared NPU state
        steps = ["decode"] if meta.get("shared") else ["prefill", "decode"]
        self._runners = {
            name: StepRunner(
                self._vm,
                name,
                modules,
                one_library.step_prefix(name),
                dict(info, seq_len=1 if name == "decode" else self.prefill_len),
                meta["regions"][name],
                meta["config"],
                self.resident,
                meta.get("kv_scales"),
            )
            for name in steps
        }
        if "prefill" not in self._runners:  # one step model at seq_len 1 serves both
            self._runners["prefill"] = self._runners["decode"]
        self.placements = meta["placements"]
        self.reports: dict = {}
        self._lock = _space_lock(meta["state_space"]) if self.resident else threading.RLock()
        # An int8 cache's saturated values, counted by its regions' staging (a no-op for another cache).
        self._saturation = saturation_counter(self._runners, meta)
        self.reset()

    # -- the sequence ------------------------------------------------------------------------------------

    @_serialized
    def reset(self) -> None:
        """Forget the sequence: zero the cache, and the profile; decode needs a prefill again."""
        if self.resident:
            self._runners["decode"].reset_state()
            _OWNER[self.meta["state_space"]] = id(self)
            self._cache: list = []
        else:
            zeros = np.zeros(self._cache_shape, np.float32)
            self._cache = [tvm.runtime.tensor(zeros) for _ in range(2 * self.layers)]
        self.length: int | None = None  # tokens in the cache; None before a prefill
        self._stats: dict = {"prefill": {}, "decode": {}}
        self._decoded = 0  # profile() before any prefill: zeros, not an AttributeError
        self._saturation.reset()

    @_serialized
    def cache(self) -> list[np.ndarray]:
        """The KV cache as numpy copies: [key 0, value 0, key 1, ...], each [1, H_kv, T, D] (float32; a
        resident cache's fp16 rows widened)."""
        if self.resident:
            return self._runners["decode"].state(self.layers, self._cache_shape)
        return [c.numpy() for c in self._cache]

    @_serialized
    def prefill(self, ids, all_logits: bool = False) -> np.ndarray:
        """Start a new sequence with the prompt `ids` (int64 [n], 1 <= n <= max_context): the logits
        float32 [vocab] of its last token (with `all_logits`, of every token: [n, vocab], what a
        teacher-forced evaluation reads). A prompt longer than the prefill bucket runs in chunks."""
        ids = self._ids(ids)
        n, S, T = len(ids), self.prefill_len, self.max_context
        if n > T:
            raise NPUError(
                "ERR_LLM_CONTEXT",
                f"a prompt of {n} tokens is longer than max_context {T}: shorten it, or compile with a "
                "larger max_context",
            )
        runner = self._runners["prefill"]
        if self.resident:  # a new sequence starts from a zero cache
            runner.reset_state()
            _OWNER[self.meta["state_space"]] = id(self)
            cache: list = []
        else:
            cache = [tvm.runtime.tensor(np.zeros(self._cache_shape, np.float32)) for _ in range(2 * self.layers)]
        runner.begin()
        self._saturation.reset()
        rows = np.empty((n, self.vocab), np.float32) if all_logits else None
        for start in range(0, n, S):
            # The last chunk is padded at its end (the causal mask keeps padding out of every real token's
            # attention; decode overwrites its cache rows). Where padding would pass T, the chunk starts
            # earlier instead and recomputes rows it already wrote, with the same tokens: the same values.
            begin = min(start, T - S)
            chunk = np.zeros((1, S), np.int64)
            real = ids[begin : begin + S]
            chunk[0, : len(real)] = real
            self._saturation.expect("prefill", start - begin, len(real))  # the chunk's new tokens' rows
            logits, cache = runner.run(chunk, begin, cache)
            self._saturation.end_call()
            if rows is not None:
                rows[begin : begin + len(real)] = logits[: len(real)]
        self._cache, self.length = cache, n
        self._stats = {"prefill": dict(runner.counters(), tokens=n), "decode": {}}
        self._decoded = 0
        self._runners["decode"].begin()  # after the prefill's counters were read: it may be the same runner
        self._saturation.warn()
        return rows if rows is not None else logits[n - 1 - begin].copy()

    @_serialized
    def decode(self, token) -> np.ndarray:
        """Append one token to the sequence: the logits float32 [vocab] after it."""
        token = self._token(token)
        if self.length is None:
            raise NPUError("ERR_LLM_STATE", "decode before prefill: start a sequence with prefill(ids) first")
        if self.length >= self.max_context:
            raise NPUError(
                "ERR_LLM_CONTEXT",
                f"the sequence already holds max_context {self.max_context} tokens: no cache row is left for "
                "another; start a new sequence (prefill) or compile with a larger max_context",
            )
        if self.resident and _OWNER.get(self.meta["state_space"]) != id(self):
            raise NPUError(
                "ERR_LLM_STATE",
                "another LLM sharing this one's state space (the same artifact loaded twice) has used the NPU's "
                "KV cache since this sequence's prefill: prefill again (or run the two one after the other)",
            )
        runner = self._runners["decode"]
        self._saturation.expect("decode", 0, 1)
        logits, self._cache = runner.run(np.array([[token]], np.int64), self.length, self._cache)
        self._saturation.end_call()
        self._saturation.warn()
        self.length += 1
        self._decoded += 1
        return logits[0].copy()

    @_serialized
    def generate(self, ids, max_new_tokens: int = 32, sampler=None, on_token=None) -> np.ndarray:
        """Prefill `ids`, then sample and decode up to `max_new_tokens` tokens: the new tokens, int64.

        `sampler(logits) -> int` picks each token on the CPU (default: greedy, `sampling.greedy`; see
        `sampling.top_k` / `sampling.top_p`); `on_token(token)` is called after each (a progress bar)."""
        ids = self._ids(ids)
        max_new_tokens = sampling.count("max_new_tokens", max_new_tokens, low=0)  # at most max_context: below
        for name, fn in (("sampler", sampler), ("on_token", on_token)):
            if fn is not None and not callable(fn):
                what = (
                    "sampler(logits) -> token id, e.g. tvm_npu.llm.top_k(40)" if name == "sampler" else "on_token(id)"
                )
                raise NPUError("ERR_INVALID_CONFIG", f"{name}={fn!r}: pass a callable {what}, or None")
        if max_new_tokens and len(ids) + max_new_tokens - 1 > self.max_context:
            raise NPUError(
                "ERR_LLM_CONTEXT",
                f"{len(ids)} prompt tokens + {max_new_tokens} new ones need {len(ids) + max_new_tokens - 1} cache "
                f"rows, max_context is {self.max_context}: ask for at most {self.max_context - len(ids) + 1} "
                "new tokens or compile with a larger max_context",
            )
        sampler = sampler or sampling.greedy
        logits = self.prefill(ids)
        out: list[int] = []
        for i in range(max_new_tokens):
            token = self._token(sampler(logits))
            out.append(token)
            if on_token is not None:
                on_token(token)
            if i + 1 < max_new_tokens:
                logits = self.decode(token)
        return np.array(out, np.int64)

    # -- checks ------------------------------------------------------------------------------------------

    def _ids(self, ids) -> np.ndarray:
        arr = np.asarray(ids) if isinstance(ids, (list, tuple)) else ids
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1 or arr.size == 0:
            what = f"{arr.dtype} {list(arr.shape)}" if isinstance(arr, np.ndarray) else type(ids).__name__
            raise NPUError(
                "ERR_SHAPE_MISMATCH", f"prompt ids must be a non-empty 1-D integer array (int64 [n]), not {what}"
            )
        bad = (arr < 0) | (arr >= self.vocab)
        if bad.any():
            i = int(np.argmax(bad))
            raise NPUError(
                "ERR_LLM_TOKEN", f"token id {int(arr[i])} at index {i} is outside the vocabulary [0, {self.vocab})"
            )
        return arr.astype(np.int64)

    def _token(self, token) -> int:
        if isinstance(token, np.ndarray) and token.ndim == 0:
            token = token[()]
        if isinstance(token, bool) or not isinstance(token, numbers.Integral):
            raise NPUError("ERR_SHAPE_MISMATCH", f"a token must be one int, not {type(token).__name__} {token!r}")
        if not 0 <= int(token) < self.vocab:
            raise NPUError("ERR_LLM_TOKEN", f"token id {int(token)} is outside the vocabulary [0, {self.vocab})")
        return int(token)

    # -- cost and artifact -------------------------------------------------------------------------------

    @_serialized
    def profile(self) -> dict:
        """{"prefill": ..., "decode": ...}: the last prefill (all its chunks) and every decode step since,
        on the NPU regions of the cycle model (CPU ops are not counted): cycles, ddr_bytes, macs,
        mac_util (MACs over the MAC slots of the cycles), tokens, tokens_per_s at the config's clock,
        host_s and host_tokens_per_s (wall time of the whole step, CPU ops included), kv_bytes: with the
        cache on the NPU the K and V rows the steps read ([0, position + S) of every layer and KV head,
        D * 2 bytes a row in fp16, D in int8, summed over the calls), with a host-held cache the static
        cache every step reads and writes (float32, K and V of every layer); kv_placement: where the cache
        lives, "sram" (its rows read in place: none of kv_bytes crosses DDR), "ddr" or "host";
        kv_saturated: an int8 cache's values that saturated (beyond their head's calibrated range), a list
        [layer][K, V][KV head] of counts (None for another cache), out of kv_values_written values per
        layer, K / V and KV head (llm/kv_saturation.py; a KVSaturationWarning names the heads past
        WARN_FRACTION)."""
        conf = self.meta["config"]
        clock = conf["clock_mhz"] * 1e6
        kv = 2 * self.layers * int(np.prod(self._cache_shape)) * 4
        if self._decoded:
            self._stats["decode"] = dict(self._runners["decode"].counters(), tokens=self._decoded)
        out = {}
        for name, s in self._stats.items():
            cycles, tokens, host = s.get("cycles", 0), s.get("tokens", 0), s.get("host_s", 0.0)
            slots = cycles * conf["mac_rows"] * conf["mac_cols"]
            out[name] = {
                "tokens": tokens,
                "cycles": cycles,
                "ddr_bytes": s.get("ddr_bytes", 0),
                "macs": s.get("macs", 0),
                "mac_util": s.get("slot_macs", 0) / slots if slots else 0.0,
                "tokens_per_s": tokens * clock / cycles if cycles else None,
                "host_s": host,
                "host_tokens_per_s": tokens / host if host else None,
                "kv_bytes": s.get("kv_bytes", 0) if self.resident else kv,
                "kv_placement": self.meta.get("kv_placement", "ddr" if self.resident else "host"),
                **self._saturation.profile(name),
            }
        return out

    @_serialized
    def memory(self) -> dict:
        """The weights of the NPU regions of both steps in this process's memory: `weights_bytes`, every
        region's weight region summed (what the two steps held before the runtime shared them), and
        `weights_resident_bytes`, each copy counted once (the runtime keeps one copy of identical
        weight regions, src/runtime/weight_pool.h; prefill's and decode's usually are); `regions`."""
        total, copies = 0, {}
        modules = runtime.npu_modules(self._vm)
        for m in modules:
            w = runtime.weights_memory(m)
            total += w["bytes"]
            copies[w["id"]] = w["bytes"]
        return {"weights_bytes": total, "weights_resident_bytes": sum(copies.values()), "regions": len(modules)}

    def export_library(self, path):
        """Write both steps and the metadata to one library (llm/bundle.py); `tvm_npu.llm.load` reads it."""
        from .bundle import write_bundle

        return write_bundle(self, path)
