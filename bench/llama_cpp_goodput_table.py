#!/usr/bin/env python3
"""The goodput policy's record through llama.cpp as a table: per (weights, threads, T) the
median over prompts of every setting's paired speedup over specdec's plain decoding, goodput
(and goodput with block verification) over the best static setting by medians, and the mean
share of plain rounds in goodput's generations.

  bench/llama_cpp_goodput_table.py RUN.jsonl [MORE.jsonl ...]

RUN.jsonl: llama_cpp_speedup's JSON lines with `weights` and `threads` added, one process per
prompt and cell, settings goodput-measured, goodput-measured-block, K2, K4, K8, block4
(docs/llama_cpp.md, "50 prompts, one and two threads, at 1e82534").
"""
import collections
import json
import statistics
import sys

STATICS = ["K2", "K4", "K8", "block4"]
WEIGHTS_ORDER = {"f16": 0, "q8_0": 1, "q4_0": 2}


def main():
    records = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    plain_share = collections.defaultdict(list)  # goodput's plain rounds per generation
    for r in records:
        key = (r["weights"], r["threads"], r["temperature"])
        cells[key][r["setting"]].append(r["speedup"])
        if r["setting"] == "goodput-measured":
            lengths = r.get("draft_lengths", [])
            plain_share[key].append(lengths[0] / sum(lengths) if sum(lengths) else 0)
    print("| weights | threads | T | prompts | goodput | gp-block | " + " | ".join(STATICS) +
          " | goodput / best static (gp-block) | plain rounds, goodput |")
    print("|---|---|---|---|" + "---|" * (len(STATICS) + 4))
    for key in sorted(cells, key=lambda k: (WEIGHTS_ORDER.get(k[0], 9), k[1], k[2])):
        medians = {s: statistics.median(v) for s, v in cells[key].items()}
        best = max(medians[s] for s in STATICS if s in medians)
        goodput = medians.get("goodput-measured", float("nan"))
        block = medians.get("goodput-measured-block", float("nan"))
        row = [key[0], str(key[1]), f"{key[2]:g}", str(len(cells[key]["goodput-measured"])),
               f"{goodput:.3f}", f"{block:.3f}"]
        row += [f"{medians[s]:.3f}" if s in medians else "-" for s in STATICS]
        row += [f"{goodput / best:.3f} ({block / best:.3f})",
                f"{100 * statistics.mean(plain_share[key]):.0f} %"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
