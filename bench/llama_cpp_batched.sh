#!/usr/bin/env bash
# Batched decoding through llama.cpp: total tokens/s of speculative batched decoding
# (BatchedDecoder over BatchedModel) against plain batched decoding (the batched target alone,
# one row per sequence and call) of the same prompts, for every B in WIDTHS and every draft
# policy in POLICIES: "k8" (a fixed K = 8) and "goodput" (-k auto: one plan per step sets every
# sequence's draft length, from cost curves measured before decoding). Each (B, policy) is one
# specdec-llama --parallel process: R paired runs (speculative and plain, the order alternating,
# each from an empty KV cache), medians. Greedy unless TEMP is set, 1 thread per model, every
# process at nice 19. Per-sequence latency: the median over the sequences of the milliseconds
# per token each waited from joining the batch to leaving it (medians of the runs).
#
#   [WIDTHS="1 2 4 8 16 32"] [POLICIES="k8 goodput"] [TEMP=0] [TARGET=x.gguf DRAFT=y.gguf] \
#   [EXTRA_ARGS="--kv-unified on"] \
#   bench/llama_cpp_batched.sh [build dir (default build/release)] [R (default 5)] [-n (200)]
#
# Without TARGET / DRAFT: the shipped pair's f16 GGUF. Prints one JSON object per run (the CLI's
# --json summary) on stdout, then a Markdown table.
set -euo pipefail
build="${1:-build/release}"
repeat="${2:-5}"
tokens="${3:-200}"
cli="$build/examples/specdec-llama"
models=()
if [ -n "${TARGET:-}" ]; then models+=(-m "$TARGET"); fi
if [ -n "${DRAFT:-}" ]; then models+=(-md "$DRAFT"); fi
out="$(mktemp)"
for width in ${WIDTHS:-1 2 4 8 16 32}; do
  for policy in ${POLICIES:-k8 goodput}; do
    case "$policy" in
      k8) draft=(-k 8) ;;
      goodput) draft=(-k auto) ;;
      *) echo "llama_cpp_batched.sh: unknown policy '$policy' (k8 goodput)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086  # EXTRA_ARGS: more specdec-llama flags, word-split on purpose
    nice -n 19 "$cli" "${models[@]}" --parallel "$width" -n "$tokens" --repeat "$repeat" \
      --temp "${TEMP:-0}" -t 1 -td 1 "${draft[@]}" ${EXTRA_ARGS:-} --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); d["policy"]=sys.argv[1]; print(json.dumps(d))' "$policy" |
      tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("\n| B | policy | specdec batched (tokens/s) | plain batched (tokens/s) | ratio (median of pairs) "
      "| ms per token per sequence: specdec, plain | rows per target call | draft calls "
      "| acceptance rate | identical |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|:---:|")
for r in rows:
    s, p = r["speculative"], r["plain"]
    print(f'| {r["parallel"]} | {r["policy"]} | {s["tokens_per_second"]:.0f} | '
          f'{p["tokens_per_second"]:.0f} | {r["measured_speedup"]:.2f}x | '
          f'{s["ms_per_token_per_sequence"]:.3f}, {p["ms_per_token_per_sequence"]:.3f} | '
          f'{s["rows_per_target_call"]:.1f} | {s["draft_calls"]} | {s["acceptance_rate"]:.3f} | '
          f'{"yes" if r["identical"] else "no"} |')
PY
rm -f "$out"
