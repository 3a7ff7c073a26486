#!/usr/bin/env python3
"""Throughput against batch width B that speculation can reach on a measured cost curve.

Reads the batched target's T(n) (and the batched draft's) from `llama_cpp_speedup --call-costs
--batch B` JSON lines and, for every width B, the draft length K (the same for every sequence)
that maximises total tokens per second under the geometric acceptance model with per-token
acceptance ALPHA:

    tokens per step = B * (1 - alpha^(K + 1)) / (1 - alpha)
    seconds per step = T_target(B * (K + 1)) + K * T_draft(B)

against plain batched decoding, B tokens per T_target(B). This is the plan the batch goodput
policy (include/specdec/batch/goodput.hpp) optimises for when every sequence has the same
acceptance; K = 0 is plain decoding. Between measured row counts T is the line through the two
nearest.

    bench/batch_goodput_prediction.py TARGET.jsonl DRAFT.jsonl [--alpha 0.885,0.855]
        [--widths 1,2,4,8,16,32] [--max-k 8]
"""
import argparse
import json
import sys


def read_curve(path):
    curve = {}
    with open(path) as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                point = json.loads(line)
                curve[int(point["n"])] = float(point["seconds"])
    if not curve:
        sys.exit(f"{path}: no measured points")
    return sorted(curve.items())


def interpolate(curve, n):
    if n <= curve[0][0]:
        return curve[0][1] * n / curve[0][0]
    for (n0, t0), (n1, t1) in zip(curve, curve[1:]):
        if n0 <= n <= n1:
            return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
    (n0, t0), (n1, t1) = curve[-2], curve[-1]
    return t1 + (t1 - t0) * (n - n1) / (n1 - n0)  # past the last point: its slope


def expected_tokens(alpha, k):
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def plan(target, draft, width, alpha, max_k):
    plain = width / interpolate(target, width)
    rates = []
    for k in range(max_k + 1):
        seconds = interpolate(target, width * (k + 1)) + k * interpolate(draft, width)
        rates.append(width * expected_tokens(alpha, k) / seconds)
    best = max(range(max_k + 1), key=lambda k: rates[k])
    return plain, best, rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--alpha", default="0.885,0.855")
    parser.add_argument("--widths", default="1,2,4,8,16,32")
    parser.add_argument("--max-k", type=int, default=8)
    args = parser.parse_args()
    target, draft = read_curve(args.target), read_curve(args.draft)
    most = target[-1][0]
    alphas = [float(a) for a in args.alpha.split(",")]
    widths = [int(w) for w in args.widths.split(",") if int(w) <= most]
    header = "| B | T(B) ms | plain tokens/s |"
    rule = "|--:|--:|--:|"
    for alpha in alphas:
        header += f" alpha {alpha}: best K, tokens/s, / plain | K = 4 / plain | K = 8 / plain |"
        rule += "--:|--:|--:|"
    print(header)
    print(rule)
    for width in widths:
        plain = width / interpolate(target, width)
        cells = [str(width), f"{1e3 * interpolate(target, width):.1f}", f"{plain:.1f}"]
        for alpha in alphas:
            _, best, rates = plan(target, draft, width, alpha, args.max_k)
            cells.append(f"K = {best}, {rates[best]:.1f}, {rates[best] / plain:.2f}x")
            cells += [f"{rates[k] / plain:.2f}x" if k <= args.max_k else "-" for k in (4, 8)]
        print("| " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
