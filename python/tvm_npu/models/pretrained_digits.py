"""The trained digits CNN that ships with tvm_npu, and the held-out images it is measured on.

The only CNN of the project whose weights were trained (issue 33), so that the accuracy of its fp16 and
int8 builds on the NPU can be measured on real images (docs/quality.md, "Vision: digits CNN"). It was
trained by scripts/train_digits_cnn.py on scikit-learn's ``load_digits`` (1,797 8x8 handwritten digits);
its log (``pretrained/digits-cnn/train_log.json``) records the arguments, the versions, the accuracy and
the ONNX file's SHA-256. The images are not shipped: the split is recomputed from scikit-learn, which
ships them, with the split and preprocessing the training used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..contract.errors import NPUError
from .pretrained import pretrained

_FOLDER = Path(__file__).resolve().parent / "pretrained" / "digits-cnn"
ONNX_FILE = "digits_cnn.onnx"
SIZE = 16  # the 8x8 digits upsampled 2x
TEST_SIZE = 0.25
SPLIT_SEED = 0


def digits_cnn(verify: bool = True) -> str:
    """The path of the shipped digits CNN (ONNX opset 17, input "input" float32 [1, 1, 16, 16] scaled to
    [-1, 1], output "logits" [1, 10]).

    Parameters
    ----------
    verify : bool
        Check the file's SHA-256 against the training log first, so that a damaged or replaced file is
        ERR_BAD_ARTIFACT rather than a model with another accuracy.

    Returns
    -------
    str
        The ONNX file's path.
    """
    return str(Path(pretrained("digits-cnn", verify)) / ONNX_FILE)


def preprocess(images: np.ndarray) -> np.ndarray:
    """load_digits' 8x8 images (values 0-16, [n, 8, 8]) as the CNN's input: float32 [n, 1, 16, 16] in
    [-1, 1], each pixel repeated 2x2 (an exact upsampling, the same on every machine)."""
    x = np.asarray(images, dtype=np.float32) / 8.0 - 1.0
    return np.repeat(np.repeat(x, 2, axis=-2), 2, axis=-1)[:, None]


def digits_split(part: str = "heldout") -> tuple[np.ndarray, np.ndarray]:
    """One part of the training's split: "train" (1,347 images) or "heldout" (450), as (images float32
    [n, 1, 16, 16], labels int64 [n]).

    The split is scikit-learn's ``train_test_split(test_size=0.25, stratify=labels, random_state=0)`` of
    ``load_digits``; without scikit-learn this is ERR_INVALID_CONFIG.
    """
    if part not in ("train", "heldout"):
        raise NPUError("ERR_INVALID_CONFIG", f'digits_split: part must be "train" or "heldout", not {part!r}')
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"the digits images come from scikit-learn, which is not installed ({e}): pip install scikit-learn",
        ) from None
    data = load_digits()
    xtr, xte, ytr, yte = train_test_split(
        data.images, data.target, test_size=TEST_SIZE, stratify=data.target, random_state=SPLIT_SEED
    )
    x, y = (xtr, ytr) if part == "train" else (xte, yte)
    return preprocess(x), np.asarray(y, dtype=np.int64)


def digits_heldout() -> tuple[np.ndarray, np.ndarray]:
    """The 450 held-out images and labels (see `digits_split`)."""
    return digits_split("heldout")
