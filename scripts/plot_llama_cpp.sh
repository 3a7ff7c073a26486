#!/usr/bin/env bash
# Draws speedup vs K for specdec over llama.cpp and llama.cpp's own speculative decoding, from
# the measurements bench/llama_cpp_compare.py --out wrote (same GGUF pair, same prompts, same
# run): the median over prompts of each run's tokens/s over llama.cpp's plain decoding of the
# same prompt, greedy and T = 1.
#   scripts/plot_llama_cpp.sh docs/data/llama_cpp_compare_f16.json docs/img/llama_cpp_speedup.png
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <compare.json> <out.png>" >&2; exit 2; }
command -v gnuplot >/dev/null || {
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    gnuplot-nox >/dev/null
}
data="$(mktemp)"
trap 'rm -f "$data"' EXIT
/usr/bin/python3 - "$1" >"$data" <<'PY'
import json, re, statistics, sys
records = json.load(open(sys.argv[1]))
base = {(r["prompt"], r["temperature"]): r["tokens_per_second"] for r in records
        if r["setting"] == "llama.cpp plain"}
series = {}  # (name, temperature) -> {K: [ratios]}
for r in records:
    m = re.fullmatch(r"(llama\.cpp spec K=|specdec K)(\d+)", r["setting"])
    if not m:
        continue
    name = "llama.cpp speculative" if m.group(1).startswith("llama") else "specdec"
    if (r["prompt"], r["temperature"]) not in base:
        continue
    ratio = r["tokens_per_second"] / base[(r["prompt"], r["temperature"])]
    series.setdefault((name, r["temperature"]), {}).setdefault(int(m.group(2)), []).append(ratio)
for (name, t), by_k in sorted(series.items()):
    print(f'"{name}, T = {t:g}"')
    for k in sorted(by_k):
        print(k, statistics.median(by_k[k]))
    print("\n")
PY
gnuplot <<GP
set terminal pngcairo size 900,540 font ",11"
set output "$2"
set title "Speedup over llama.cpp's plain decoding (same GGUF pair, same prompts, same run)"
set xlabel "K (draft tokens per target call)"
set ylabel "tokens/s relative to llama.cpp plain (median over prompts)"
set key left top
set grid
set logscale x 2
set xrange [0.9:18]
set yrange [0:*]
plot for [i=0:3] "$data" index i using 1:2 with linespoints lw 2 pt 7 title columnheader(1), \
     1 with lines dt 2 lc rgb "gray" title "llama.cpp plain"
GP
echo "wrote $2"
