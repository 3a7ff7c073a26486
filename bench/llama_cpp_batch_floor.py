#!/usr/bin/env python3
"""The batch goodput plan's floor through llama.cpp, against the host's own spread.

One `specdec-llama --parallel B --repeat R` process pairs R runs of speculative batched
decoding with R runs of plain batched decoding of the same prompts, the order alternating. Its
median ratio moves by several per cent from one process to the next on a shared host, even when
both arms do the same work: a single process cannot say whether a policy holds 0.98x of plain
batched decoding. This script runs, for every cell (weights, B, temperature), N processes of the
policy (`-k auto`: goodput) and N of the control (`--plain-control`: the speculative arm drafts
nothing, so both arms are plain batched decoding), the two alternating, and pools every pair:

  - per arm, the geometric mean of all pair ratios, with a 95 % interval over the processes
    (each process's mean log ratio is one observation: processes differ by more than pairs);
  - the processes whose own median falls below 0.98 (the figure a single process would give);
  - goodput over the control: the policy's ratio with the host's spread taken out (Welch).

  bench/llama_cpp_batch_floor.py [--build build/release] [--cells q8_0:2,f16:4,...]
      [--temps 0,1] [--processes 6] [--repeat 12] [--tokens 200] [--warm-decoder]
      [--compare OTHER_SPECDEC_LLAMA] [--out floor.jsonl]
  bench/llama_cpp_batch_floor.py --summarize floor.jsonl[:ARM=LABEL,...] [floor_2.jsonl ...]

--compare adds a third arm, `goodput-b`: the same policy run by another build of specdec-llama
(an A/B of two versions, each read against the same control); the arms' order rotates from
round to round.

--summarize pools every process of the files it is given, cell by cell and arm by arm (each
process one observation, whichever run it came from). A file's arms may be renamed for the pool
(`run_2.jsonl:goodput=e2a4403,goodput-b=8818eb4`) where the runs gave one binary different arms.

Every process is one line of --out (the CLI's --json, the sequences' texts left out, plus
`weights`, `arm`, `round`). The Q8_0 pair comes from
`cmake --build build/release --target specdec_gguf_models_quantized`.
"""
import argparse
import json
import math
import statistics
import subprocess
import sys

# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30; normal beyond).
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
       2.056, 2.052, 2.048, 2.045, 2.042]


def t95(dof):
    if dof < 1:
        return float("inf")
    return T95[int(dof) - 1] if dof <= len(T95) else 1.960


def run(args, weights, width, temp, arm, round_index):
    models = f"{args.build}/models"
    cli = args.compare if arm == "goodput-b" else f"{args.build}/examples/specdec-llama"
    command = [cli, "-m", f"{models}/kjv-target-{weights}.gguf",
               "-md", f"{models}/kjv-draft-{weights}.gguf", "--parallel", str(width),
               "-n", str(args.tokens), "--repeat", str(args.repeat), "--temp", str(temp),
               "-t", "1", "-td", "1", "-k", "auto", "--json"]
    if arm == "control":
        command.append("--plain-control")
    elif args.warm_decoder:
        command.append("--warm-decoder")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    record = json.loads(out)
    for sequence in record.get("sequences", []):
        sequence.pop("text", None)
    record.update(weights=weights, arm=arm, round=round_index)
    return record


def mean_log(record):
    ratios = record["pair_ratios"]
    return sum(math.log(r) for r in ratios) / len(ratios)


