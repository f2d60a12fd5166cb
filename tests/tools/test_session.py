"""Streaming sessions (session.py): an LSTM fed in chunks, its h and c carried from call to call, gives
exactly the result of feeding the whole sequence; reset starts over; onnxruntime is the reference."""

import threading

import numpy as np
import pytest

import tvm_npu
from lstm_models import lstm_model, ort_run


def test_chunked_equals_whole_and_matches_onnxruntime():
    kw = dict(B=1, I=10, H=16, seed=4)
    whole = tvm_npu.StreamingSession.from_onnx(lstm_model(T=9, **kw), state={"h0": "Y_h", "c0": "Y_c"})
    chunked = tvm_npu.StreamingSession.from_onnx(lstm_model(T=3, **kw), state={"h0": "Y_h", "c0": "Y_c"})
    x = np.random.default_rng(5).standard_normal((9, 1, 10)).astype(np.float32)
    want = whole(X=x)
    parts = [chunked(X=x[k : k + 3]) for k in (0, 3, 6)]
    # Bit for bit: every step computes the same rows in the same order, whatever the chunking.
    np.testing.assert_array_equal(np.concatenate([p["Y"] for p in parts]), want["Y"])
    np.testing.assert_array_equal(parts[-1]["Y_h"], want["Y_h"])
    np.testing.assert_array_equal(parts[-1]["Y_c"], want["Y_c"])
    zeros = np.zeros((1, 1, 16), np.float32)
    ref = ort_run(lstm_model(T=9, **kw), {"X": x, "h0": zeros, "c0": zeros})
    np.testing.assert_allclose(want["Y"], ref[0], rtol=1e-2, atol=1e-2)
    # reset: the next call starts from zero state again, like the first one did.
    chunked.reset()
    np.testing.assert_array_equal(chunked(X=x[:3])["Y"], parts[0]["Y"])


def test_bad_state_names_and_feeds_are_refused():
    model = lstm_model(T=2, B=1, I=3, H=4)
    with pytest.raises(tvm_npu.NPUError, match="ERR_SHAPE_MISMATCH.*state names"):
        tvm_npu.StreamingSession.from_onnx(model, state={"h": "Y_h"})
    sess = tvm_npu.StreamingSession.from_onnx(model, state={"h0": "Y_h", "c0": "Y_c"})
    with pytest.raises(tvm_npu.NPUError, match="ERR_SHAPE_MISMATCH.*feed"):
        sess(X=np.zeros((2, 1, 3), np.float32), h0=np.zeros((1, 1, 4), np.float32))


def test_async_start_poll_wait_and_timeout():
    import tvm
    from tvm import relax

    from tvm_npu.models import mobilenet_v2_shaped

    ex = tvm_npu.build(tvm_npu.from_onnx(mobilenet_v2_shaped(seed=0, size=64)))
    x = np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)
    want = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    am = tvm_npu.AsyncModel(ex)
    # Calls run one at a time on the model's worker: hold it, so the call below cannot have finished when
    # its zero-second wait looks (with the fast kernels a call may take less than a millisecond).
    gate = threading.Event()
    am._worker.submit(gate.wait)
    pending = am.start(x)
    with pytest.raises(tvm_npu.NPUError, match="ERR_TIMEOUT"):
        pending.wait(timeout=0)
    assert not pending.poll()
    gate.set()
    np.testing.assert_array_equal(pending.wait(), want)
    assert pending.poll()
    np.testing.assert_array_equal(am.start(x).wait(timeout=60), want)  # still usable


def test_threads_with_their_own_vms_give_identical_results():
    import threading

    import tvm
    from tvm import relax

    from tvm_npu.models import small_cnn

    ex = tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed=1)))
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    results = []

    def work():
        vm = relax.VirtualMachine(ex, tvm.cpu())
        results.extend(bool(np.array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), want)) for _ in range(50))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 400 and all(results)
