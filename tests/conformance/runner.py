"""Run one conformance case the way a user does — ONNX model -> tvm_npu.from_onnx -> tvm_npu.build(target
"npu") -> Relax VM — and judge it against an independent reference:

- fp16 (float model): TVM's own llvm build of the same imported module, in float32, and onnxruntime's
  float run of the ONNX model (TVM's build shares the import with the NPU build, so only onnxruntime
  sees an import that changes the model's meaning: MaxPool SAME_LOWER did). Pass when NaN and
  infinities sit where the references have them (same sign) and every finite output is within
  1e-2 * max(1, max |ref|) (the fp16 datapath rounds inputs, weights and results to 11 bits); where the
  two references disagree with each other (IEEE cases ONNX leaves open), the NPU matches one of them.
- int8 (QDQ model): onnxruntime with its integer kernels (session.qdqisint8allowed), within 1 LSB of the
  output scale.

Where the case ran comes from the build report: the case's ops (Case.ops) all on the NPU, or not (then
with the reason codes of the fallback)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import numpy_helper

from .case import Case
from .net import float_model, qdq_model

FP16_REL_TOL = 1e-2
INT8_MAX_LSB = 1


@dataclass
class Result:
    where: str = ""  # "npu" (every op of the case on the NPU) or "cpu" (a fallback)
    codes: list = field(default_factory=list)  # the fallback's reason codes
    precision: list = field(default_factory=list)  # the NPU datapath(s) the case's ops ran on
    worst: float = 0.0  # fp16: worst error / tolerance; int8: worst LSB difference
    ok: bool = False
    detail: str = ""

    def row(self) -> dict:
        return {"where": self.where, "codes": self.codes, "precision": self.precision, "worst": round(self.worst, 3)}


def _run(ex, feed: dict, names: list) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(feed[n])) for n in names])
    return out.numpy()


def fp16_close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: NaN where the reference has NaN, the same infinity, or finite and within
    1e-2 * max(1, max |finite ref|)."""
    fin = np.isfinite(want)
    tol = FP16_REL_TOL * max(1.0, float(np.abs(want[fin]).max(initial=0)))
    with np.errstate(invalid="ignore"):
        close = np.abs(got.astype(np.float64) - want) <= tol
    return np.where(fin, close & np.isfinite(got), np.where(np.isnan(want), np.isnan(got), got == want))


def compare_fp16(got: np.ndarray, wants: list) -> tuple[bool, float, str]:
    """`got` against TVM's llvm build and onnxruntime (`wants`). Where the two references agree the NPU
    must agree with both; where they differ (IEEE cases ONNX leaves open: relu(NaN), -inf * 0 in a
    leaky relu of slope 0), with one of them."""
    for want in wants:
        if got.shape != want.shape:
            return False, np.inf, f"shape {got.shape}, reference {want.shape}"
    llvm, ort = wants
    agree = fp16_close(ort, llvm) & fp16_close(llvm, ort)
    ok_llvm, ok_ort = fp16_close(got, llvm), fp16_close(got, ort)
    ok = np.where(agree, ok_llvm & ok_ort, ok_llvm | ok_ort)
    fin = np.isfinite(llvm) & np.isfinite(got)
    tol = FP16_REL_TOL * max(1.0, float(np.abs(llvm[np.isfinite(llvm)]).max(initial=0)))
    err = float(np.abs(got[fin].astype(np.float64) - llvm[fin]).max(initial=0))
    detail = f"max |npu - llvm| = {err:.4g}, tolerance {tol:.4g}"
    if not ok.all():
        bad = np.argwhere(~ok)[0]
        detail += (
            f"; {int((~ok).sum())} of {ok.size} wrong, first at {tuple(int(i) for i in bad)}: npu {got[tuple(bad)]}, "
            f"llvm {llvm[tuple(bad)]}, onnxruntime {ort[tuple(bad)]}"
        )
    return bool(ok.all()), err / tol if ok.all() else np.inf, detail


def compare_int8(got: np.ndarray, want: np.ndarray, scale: float) -> tuple[bool, float, str]:
    if got.shape != want.shape:
        return False, np.inf, f"shape {got.shape}, reference {want.shape}"
    lsb = np.rint(np.abs(got.astype(np.float64) - want) / scale)
    worst = float(np.nan_to_num(lsb, nan=1e9).max(initial=0))
    return (
        worst <= INT8_MAX_LSB,
        worst,
        f"max {worst:.0f} LSB from onnxruntime ({int((lsb > 0).sum())} of {lsb.size} differ)",
    )


def ort_int8(model):
    """onnxruntime's CPU provider with every QDQ group on its integer kernels (its default session folds
    QDQ into float and is no int8 reference)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_case(case: Case) -> Result:
    import tvm

    import tvm_npu
    from tvm_npu.partition.report import BuildReport

    net = case.net()
    feeds = case.feeds(net)
    model = float_model(net) if case.dtype == "fp16" else qdq_model(net, case.quant, feeds)
    names = [n for n, _ in net.inputs]
    mod = tvm_npu.from_onnx(model)
    report = BuildReport()
    ex = tvm_npu.build(mod, target="npu", report=report)
    res = Result()
    rows = [p for p in report.placements if p.op in case.ops]
    if not rows:
        res.detail = f"none of {case.ops} in the build report:\n{report.table()}"
        return res
    res.where = "npu" if all(p.device == "npu" for p in rows) else "cpu"
    res.codes = sorted({p.code for p in rows if p.device == "cpu"})
    res.precision = sorted({p.precision for p in rows if p.device == "npu"})
    if case.dtype == "fp16":
        import onnxruntime as ort

        ref = tvm.compile(mod, target="llvm")
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        wants = [[_run(ref, f, names), sess.run(None, f)[0]] for f in feeds]
        judge = compare_fp16
    else:
        sess = ort_int8(model)
        wants = [sess.run(None, f)[0] for f in feeds]
        scale = float(
            numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == f"{net.outputs[0]}_s"))
        )
        judge = lambda g, w: compare_int8(g, w, scale)  # noqa: E731
    res.ok, details = True, []
    for feed, want in zip(feeds, wants):
        ok, worst, detail = judge(_run(ex, feed, names), want)
        res.ok, res.worst = res.ok and ok, max(res.worst, worst)
        details.append(detail)
    res.detail = "; ".join(details) + f"\n{report.table()}"
    return res
