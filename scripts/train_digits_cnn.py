"""Train the small CNN that ships with tvm_npu (`tvm_npu.models.pretrained_digits.digits_cnn()`).

Issue 33, the vision side: every other CNN of the project has seeded random weights, so an int8 build's
accuracy could not be measured. This one is trained on real images that ship inside scikit-learn:
``sklearn.datasets.load_digits`` (1,797 handwritten digits, 8x8, values 0-16). The split is sklearn's
``train_test_split(test_size=0.25, stratify=labels, random_state=0)`` (1,347 train / 450 held out); the
images are scaled to [-1, 1] and upsampled to 16x16 by pixel repetition (the preprocessing is
`tvm_npu.models.pretrained_digits.preprocess`, so the held-out split is recomputed the same way anywhere).

The network (15,338 weights): conv 3x3 1->16, relu, max pool 2; conv 3x3 16->32, relu, max pool 2;
conv 3x3 32->32, relu, max pool 2; conv 2x2 32->10 (the classifier); flatten. Exported to ONNX opset 17 with a
static batch of 1 (input "input" [1, 1, 16, 16], output "logits" [1, 10]).

Reproducible: torch is seeded, deterministic algorithms are enforced and the thread count is fixed, and
the epoch count (not the time) is fixed, so one machine gives the same weights on every run; another CPU
may round a reduction differently, which is why ``train_log.json`` records the file's SHA-256 beside the
accuracy it was measured with.

    pip install ".[llm,test]"      # torch, onnxruntime, scikit-learn
    python scripts/train_digits_cnn.py --out python/tvm_npu/models/pretrained/digits-cnn

About 15 s of CPU time (a minute of wall time on a loaded 2-core machine, most of it imports).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def build_model(torch):
    nn = torch.nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]

    # The classifier is a 2x2 convolution over the last 2x2 map (a dense layer over its 128 values) so that
    # the flatten after it is of an [N, 10, 1, 1] map, which moves no data and keeps the net in one NPU
    # region (flattening the [N, 32, 2, 2] map before a Linear would reorder data on the CPU).
    return nn.Sequential(*block(1, 16), *block(16, 32), *block(32, 32), nn.Conv2d(32, 10, 2), nn.Flatten())


def shift(x: np.ndarray, rng, most: int) -> np.ndarray:
    """Each image moved by a random whole number of pixels (up to `most` each way), the background (-1)
    filling in: the augmentation that keeps 1,347 training images from being memorized."""
    if most == 0:
        return x
    n, _, h, w = x.shape
    pad = np.pad(x, ((0, 0), (0, 0), (most, most), (most, most)), constant_values=-1.0)
    dy, dx = rng.integers(0, 2 * most + 1, size=(2, n))
    return np.stack([pad[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])


def accuracy(torch, model, x, y) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="python/tvm_npu/models/pretrained/digits-cnn")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--shift", type=int, default=2, help="augmentation: random shifts of up to this many pixels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import sklearn
    import torch

    from tvm_npu.models import pretrained_digits as pd

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    (xtr, ytr), (xte, yte) = pd.digits_split("train"), pd.digits_split("heldout")
    model = build_model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    order = np.random.default_rng(args.seed)
    yt = torch.from_numpy(ytr)
    curve = []
    for epoch in range(args.epochs):
        model.train()
        perm = torch.from_numpy(order.permutation(len(ytr)))
        xt = torch.from_numpy(shift(xtr, order, args.shift))
        total = 0.0
        for i in range(0, len(perm), args.batch):
            idx = perm[i : i + args.batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        sched.step()
        model.eval()
        curve.append({"epoch": epoch + 1, "train_loss": round(total / len(ytr), 5)})
        print(f"epoch {epoch + 1:3d}  loss {total / len(ytr):.4f}  held-out {accuracy(torch, model, xte, yte):.4f}")
    model.eval()
    train_acc, held_acc = accuracy(torch, model, xtr, ytr), accuracy(torch, model, xte, yte)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, pd.ONNX_FILE)
    torch.onnx.export(
        model,
        (torch.zeros(1, 1, pd.SIZE, pd.SIZE),),
        path,
        input_names=["input"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
    )
    onnx.checker.check_model(onnx.load(path))
    # The accuracy of the file itself (onnxruntime, batch 1), which is what the NPU is compared with.
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ort_pred = np.array([sess.run(None, {"input": x[None]})[0].argmax() for x in xte])
    onnx_acc = float((ort_pred == yte).mean())
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    log = {
        "script": "scripts/train_digits_cnn.py",
        "arguments": vars(args),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "machine": platform.machine(),
        },
        "data": {
            "dataset": "sklearn.datasets.load_digits",
            "split": f"train_test_split(test_size={pd.TEST_SIZE}, stratify=y, random_state={pd.SPLIT_SEED})",
            "train": int(len(ytr)),
            "heldout": int(len(yte)),
            "preprocess": f"x / 8 - 1, upsampled to {pd.SIZE}x{pd.SIZE} by pixel repetition",
        },
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "loss_curve": curve,
        "accuracy": {"train": train_acc, "heldout_torch": held_acc, "heldout_onnxruntime": onnx_acc},
        "seconds": round(time.time() - t0, 1),
        "sha256": {pd.ONNX_FILE: sha},
    }
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    print(f"train {train_acc:.4f}  held-out {held_acc:.4f} (onnxruntime {onnx_acc:.4f})  {path} sha256 {sha[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
