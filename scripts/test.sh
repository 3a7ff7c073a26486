#!/usr/bin/env bash
# The whole test suite, as README's quick start runs it: installs what is missing, builds Release
# with tests, examples and benchmarks, runs ctest, the consumer-package tests, and the tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer. With the pinned llama.cpp (installed once
# by scripts/install-llama-cpp.sh) the llama.cpp adapter's tests run too;
# SPECDEC_WITH_LLAMA_CPP=OFF skips them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/install-deps.sh
jobs="${JOBS:-$(nproc)}"
llama=(-DSPECDEC_WITH_LLAMA_CPP=OFF)
if [ "${SPECDEC_WITH_LLAMA_CPP:-ON}" != OFF ]; then
  prefix="${CMAKE_PREFIX_PATH:-$(scripts/install-llama-cpp.sh)}"
  llama=(-DSPECDEC_WITH_LLAMA_CPP=ON "-DCMAKE_PREFIX_PATH=$prefix")
fi

echo "== Release build =="
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=ON \
      -DSPECDEC_BUILD_EXAMPLES=ON -DSPECDEC_BUILD_BENCHMARKS=ON "${llama[@]}" >/dev/null
cmake --build build/release -j"$jobs"
ctest --test-dir build/release --output-on-failure -j"$jobs"

echo "== Consumer packages (find_package, add_subdirectory) =="
scripts/consumer-test.sh build/release

echo "== AddressSanitizer + UndefinedBehaviorSanitizer =="
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPECDEC_SANITIZE=ON \
      -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF \
      "${llama[@]}" >/dev/null
cmake --build build/asan -j"$jobs"
# tests/lsan.supp names only allocations llama.cpp's own (uninstrumented) libraries keep for the
# life of the process; a leak in specdec's code is still reported.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  ctest --test-dir build/asan --output-on-failure -j"$jobs"
