#!/usr/bin/env bash
# Lint the tree and fail on any violation (CONTRIBUTING.md):
#
#   pip install ".[lint]" && scripts/lint.sh
#
# ruff (lint, then format --check) over the Python, clang-format --dry-run over the C++ of src/,
# include/ and apps/ (.clang-format; the generated headers included: the generator writes them clean),
# import-linter over python/tvm_npu (the stage layering in pyproject.toml), mypy over the public API
# (pyproject.toml's [tool.mypy] files). Every check runs, so one run lists every violation; the exit
# status is non-zero when any check failed. Nothing is modified: `ruff check --fix`, `ruff format` and
# `clang-format -i` fix what they can.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=()
step() {  # step NAME COMMAND...: run one check, remember it if it fails
  local name="$1"
  shift
  echo "--- $name"
  "$@" || failed+=("$name")
}

for tool in ruff clang-format lint-imports mypy; do
  command -v "$tool" > /dev/null || { echo "lint.sh: $tool not found; pip install \".[lint]\""; exit 2; }
done
# The version pinned in the lint extra, not a system clang-format found first on PATH: another major
# version formats differently.
want="$(python -c 'import importlib.metadata as m; print(m.version("clang-format").split(".")[0])' 2>/dev/null)"
have="$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')"
if [[ -z "$want" || "$have" != "$want" ]]; then
  echo "lint.sh: $(command -v clang-format) is clang-format ${have:-?}, the lint extra pins ${want:-?};" \
       "run it from the environment where you ran pip install \".[lint]\""
  exit 2
fi

step "ruff check" ruff check
step "ruff format" ruff format --check --output-format concise  # `ruff format --diff` shows the changes

if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t cxx < <(git ls-files -- 'src/*.cc' 'src/*.h' 'include/*.h' 'apps/*.cc' 'apps/*.h')
else
  mapfile -t cxx < <(find src include apps -name '*.cc' -o -name '*.h' | sort)
fi
step "clang-format (${#cxx[@]} files)" clang-format --dry-run --Werror "${cxx[@]}"

# python/ first on the path, so the layering checked is this checkout's, not an installed copy's.
step "import-linter" env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" lint-imports
step "mypy" mypy

if (( ${#failed[@]} )); then
  echo "lint.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "lint.sh: all checks passed"
