#!/usr/bin/env bash
# Batched decoding through llama.cpp: total tokens/s of speculative batched decoding
# (BatchedDecoder over BatchedModel, draft K = 8) against plain batched decoding (the batched
# target alone, one row per sequence and call) of the same prompts, for B = 1, 2, 4, 8, 16.
# Each B is one specdec-llama --parallel process: R paired runs (speculative then plain, each
# from an empty KV cache), medians. Greedy, 1 thread per model, the shipped pair's f16 GGUF,
# every process at nice 19.
#
#   bench/llama_cpp_batched.sh [build dir (default build/dev)] [R (default 5)] [-n (default 200)]
#
# Prints one JSON object per B (the CLI's --json summary) on stdout, then a Markdown table.
set -euo pipefail
build="${1:-build/dev}"
repeat="${2:-5}"
tokens="${3:-200}"
cli="$build/examples/specdec-llama"
out="$(mktemp)"
for width in 1 2 4 8 16; do
  nice -n 19 "$cli" --parallel "$width" -n "$tokens" --repeat "$repeat" -t 1 -td 1 --json |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("\n| B | specdec batched (tokens/s) | plain batched (tokens/s) | ratio (median of pairs) "
      "| rows per target call | acceptance rate | identical |")
print("|---:|---:|---:|---:|---:|---:|:---:|")
for r in rows:
    s, p = r["speculative"], r["plain"]
    print(f'| {r["parallel"]} | {s["tokens_per_second"]:.0f} | {p["tokens_per_second"]:.0f} | '
          f'{r["measured_speedup"]:.2f}x | {s["rows_per_target_call"]:.1f} | '
          f'{s["acceptance_rate"]:.3f} | {"yes" if r["identical"] else "no"} |')
PY
rm -f "$out"
