#!/usr/bin/env bash
# Build the tvm_npu runtime with AddressSanitizer + UndefinedBehaviorSanitizer and run the command-stream
# fuzzer and the reference-NPU tests against it (docs/reliability.md).
#
#   scripts/sanitize.sh [fuzz executions, default 20000]
#
# Needs the package installed (pip install ".[test]"): Python, TVM and the tests come from there; only the
# runtime library is replaced, through TVM_NPU_RUNTIME_LIB. libasan is preloaded because Python is not
# built with it; leak checking is off (the Python interpreter's own allocations are not ours).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SANITIZE_BUILD_DIR:-/tmp/tvm_npu_asan}"
execs="${1:-20000}"
ffi_cmake="$(python -c 'import tvm_ffi.libinfo as l; print(l.find_cmake_path())')"
cmake -S "$root" -B "$build" -Dtvm_ffi_DIR="$ffi_cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > "$build.cmake.log"
cmake --build "$build" -j2 > "$build.build.log"
export TVM_NPU_RUNTIME_LIB="$build/libtvm_npu_runtime.so"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$root"
python -m pytest -q -p no:warnings tests/test_reference_npu.py tests/test_reference_npu_int8_streams.py \
  tests/test_reference_npu_vector.py tests/test_bad_inputs.py tests/test_verify.py tests/test_fast_kernels.py
python benchmarks/fuzz_streams.py --execs "$execs" --seed 11
