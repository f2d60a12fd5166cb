"""Keyword spotting with an LSTM on the NPU, streamed in chunks (about 70 s on 2 cores).

    python tutorials/lstm_wake_word.py [--out lstm_kws] [--quick]

Step 1 synthesizes a small keyword data set offline (no downloads): ten "words" made of chirps and
tones, plus silence and unknown sounds, in noise. Step 2 computes log-mel features with numpy/scipy
(49 frames x 10 bands per second of 8 kHz audio). Step 3 trains an LSTM classifier (10 -> LSTM 64 -> 12)
in numpy. Step 4 exports it to ONNX as a streaming model: 7 frames in, the LSTM state in and out.
Step 5 compiles it for the NPU: one region, h and c pinned in SRAM between time steps. Step 6 streams
every test utterance through the NPU chunk by chunk (tvm_npu.StreamingSession) and compares the accuracy
with the float model, and prints the cycles per inference and the residency report. Step 7 quantizes
the streaming model (tvm_npu.quantize, calibrated on chunks with the state the float model carries into
them): int8 weights and activations with a 16-bit cell state, TFLite's 16x8 LSTM scheme — the state and
its two products are int16 ELTWISE operands on the NPU — and streams the test set again.

The numpy training (step 3) takes most of the time: about a minute on 2 cores for the full run, with a
progress bar. Training is chaotic: unrounded (as this script trained until 2026-12), nudging every
training input by one float64 ULP gave another model (float accuracy 96.3% instead of 99.6%), so
another CPU's rounding (its BLAS kernels, numpy's SIMD exp and tanh) gave another model and another
accuracy. The features, the weights and Adam's moments are therefore kept at 16 significant bits
(snap()): a last-bit difference almost never crosses a rounding boundary, and every machine trains the
same model and prints the same figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import scipy.signal
from onnx import TensorProto, helper, numpy_helper
from tqdm import tqdm

import tvm_npu

RATE, FRAMES, BANDS, HIDDEN, CLASSES, CHUNK = 8000, 49, 10, 64, 12, 7
SNAP_BITS = 16  # the training's precision: see snap()


# Step 1: a keyword data set, synthesized. Class k < 10 is a chirp then a tone with its own frequencies;
# class 10 is silence (noise only), class 11 "unknown" (random chirps).
def utterance(label: int, rng) -> np.ndarray:
    t = np.arange(RATE) / RATE
    audio = rng.normal(0, 0.05, RATE)
    if label == 10:
        return audio
    f0, f1, f2 = (
        rng.uniform(300, 3500, 3)
        if label == 11
        else (400 + 300 * label, 3400 - 250 * label, 600 + 270 * ((label * 7) % 10))
    )
    start = rng.uniform(0.05, 0.35)
    half = rng.uniform(0.22, 0.3)
    a = (t >= start) & (t < start + half)
    b = (t >= start + half) & (t < start + 2 * half)
    ta = t[a] - start
    audio[a] += np.sin(2 * np.pi * (f0 * ta + (f1 - f0) * ta**2 / (2 * half)))
    audio[b] += np.sin(2 * np.pi * f2 * (t[b] - start - half))
    return audio * rng.uniform(0.3, 1.0)


# Step 2: log-mel features: 25.6 ms windows every 20 ms, 10 mel bands up to 4 kHz.
def mel_bank(n_fft: int = 256) -> np.ndarray:
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    edges = hz(np.linspace(mel(50), mel(RATE / 2), BANDS + 2))
    bins = np.fft.rfftfreq(n_fft, 1 / RATE)
    bank = np.zeros((BANDS, bins.size))
    for k in range(BANDS):
        lo, mid, hi = edges[k : k + 3]
        bank[k] = np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0, None)
    return bank


def features(audio: np.ndarray, bank: np.ndarray) -> np.ndarray:
    _, _, spec = scipy.signal.stft(audio, RATE, nperseg=256, noverlap=256 - 160, boundary=None, padded=False)
    # snap() in float64, then float32 holds it exactly: the same features on every machine
    return snap(np.log(1e-4 + bank @ np.abs(spec) ** 2).T[:FRAMES]).astype(np.float32)  # [49, 10]


def dataset(n_per_class: int, seed: int):
    rng, bank = np.random.default_rng(seed), mel_bank()
    labels = np.repeat(np.arange(CLASSES), n_per_class)
    rng.shuffle(labels)
    return np.stack([features(utterance(int(k), rng), bank) for k in labels]), labels


# Step 3: an LSTM classifier trained in numpy (backpropagation through time, Adam). Gate order i, o, f, c,
# as ONNX stores them.
def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def forward(p, x, h0=None):
    """x [B, T, F] -> logits [B, C], the last h and the per-step cache for backward; `h0` = (h, c)."""
    b = x.shape[0]
    h, c = h0 if h0 is not None else (np.zeros((b, HIDDEN)), np.zeros((b, HIDDEN)))
    cache = []
    for t in range(x.shape[1]):
        z = x[:, t] @ p["Wx"] + h @ p["Wh"] + p["b"]
        i, o, f = (sigmoid(z[:, k * HIDDEN : (k + 1) * HIDDEN]) for k in range(3))
        g = np.tanh(z[:, 3 * HIDDEN :])
        c_prev, h_prev = c, h
        c = f * c_prev + i * g
        h = o * np.tanh(c)
        cache.append((x[:, t], h_prev, c_prev, i, o, f, g, c))
    return h @ p["Wy"] + p["by"], h, cache


def backward(p, logits, h_last, cache, labels):
    prob = np.exp(logits - logits.max(1, keepdims=True))
    prob /= prob.sum(1, keepdims=True)
    dlogits = prob
    dlogits[np.arange(len(labels)), labels] -= 1
    dlogits /= len(labels)
    grads = {k: np.zeros_like(v) for k, v in p.items()}
    grads["Wy"], grads["by"] = h_last.T @ dlogits, dlogits.sum(0)
    dh, dc = dlogits @ p["Wy"].T, 0.0
    for x_t, h_prev, c_prev, i, o, f, g, c in reversed(cache):
        tc = np.tanh(c)
        do = dh * tc
        dc = dc + dh * o * (1 - tc**2)
        dz = np.concatenate(
            [dc * g * i * (1 - i), do * o * (1 - o), dc * c_prev * f * (1 - f), dc * i * (1 - g**2)], axis=1
        )
        grads["Wx"] += x_t.T @ dz
        grads["Wh"] += h_prev.T @ dz
        grads["b"] += dz.sum(0)
        dh, dc = dz @ p["Wh"].T, dc * f
    return grads


def snap(a, bits: int = SNAP_BITS):
    """`a` rounded to `bits` significant bits. Another CPU computes the features and each step's gradients
    with other last bits (BLAS kernels, numpy's SIMD exp and tanh); training is chaotic, so those bits
    would grow into another model. Rounding the features and, after every step, the weights and Adam's
    moments to 16 bits absorbs a difference of 1e-16 (it crosses a rounding boundary once in ~1e11), and
    every machine trains the same model."""
    m, e = np.frexp(np.asarray(a, np.float64))
    return np.ldexp(np.round(m * 2.0**bits) / 2.0**bits, e)


def train(x, y, epochs: int, seed: int = 0, rounding_noise: float = 0.0, bits: int = SNAP_BITS, progress=True):
    """Adam on batches of 32 at `bits` significant bits (53: float64 as is); `rounding_noise` (relative,
    e.g. 1e-14) perturbs every gradient as another machine's rounding would: the tests check that at 16 bits
    it leaves the trained model unchanged."""
    rng, noise = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    snap_ = lambda a: snap(a, bits)  # noqa: E731
    x = snap_(x)
    p = {
        "Wx": rng.normal(0, 0.3, (BANDS, 4 * HIDDEN)),
        "Wh": rng.normal(0, 0.1, (HIDDEN, 4 * HIDDEN)),
        "b": np.zeros(4 * HIDDEN),
        "Wy": rng.normal(0, 0.1, (HIDDEN, CLASSES)),
        "by": np.zeros(CLASSES),
    }
    p = {k: snap_(v) for k, v in p.items()}
    p["b"][2 * HIDDEN : 3 * HIDDEN] = 1.0  # forget-gate bias 1: remember by default
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step = 0
    for _ in tqdm(range(epochs), desc="  training", unit="epoch", disable=not progress, leave=False):
        order = rng.permutation(len(x))
        for s in range(0, len(x), 32):
            idx = order[s : s + 32]
            logits, h, cache = forward(p, x[idx])
            grads = backward(p, logits, h, cache, y[idx])
            step += 1
            for k in p:  # Adam, lr 1e-2
                g = grads[k] * (1 + rounding_noise * noise.standard_normal(grads[k].shape))
                m[k] = snap_(0.9 * m[k] + 0.1 * g)
                v[k] = snap_(0.999 * v[k] + 0.001 * g**2)
                p[k] = snap_(p[k] - 1e-2 * (m[k] / (1 - 0.9**step)) / (np.sqrt(v[k] / (1 - 0.999**step)) + 1e-8))
    return p


# Step 4: the streaming model in ONNX: X [7, 1, 10] and the state in; logits, Y_h, Y_c out. The feature
# normalization is the model's first two ops, (X - mean) * (1 / std), not folded into the LSTM's input
# weights: folded, each weight row is divided by its band's std (0.27 to 2.5 here), and one int8 scale per
# weight column (and one per tensor for the raw features, -12 to -2 in one band, std 0.27) cannot hold
# both; int8 then lost 1.9 points against float, and 0 with the normalization as ops (docs/usage.md).
def export(p, norm) -> onnx.ModelProto:
    mean, std = norm
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(f32(p["Wx"].T)[None], "W"),
        numpy_helper.from_array(f32(p["Wh"].T)[None], "R"),
        numpy_helper.from_array(np.concatenate([f32(p["b"]), np.zeros(4 * HIDDEN, np.float32)])[None], "B"),
        numpy_helper.from_array(f32(p["Wy"].T), "Wy"),
        numpy_helper.from_array(f32(p["by"]), "by"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
    ]
    nodes = [
        helper.make_node("LSTM", ["Xn", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN),
        helper.make_node("Squeeze", ["Y_h", "axis0"], ["h_last"]),
        helper.make_node("Gemm", ["h_last", "Wy", "by"], ["logits"], transB=1),
    ]
    if np.any(mean != 0) or np.any(std != 1):
        inits += [numpy_helper.from_array(f32(mean), "mean"), numpy_helper.from_array(f32(1 / std), "inv_std")]
        nodes[:0] = [helper.make_node("Sub", ["X", "mean"], ["Xc"]), helper.make_node("Mul", ["Xc", "inv_std"], ["Xn"])]
    else:  # no normalization (seeded_model): the LSTM reads X itself
        nodes[0].input[0] = "X"
    state = [1, 1, HIDDEN]
    graph = helper.make_graph(
        nodes,
        "kws_stream",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [CHUNK, 1, BANDS]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES]),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, state),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def seeded_model(rng) -> onnx.ModelProto:
    """The streaming model with random weights drawn from `rng` and no training (benchmarks, stream
    hashes): the same ops and shapes as the trained one."""
    h = HIDDEN
    p = {
        "Wx": rng.standard_normal((BANDS, 4 * h)) * 0.3,
        "Wh": rng.standard_normal((h, 4 * h)) * 0.1,
        "b": rng.standard_normal(4 * h) * 0.1,
        "Wy": rng.standard_normal((h, CLASSES)) * 0.3,
        "by": np.zeros(CLASSES),
    }
    return export(p, (np.zeros(BANDS), np.ones(BANDS)))


def calibration_chunks(p, norm, x_train, n: int) -> list:
    """(chunk, h, c) inputs of the streaming model for `n` training utterances: the state each chunk
    starts from is the one the float model carries into it, so the ranges are those seen in use."""
    batches = []
    for x in x_train[:n]:
        h, c = np.zeros((1, HIDDEN)), np.zeros((1, HIDDEN))
        for k in range(0, FRAMES, CHUNK):
            batches.append([x[k : k + CHUNK, None, :], h[None].astype(np.float32), c[None].astype(np.float32)])
            _, h, cache = forward(p, ((x[None, k : k + CHUNK] - norm[0]) / norm[1]), h0=(h, c))
            c = cache[-1][-1]
    return batches


def stream(ex, model, x_test) -> tuple[list, int]:
    """Every utterance through a StreamingSession, chunk by chunk: (predictions, NPU cycles per utterance)."""
    inputs = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input}
    sess = tvm_npu.StreamingSession(ex, inputs, [o.name for o in model.graph.output], state={"h0": "Y_h", "c0": "Y_c"})
    modules = tvm_npu.runtime.npu_modules(sess.vm)
    pred, cycles = [], 0
    for x in x_test:
        sess.reset()
        for m in modules:
            m["reset_profile"]()
        for k in range(0, FRAMES, CHUNK):
            logits = sess(X=x[k : k + CHUNK, None, :])["logits"]
        cycles += sum(tvm_npu.runtime.profile_of(m)["total"]["total_cycles"] for m in modules)
        pred.append(int(logits.argmax()))
    return pred, cycles // len(x_test)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="lstm_kws")
    ap.add_argument("--quick", action="store_true", help="a smaller data set and fewer epochs")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_train, n_test, epochs = (60, 20, 12) if args.quick else (150, 40, 20)

    print("Step 1-2: synthesizing keyword audio and its log-mel features ...")
    x_train, y_train = dataset(n_train, seed=1)
    x_test, y_test = dataset(n_test, seed=2)
    flat = x_train.reshape(-1, BANDS).astype(np.float64)  # float64 sums: last bits only, which snap() absorbs
    norm = snap(flat.mean(0)), snap(flat.std(0) + 1e-6)
    print(f"  {len(x_train)} training and {len(x_test)} test utterances, {FRAMES} frames x {BANDS} bands")

    print(f"Step 3: training 10 -> LSTM {HIDDEN} -> {CLASSES} in numpy ({epochs} epochs) ...")
    p = train((x_train - norm[0]) / norm[1], y_train, epochs)
    float_pred = forward(p, (x_test - norm[0]) / norm[1])[0].argmax(1)
    float_acc = float((float_pred == y_test).mean())
    print(f"  float accuracy on the test set: {float_acc:.1%}")

    print(f"Step 4: exporting the streaming model ({CHUNK} frames per call) to ONNX ...")
    model = export(p, norm)
    onnx.save(model, out / "kws_stream.onnx")

    print("Step 5: compiling for the NPU ...")
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    print(f"  {report.summary()}; {len(report.regions)} NPU region(s) (the LSTM, the classifier)")
    pinned = {k: v for info in report.regions.values() for k, v in info.get("pinned_state", {}).items()}
    print(
        f"  recurrent state pinned in SRAM: {len(pinned)} tensors (h and c at each of the {CHUNK - 1} step "
        f"boundaries of a chunk), {sum(v[1] for v in pinned.values())} bytes; no DMA moves them"
    )

    print("Step 6: streaming every test utterance through the NPU, chunk by chunk ...")
    npu_pred, per = stream(ex, model, x_test)
    npu_acc = float((np.array(npu_pred) == y_test).mean())
    print(
        f"  NPU (fp16, streamed in {FRAMES // CHUNK} chunks) accuracy: {npu_acc:.1%}  vs float {float_acc:.1%}"
        f"  ({npu_acc - float_acc:+.1%}); {per} NPU cycles per 1 s utterance "
        f"({per / tvm_npu.get_config().clock_mhz:.0f} us at {tvm_npu.get_config().clock_mhz} MHz)"
    )
    agree = float((np.array(npu_pred) == float_pred).mean())
    print(f"  NPU and float agree on {agree:.1%} of the test utterances")

    print("Step 7: int8 with a 16-bit cell state — quantize the streaming model, compile, stream again ...")
    qmod, qrep = tvm_npu.quantize(
        tvm_npu.from_onnx(model), calibration_chunks(p, norm, x_train, 48), method="percentile", progress=False
    )
    qreport = tvm_npu.BuildReport()
    qex = tvm_npu.build(qmod, report=qreport)
    wide = sum(t.bits == 16 for t in qrep.tensors)
    print(
        f"  {qreport.summary()}; {len(qreport.regions)} NPU region(s); {wide} tensors in int16 (c, f*c and "
        f"i*g at each of the {CHUNK} steps, and the state carried in)"
    )
    int8_pred, int8_per = stream(qex, model, x_test)
    int8_acc = float((np.array(int8_pred) == y_test).mean())
    print(
        f"  NPU int8 accuracy: {int8_acc:.1%}  vs float {float_acc:.1%}  ({int8_acc - float_acc:+.1%}); "
        f"{int8_per} NPU cycles per utterance"
    )
    summary = {
        "float_accuracy": float_acc,
        "npu_accuracy": npu_acc,
        "cycles_per_inference": per,
        "agreement": agree,
        "pinned": len(pinned),
        "int8_accuracy": int8_acc,
        "int8_cycles_per_inference": int8_per,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