def interval(values):
    """Mean and 95 % half-width of a list of per-process mean log ratios."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("inf"), 0.0
    variance = statistics.variance(values)
    return mean, t95(len(values) - 1) * math.sqrt(variance / len(values)), variance


def summarize(records):
    cells = {}
    for r in records:
        cells.setdefault((r["weights"], r["parallel"], r["temperature"]), {}).setdefault(
            r["arm"], []).append(r)
    policies = list(dict.fromkeys(r["arm"] for r in records if r["arm"] != "control"))
    header = ["weights", "B", "T"]
    for arm in policies + ["control"]:
        header += [f"{arm}: pooled ratio [95 %]", "processes below 0.98"]
    header += [f"{arm} / control [95 %]" for arm in policies]
    print("| " + " | ".join(header) + " |")
    print("|---|---:|---:|" + "---|---:|" * (len(policies) + 1) + "---|" * len(policies))
    for (weights, width, temp), arms in sorted(cells.items()):
        row = [weights, str(width), f"{temp:g}"]
        stats = {}
        for arm in policies + ["control"]:
            rs = arms.get(arm, [])
            if not rs:
                row += ["-", "-"]
                continue
            logs = [mean_log(r) for r in rs]
            mean, half, variance = interval(logs)
            stats[arm] = (mean, variance, len(logs))
            below = sum(1 for r in rs if r["measured_speedup"] < 0.98)
            pairs = sum(len(r["pair_ratios"]) for r in rs)
            row.append(f"{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, "
                       f"{math.exp(mean + half):.3f}] ({pairs} pairs)")
            row.append(f"{below} of {len(rs)}")
        for arm in policies:
            if arm in stats and "control" in stats and stats[arm][2] > 1 and stats["control"][2] > 1:
                (m1, v1, n1), (m2, v2, n2) = stats[arm], stats["control"]
                se2 = v1 / n1 + v2 / n2
                dof = (se2 * se2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1))
                       if se2 > 0 else 1)
                half = t95(math.floor(dof)) * math.sqrt(se2)
                d = m1 - m2
                row.append(f"{math.exp(d):.3f} [{math.exp(d - half):.3f}, "
                           f"{math.exp(d + half):.3f}]")
            else:
                row.append("-")
        print("| " + " | ".join(row) + " |")


def read_run(spec):
    """A finished run's records from `path[:arm=label,...]`, its arms renamed as asked."""
    path, _, renames = spec.partition(":")
    labels = dict(pair.split("=", 1) for pair in renames.split(",") if pair)
    records = [json.loads(line) for line in open(path) if line.strip()]
    for record in records:
        record["arm"] = labels.get(record["arm"], record["arm"])
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--cells", default="q8_0:1,q8_0:2,q8_0:4,f16:1,f16:2,f16:4,f16:8",
                        help="weights:B, comma-separated")
    parser.add_argument("--temps", default="0,1")
    parser.add_argument("--processes", type=int, default=6, help="per cell and arm")
    parser.add_argument("--repeat", type=int, default=12, help="pairs per process (even: the "
                        "order alternates, so each arm runs first equally often)")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--warm-decoder", action="store_true",
                        help="the goodput arm keeps one decoder for its runs (a server's)")
    parser.add_argument("--compare", metavar="SPECDEC_LLAMA",
                        help="another build's specdec-llama, run as the arm goodput-b")
    parser.add_argument("--out", default="llama_cpp_batch_floor.jsonl")
    parser.add_argument("--summarize", metavar="JSONL", nargs="+",
                        help="only summarise finished runs (several: their processes pooled)")
    args = parser.parse_args()
    if args.summarize:
        summarize([record for spec in args.summarize for record in read_run(spec)])
        return
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cells.split(",")]
    temps = [float(t) for t in args.temps.split(",")]
    records = []
    with open(args.out, "a") as out:
        for round_index in range(args.processes):
            for weights, width in cells:
                for temp in temps:
                    arms = ["goodput", "control"] + (["goodput-b"] if args.compare else [])
                    shift = round_index % len(arms)  # each arm first as often as the others
                    arms = arms[shift:] + arms[:shift]
                    for arm in arms:
                        record = run(args, weights, width, temp, arm, round_index)
                        records.append(record)
                        out.write(json.dumps(record) + "\n")
                        out.flush()
                        print(f"round {round_index} {weights} B={width} T={temp:g} {arm}: "
                              f"{record['measured_speedup']:.3f}", file=sys.stderr)
    summarize(records)


if __name__ == "__main__":
    main()
