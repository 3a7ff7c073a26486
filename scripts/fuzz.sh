#!/usr/bin/env bash
# Builds the libFuzzer harness tests/fuzz/decoder_fuzz.cpp with clang++ (ASan + UBSan) in
# build/fuzz and runs it for SECONDS seconds (default 60) on the corpus in build/fuzz/corpus,
# which the fuzzer grows from nothing (no seed files are needed). Extra arguments go to
# libFuzzer, e.g.  scripts/fuzz.sh 3600 -jobs=2 -workers=2.  A finding is saved as
# build/fuzz/crash-*; reproduce it with  build/fuzz/tests/fuzz/decoder_fuzz <file>.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
cmake -S . -B build/fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSPECDEC_BUILD_FUZZERS=ON -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
      -DSPECDEC_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/fuzz -j"${JOBS:-$(nproc)}" --target decoder_fuzz
mkdir -p build/fuzz/corpus
cd build/fuzz
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  tests/fuzz/decoder_fuzz -max_total_time="$seconds" -max_len=512 -timeout=20 -rss_limit_mb=2048 \
  -print_final_stats=1 "$@" corpus
