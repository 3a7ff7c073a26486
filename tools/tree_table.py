#!/usr/bin/env python3
"""Tables of bench/tree_speedup_bench's BM_Decode results (JSON from --benchmark_format=json).

For every (alpha, c, T, node budget N): the best chain with K <= N (token-level or block
verification), the best fixed tree and the best dynamic tree of N nodes per sibling mode and
tree verifier, by model_speedup (tokens per target-call time with the model costs alone; see
the benchmark's file comment), with tokens per target call. Markdown on stdout.

usage: tools/tree_table.py results.json [more.json ...]   (runs of several files pooled)
"""
import json
import re
import sys
from collections import defaultdict

NAME = re.compile(r"BM_Decode/alpha=(\d+)/c=([\d.]+)/T=([\d.]+)/N=(\d+)/(.*)")


def main(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            runs += json.load(f)["benchmarks"]
    chains = defaultdict(list)  # (alpha, c, T) -> [(K, verifier, speedup, tok_per_call)]
    trees = defaultdict(list)   # (alpha, c, T, N) -> [(drafter, siblings, verifier, sp, tpc)]
    for run in runs:
        m = NAME.match(run["name"])
        if not m:
            continue
        alpha, c, t, n, rest = m.groups()
        key = (int(alpha), c, t)
        parts = rest.split("/")
        speedup, tpc = run["model_speedup"], run["tok_per_call"]
        if parts[0] == "chain":
            chains[key].append((int(n), parts[1], speedup, tpc))
        else:
            trees[key + (int(n),)].append((parts[0], parts[1], parts[2], speedup, tpc))
    print("| alpha | T | N | best chain (K <= N) | best fixed tree | best dynamic tree | "
          "tree / chain (tokens/s) | tree / chain (tokens per call) |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(trees):
        alpha, c, t, n = key
        candidates = [x for x in chains[(alpha, c, t)] if x[0] <= n]
        if not candidates:
            continue
        chain = max(candidates, key=lambda x: x[2])
        fixed = [x for x in trees[key] if x[0] != "dynamic"]
        dynamic = [x for x in trees[key] if x[0] == "dynamic"]
        best_fixed = max(fixed, key=lambda x: x[3]) if fixed else None
        best_dynamic = max(dynamic, key=lambda x: x[3]) if dynamic else None
        best = max([x for x in (best_fixed, best_dynamic) if x], key=lambda x: x[3])

        def show(x):
            if x is None:
                return "-"
            return f"{x[0].replace('tree', '')} {x[1]} {x[2]}: {x[3]:.2f}x ({x[4]:.2f}/call)"

        print(f"| {alpha / 100:.1f} | {t} | {n} | K = {chain[0]} {chain[1]}: {chain[2]:.2f}x "
              f"({chain[3]:.2f}/call) | {show(best_fixed)} | {show(best_dynamic)} | "
              f"**{best[3] / chain[2]:.2f}** | {best[4] / chain[3]:.2f} |")
    print()
    print("Per sibling mode and verifier, the best tree of each budget, tokens/s relative to "
          "the best chain:")
    print()
    print("| alpha | T | N | replace rrs | replace traversal | distinct rrs | distinct traversal "
          "| top-k rrs | top-k traversal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(trees):
        alpha, c, t, n = key
        candidates = [x for x in chains[(alpha, c, t)] if x[0] <= n]
        if not candidates:
            continue
        chain = max(candidates, key=lambda x: x[2])
        cells = []
        for siblings in ("replace", "distinct", "top-k"):
            for verifier in ("rrs", "traversal"):
                xs = [x for x in trees[key] if x[1] == siblings and x[2] == verifier]
                cells.append(f"{max(x[3] for x in xs) / chain[2]:.2f}" if xs else "-")
        print(f"| {alpha / 100:.1f} | {t} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
