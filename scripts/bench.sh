#!/usr/bin/env bash
# Builds specdec's benchmarks (Release, -O3 -march=native) and runs them with 5 repetitions,
# reporting aggregates only (the tables use the medians). Writes to build-bench/results/:
#   <bench>.json     Google Benchmark JSON (--benchmark_out)
#   <bench>.txt      console copy
#   summary.md       markdown tables with the targets marked (scripts/bench_table.py)
#   env-<which>.txt  when / where / on which commit / machine load at start and end
#
# Usage: scripts/bench.sh [all|round|synthetic] [extra Google Benchmark flags...]
#   all = round + synthetic
#   e.g. scripts/bench.sh round --benchmark_filter='BM_Round/V:128256'
# Environment: BUILD_DIR (default <repo>/build-bench), JOBS (default 2), and the synthetic
# benchmark's SPECDEC_BENCH_TARGET_MS / _TOKENS / _ITERS / _SPIN (see its header comment).
# Run it on a quiet machine: other load inflates the wall-clock figures (the *_cpu counters are
# less affected).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
jobs=${JOBS:-2}
which=${1:-all}
[ $# -gt 0 ] && shift

case $which in
  all) benches=(round_overhead_bench synthetic_speedup_bench) ;;
  round) benches=(round_overhead_bench) ;;
  synthetic) benches=(synthetic_speedup_bench) ;;
  *) echo "usage: $0 [all|round|synthetic] [benchmark flags...]" >&2; exit 2 ;;
esac

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" -j"$jobs" --target "${benches[@]}"

results=$build/results
mkdir -p "$results"
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet HEAD -- include bench 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "host:    $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "compiler: $(${CXX:-c++} --version | head -1)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$results/env-$which.txt"

for bench in "${benches[@]}"; do
  echo "== $bench"
  "$build/bench/$bench" \
    --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$results/$bench.json" \
    --benchmark_out_format=json \
    "$@" | tee "$results/$bench.txt"
done
echo "load at end:   $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results/env-$which.txt"

jsons=()
for bench in round_overhead_bench synthetic_speedup_bench; do
  [ -f "$results/$bench.json" ] && jsons+=("$results/$bench.json")
done
python3 "$root/scripts/bench_table.py" "${jsons[@]}" >"$results/summary.md"
echo "results: $results (summary.md, *.json, *.txt, env-$which.txt)"
