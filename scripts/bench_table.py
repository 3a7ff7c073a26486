#!/usr/bin/env python3
"""Turns the JSON of round_overhead_bench / synthetic_speedup_bench into markdown tables.

Usage: scripts/bench_table.py results/*.json > summary.md

Uses the median aggregate of each benchmark when repetitions were run (otherwise the single
run). Targets are marked: per_row_vs_expsum <= 1.25, V=128256 K=5 T=1 round <= 0.6 ms, greedy
round <= 2x the max passes, 0 allocations per round, measured/predicted speedup >= 0.97.
"""
import json
import re
import sys


def load(paths):
    runs = {}
    context = None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            name = b.get("run_name", b["name"])
            runs[name] = b
    return runs, context


def args_of(name):
    return {k: int(v) for k, v in re.findall(r"(\w+):(-?\d+)", name)}


def mark(ok):
    return "✅" if ok else "❌"


def fmt(x, digits=2):
    return f"{x:.{digits}f}"


def round_tables(runs):
    out = []
    base = {}
    for name, b in runs.items():
        if name.startswith(("BM_MaxPass", "BM_ExpSumPass")):
            base.setdefault(args_of(name)["V"], {})[name.split("/")[0]] = b
    if base:
        out.append("### Baseline passes (per row)\n")
        out.append("| V | max pass µs | exp-sum pass µs |")
        out.append("|---|---|---|")
        for V in sorted(base):
            m = base[V].get("BM_MaxPass", {})
            e = base[V].get("BM_ExpSumPass", {})
            unit = lambda b: b.get("real_time", float("nan")) * {"ns": 1e-3, "us": 1, "ms": 1e3}.get(
                b.get("time_unit", "ns"), 1)
            out.append(f"| {V} | {fmt(unit(m))} | {fmt(unit(e))} |")
        out.append("")

    kernels = [(n, b) for n, b in runs.items() if n.startswith("BM_Kernel_")]
    if kernels:
        out.append("### Kernels (one row; public pure functions the decoder calls)\n")
        out.append("| kernel | V | top_p | µs (wall) | µs (CPU) |")
        out.append("|---|---|---|---|---|")
        for n, b in kernels:
            a = args_of(n)
            scale = {"ns": 1e-3, "us": 1, "ms": 1e3}.get(b.get("time_unit", "ns"), 1)
            out.append(f"| {n.split('/')[0][len('BM_Kernel_'):]} | {a['V']} | "
                       f"{'0.9' if a.get('top_p') else '-'} | {fmt(b['real_time'] * scale, 1)} | "
                       f"{fmt(b['cpu_time'] * scale, 1)} |")
        out.append("")

    rounds = [(n, b) for n, b in runs.items() if n.startswith("BM_Round/")]
    if rounds:
        out.append("### One speculative round (SpeculativeDecoder, free models)\n")
        out.append("round = steady-state wall time per round (between chunk callbacks); round "
                   "CPU = thread CPU of whole generate() calls / their rounds (setup included); "
                   "rows = draft rows + target rows processed per round; ratios: round / (rows × "
                   "baseline pass), wall and CPU. Targets: per-row ≤ 1.25 × exp-sum; greedy ≤ 2 × "
                   "max passes; V=128256 K=5 T=1 ≤ 0.6 ms; 0 allocations per round.\n")
        out.append("| V | K | mode | logprobs | round µs | round CPU µs | rows | α̂ | "
                   "per-row/exp-sum | (CPU) | vs max passes | (CPU) | allocs/round | allocs/gen |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for n, b in sorted(rounds, key=lambda nb: tuple(args_of(nb[0]).values())):
            a = args_of(n)
            greedy = a["T"] == 0
            mode = "greedy" + (" (top_p set)" if a["top_p"] else "") if greedy else (
                "T=1 top_p=0.9" if a["top_p"] else "T=1")
            ratio = b["per_row_vs_expsum"]
            ratio_cpu = b["per_row_vs_expsum_cpu"]
            cells = [str(a["V"]), str(a["K"]), mode, "on" if a["logprobs"] else "off"]
            round_us = b["round_us"]
            target_ms = a["V"] == 128256 and a["K"] == 5 and not greedy
            rt = fmt(round_us, 0) + (f" {mark(round_us <= 600)}" if target_ms else "")
            rtc = fmt(b["round_cpu_us"], 0) + (
                f" {mark(b['round_cpu_us'] <= 600)}" if target_ms else "")
            cells += [rt, rtc, fmt(b["rows_per_round"]), fmt(b["alpha_hat"])]
            cells += [f"{fmt(ratio)} {mark(ratio <= 1.25)}", f"{fmt(ratio_cpu)} {mark(ratio_cpu <= 1.25)}"]
            if greedy:
                v, vc = b["vs_max_passes"], b["vs_max_passes_cpu"]
                cells += [f"{fmt(v)} {mark(v <= 2)}", f"{fmt(vc)} {mark(vc <= 2)}"]
            else:
                cells += ["-", "-"]
            cells += [f"{fmt(b['allocs_round'])} {mark(b['allocs_round'] == 0)}",
                      fmt(b["allocs_gen"], 1)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def speedup_table(runs):
    rows = [(n, b) for n, b in runs.items() if n.startswith("BM_Speedup/")]
    if not rows:
        return []
    out = ["### End-to-end speedup, synthetic cost-controlled models\n",
           "speedup = spec tok/s ÷ autoregressive tok/s (same run, same prompts and seeds); "
           "predicted = (1−α̂^(K+1)) / ((1−α̂)(Kĉ+1)) with the decoder's α̂ and ĉ; "
           "CPU columns: the same ratio from thread CPU time, predicted with the configured c. "
           "Target: measured/predicted ≥ 0.97.\n",
           "| α | c | K | AR tok/s | spec tok/s | speedup | α̂ | ĉ | predicted | meas/pred | "
           "speedup (CPU) | pred (c) | CPU meas/pred |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, b in sorted(rows, key=lambda nb: tuple(args_of(nb[0]).values())):
        a = args_of(n)
        out.append("| " + " | ".join([
            fmt(a["alpha"] / 100), fmt(a["c"] / 100), str(a["K"]), fmt(b["ar_tok_s"], 1),
            fmt(b["spec_tok_s"], 1), fmt(b["speedup"]), fmt(b["alpha_hat"], 3),
            fmt(b["c_hat"], 3), fmt(b["predicted"]),
            f"{fmt(b['meas_vs_pred'], 3)} {mark(b['meas_vs_pred'] >= 0.97)}",
            fmt(b["speedup_cpu"]), fmt(b["pred_nominal_c"]),
            f"{fmt(b['cpu_vs_pred'], 3)} {mark(b['cpu_vs_pred'] >= 0.97)}"]) + " |")
    out.append("")
    return out


def main():
    runs, context = load(sys.argv[1:])
    print("## specdec benchmark summary\n")
    if context:
        print(f"{context.get('date', '')} — {context.get('host_name', '')}, "
              f"{context.get('num_cpus', '?')} CPUs @ {context.get('mhz_per_cpu', '?')} MHz, "
              f"load {context.get('load_avg', '?')}\n")
    print("\n".join(round_tables(runs) + speedup_table(runs)))


if __name__ == "__main__":
    main()
