"""Two builds at once: each build's configuration, rejections and streams travel with that build as
arguments (build.BuildContext, issue 18), so two models built in two threads for two NPU configurations
get exactly the streams they get when built one after the other."""

import sys
import threading

import tvm_npu
from tvm_npu.models import small_cnn

# (model, configuration) per thread. The two configurations differ in SRAM and MAC array, and in both
# models the global average pool's window fits in npu-ref's SRAM but not in npu-small's: the partition
# depends on the configuration as well as the plan. (With a configuration read from module state, as
# before issue 18, this failed 8 times in 8 runs.)
JOBS = ((lambda: small_cnn(image=256), "npu-ref"), (lambda: small_cnn(seed=1, image=240, classes=20), "npu-small"))
REPEATS = 2  # builds per thread: more chances for the two to interleave


def streams(mod, config) -> list[bytes]:
    ex = tvm_npu.build(mod, config=config)
    return [bytes(m["get_stream"]()) for m in tvm_npu.runtime.npu_modules(ex)]


def test_two_builds_in_two_threads_match_sequential_builds():
    mods = [tvm_npu.from_onnx(model()) for model, _ in JOBS]
    configs = [config for _, config in JOBS]
    sequential = [streams(mod, config) for mod, config in zip(mods, configs)]
    swapped = [streams(mod, config) for mod, config in zip(mods, configs[::-1])]
    assert all(s != w for s, w in zip(sequential, swapped))  # a mixed-up configuration would show

    start = threading.Barrier(len(JOBS))
    results: list = [[] for _ in JOBS]
    errors: list = []

    def work(i):
        try:
            start.wait()
            for _ in range(REPEATS):
                results[i].append(streams(mods[i], configs[i]))
        except BaseException as err:  # noqa: BLE001 - reported by the main thread below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(JOBS))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # hand the GIL over often: the builds interleave at many more points
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    for i, runs in enumerate(results):
        assert all(run == sequential[i] for run in runs), f"thread {i} ({configs[i]}) got other streams"
