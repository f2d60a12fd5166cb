#!/usr/bin/env bash
# Build the tvm_npu runtime with AddressSanitizer + UndefinedBehaviorSanitizer and run the command-stream
# fuzzer and the tests that run the reference NPU against it (docs/reliability.md).
#
#   scripts/sanitize.sh [fuzz executions, default 20000]
#
# Needs the package installed (pip install ".[test]"): Python, TVM and the tests come from there; only the
# runtime library is replaced, through TVM_NPU_RUNTIME_LIB. libasan is preloaded because Python is not
# built with it; leak checking is off (the Python interpreter's own allocations are not ours).
#
# Without gcc's sanitizer runtimes (libasan, libubsan) it prints that it did not run and exits 0, so a
# machine without them does not fail CI; any failure of the sanitized build, the tests or the fuzzer,
# and every sanitizer report (they abort), still exits non-zero.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SANITIZE_BUILD_DIR:-/tmp/tvm_npu_asan}"
execs="${1:-20000}"
asan="$(gcc -print-file-name=libasan.so 2>/dev/null || true)"
ubsan="$(gcc -print-file-name=libubsan.so 2>/dev/null || true)"
if [[ "$asan" != /* || ! -e "$asan" || "$ubsan" != /* || ! -e "$ubsan" ]]; then
  echo "sanitize.sh: NOT RUN - gcc's libasan.so / libubsan.so were not found (install gcc's sanitizer" \
       "runtimes, e.g. libasan8 and libubsan1 on Debian)"
  exit 0
fi
ffi_cmake="$(python -c 'import tvm_ffi.libinfo as l; print(l.find_cmake_path())')"
step() {  # run a build step quietly, and show its log when it fails
  "$@" > "$build.log" 2>&1 || { tail -n 40 "$build.log"; echo "sanitize.sh: failed: $*"; exit 1; }
}
step cmake -S "$root" -B "$build" -Dtvm_ffi_DIR="$ffi_cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
step cmake --build "$build" -j2
export TVM_NPU_RUNTIME_LIB="$build/libtvm_npu_runtime.so"
export LD_PRELOAD="$asan $ubsan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$root"
# The reference NPU and stream checks directly; real compiled models end to end (random graphs, the
# bad-input suite, artifacts, async calls with timeouts, threads); and the C++ host app, which links
# the sanitized runtime through TVM_NPU_RUNTIME_LIB.
python -m pytest -q -p no:warnings -p no:cacheprovider tests/runtime/test_reference_npu.py \
  tests/runtime/test_reference_npu_int8_streams.py tests/runtime/test_int8_stream_validation.py tests/runtime/test_reference_npu_vector.py tests/runtime/test_reference_npu_norm.py tests/runtime/test_reference_npu_rope.py tests/runtime/test_reference_npu_kv_cache.py tests/runtime/test_reference_npu_w8a16.py tests/runtime/test_reference_npu_w4.py tests/pipeline/test_bad_inputs.py \
  tests/backend/test_verify.py tests/runtime/test_fast_kernels.py tests/pipeline/test_graph_fuzz.py tests/runtime/test_artifact.py tests/tools/test_session.py \
  tests/runtime/test_host_app.py tests/runtime/test_weight_provenance.py tests/quantization/test_lstm_int16.py tests/runtime/test_quantized_staging.py
python benchmarks/fuzz_streams.py --execs "$execs" --seed 11
echo "sanitize.sh: ASan + UBSan clean"
