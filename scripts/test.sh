#!/usr/bin/env bash
# The whole test suite, as README's quick start runs it: installs what is missing, builds Release
# with tests, examples and benchmarks, runs ctest (the consumer-package tests included, label
# consumer), then builds the tests again under AddressSanitizer + UndefinedBehaviorSanitizer and
# runs them. With the pinned llama.cpp (installed once by scripts/install-llama-cpp.sh) the
# llama.cpp adapter's tests run too; SPECDEC_WITH_LLAMA_CPP=OFF skips them.
#
#   scripts/test.sh [stage...]    stages, in this order by default (.ci/run times each):
#     deps        scripts/install-deps.sh (and the pinned llama.cpp)
#     release     configure + build build/release (Release; tests, examples, benchmarks)
#     tests       ctest in build/release, all but the consumer tests
#     consumer    ctest -L consumer in build/release (scripts/consumer-test.sh)
#     sanitizers  configure + build + ctest build/asan (ASan + UBSan; docs/ci.md says what it
#                 leaves out and why)
# Environment: JOBS (default nproc), SPECDEC_WITH_LLAMA_CPP (default ON), CMAKE_PREFIX_PATH (a
# llama.cpp of your own), CMAKE_GENERATOR (default Ninja when installed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
stages=("$@")
((${#stages[@]})) || stages=(deps release tests consumer sanitizers)
for stage in "${stages[@]}"; do
  case "$stage" in
    deps | release | tests | consumer | sanitizers) ;;
    *) echo "test.sh: unknown stage '$stage' (deps release tests consumer sanitizers)" >&2; exit 2 ;;
  esac
done
jobs="${JOBS:-$(nproc)}"
# Ninja: faster no-op rebuilds, and build/*/.ninja_log records how long each target took.
generator=()
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# A build dir configured with another generator keeps it (CMake refuses to switch).
generator_for() {
  if [ ! -f "$1/CMakeCache.txt" ] && ((${#generator[@]})); then printf '%s\n' "${generator[@]}"; fi
}
llama_args() {
  if [ "${SPECDEC_WITH_LLAMA_CPP:-ON}" = OFF ]; then
    echo -DSPECDEC_WITH_LLAMA_CPP=OFF
  else
    echo -DSPECDEC_WITH_LLAMA_CPP=ON
    echo "-DCMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-$(scripts/install-llama-cpp.sh)}"
  fi
}

for stage in "${stages[@]}"; do
  case "$stage" in
    deps)
      echo "== Dependencies =="
      scripts/install-deps.sh
      ;;
    release)
      echo "== Release build =="
      mapfile -t llama < <(llama_args)
      mapfile -t gen < <(generator_for build/release)
      cmake -S . -B build/release "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=ON \
            -DSPECDEC_BUILD_EXAMPLES=ON -DSPECDEC_BUILD_BENCHMARKS=ON "${llama[@]}" >/dev/null
      cmake --build build/release -j"$jobs"
      ;;
    tests)
      echo "== Tests (Release) =="
      ctest --test-dir build/release --output-on-failure -j"$jobs" -LE consumer
      ;;
    consumer)
      echo "== Consumer packages (find_package, add_subdirectory, strict warnings) =="
      JOBS="$jobs" ctest --test-dir build/release --output-on-failure -L consumer
      ;;
    sanitizers)
      echo "== AddressSanitizer + UndefinedBehaviorSanitizer =="
      # The portable build: the -march=native variants are not built under the sanitizers (but
      # the kernels' own test, the one place the native kernels run under ASan; see
      # tests/CMakeLists.txt), nor are the header-alone objects, examples or benchmarks.
      # Clang at -O1 -g1: GCC at -O2 -g compiled the tests 3-8x slower under ASan + UBSan
      # (verify_test: 99 s of CPU against 12 s; docs/ci.md), and this build compiles only what
      # runs under the sanitizers. -O1 keeps the instrumented tests fast; -g1 (line tables) is
      # all the sanitizers' stack traces need. The Release build stays GCC, so both compilers
      # build every test. Without clang++ (a user's machine), the default compiler at the same
      # flags.
      mapfile -t llama < <(llama_args)
      mapfile -t gen < <(generator_for build/asan)
      compiler=()
      if [ ! -f build/asan/CMakeCache.txt ] && command -v clang++ >/dev/null; then
        compiler=(-DCMAKE_CXX_COMPILER=clang++)
      fi
      cmake -S . -B build/asan "${gen[@]}" "${compiler[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DSPECDEC_SANITIZE=ON \
            -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_BUILD_BENCHMARKS=OFF \
            "${llama[@]}" >/dev/null
      cmake --build build/asan -j"$jobs"
      # tests/lsan.supp names only allocations llama.cpp's own (uninstrumented) libraries keep for
      # the life of the process; a leak in specdec's code is still reported. The failtests
      # (-fsyntax-only compiles, no sanitizer involved) already ran in the tests stage.
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
        ctest --test-dir build/asan --output-on-failure -j"$jobs" -LE failtest
      ;;
  esac
done
