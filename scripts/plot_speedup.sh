#!/usr/bin/env bash
# Draws docs/img/speedup.png: the measured speedup of speculative over plain decoding for the example
# GPT pair against K, one curve per temperature, next to the geometric model's prediction.
#
# Usage:
#   scripts/plot_speedup.sh                      build gpt_speedup, run the full sweep, plot it
#   scripts/plot_speedup.sh -- FLAGS...          the same with gpt_speedup flags, e.g.
#                                                  -- --prompts 10 --tokens 100   (quick, noisy)
#   scripts/plot_speedup.sh RESULTS.tsv          plot an existing gpt_speedup TSV
# The sweep writes $BUILD_DIR/gpt_speedup.{json,tsv,md} (md = the markdown table). Run it on a
# quiet machine: the full sweep (60 prompts x 200 tokens, K = 1..8, T = 0 and 1, a paired plain
# run for every speculative run) takes tens of minutes and other load skews wall-clock ratios.
# Environment: BUILD_DIR (default build/release), JOBS (default nproc), OUT (default
# docs/img/speedup.png).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/docs/img/speedup.png}"

if [ $# -ge 1 ] && [ "$1" != "--" ]; then
  tsv="$1"
  [ -f "$tsv" ] || { echo "plot_speedup: no such file: $tsv" >&2; exit 2; }
else
  [ $# -ge 1 ] && shift  # the "--"
  "$root/scripts/install-deps.sh"
  build="${BUILD_DIR:-$root/build/release}"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_BENCHMARKS=ON >/dev/null
  cmake --build "$build" -j"${JOBS:-$(nproc)}" --target gpt_speedup
  "$build/bench/gpt_speedup" --out "$build/gpt_speedup.json" "$@" | tee "$build/gpt_speedup.md"
  tsv="$build/gpt_speedup.tsv"
fi

if ! command -v gnuplot >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: gnuplot-nox"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    gnuplot-nox >/dev/null
fi

# The TSV: a "# gpt_speedup: <setup>" line, a header line, then one row per (K, T).
setup="$(sed -n '1s/^# gpt_speedup: //p' "$tsv")"
k_max="$(awk -F'\t' '!/^#/ && NR > 2 && $1 > k { k = $1 } END { print k }' "$tsv")"
temperatures="$(awk -F'\t' '!/^#/ && NR > 2 { print $2 }' "$tsv" | sort -gu | tr '\n' ' ')"
mkdir -p "$(dirname "$out")"
gnuplot <<EOF
set terminal pngcairo size 1000,720 font "sans,11"
set output "$out"
models = "draft: 2 layers, d = 96; target: 6 layers, d = 384"
set title sprintf("speculative vs plain decoding, KJV GPT pair (%s)\n{/*0.8 $setup}", models)
set xlabel "draft length K (tokens drafted per target call)"
set ylabel "speedup over plain decoding"
set key below box Left reverse maxrows 3 width 2
set bmargin 8
set grid ytics
set xtics 1
set xrange [0.5:$k_max + 0.5]
set yrange [0:*]
set datafile separator "\t"
set style line 1 lc rgb "#1f77b4" lw 2 pt 7 ps 1.2
set style line 2 lc rgb "#d62728" lw 2 pt 5 ps 1.2
set style line 3 lc rgb "#2ca02c" lw 2 pt 9 ps 1.2
set style line 4 lc rgb "#9467bd" lw 2 pt 11 ps 1.2
temps = "$temperatures"
# Column col of the rows whose temperature is the i-th of temps (NaN elsewhere: not drawn).
pick(i, col) = column("temperature") == real(word(temps, i)) ? column(col) : NaN
plot 1 with lines lc rgb "#888888" dt 3 title "break-even", \
  for [i=1:words(temps)] "$tsv" \
      using "k":(pick(i, "speedup_median")):(pick(i, "speedup_p25")):(pick(i, "speedup_p75")) \
      with yerrorlines ls i \
      title sprintf("T = %s: measured (median over prompts, IQR)", word(temps, i)), \
  for [i=1:words(temps)] "$tsv" using "k":(pick(i, "predicted")) with lines ls i dt 2 lw 1.5 \
      title sprintf("T = %s: predicted (1-a^{K+1}) / ((1-a)(Kc+1))", word(temps, i)), \
  for [i=1:words(temps)] "$tsv" using "k":(pick(i, "predicted_corrected")) with lines ls i dt 3 \
      lw 1.5 title sprintf("T = %s: predicted / (T(K+1)/T(1))", word(temps, i))
EOF
echo "wrote $out (from $tsv)"
