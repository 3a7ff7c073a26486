#!/usr/bin/python3
"""specdec-demo (the example GPT) with its default strategy against a fixed draft length, over
the held-out prompts, each paired with the demo's own plain decoding of the same prompt (its
measured_speedup: the same process, seconds apart).

  /usr/bin/python3 bench/demo_policy_compare.py --demo build/release/examples/specdec-demo \\
      --prompts 50 --temps 0,1 --fixed 8 --out demo.json

Per temperature, prints the median paired speedup of the default and of -k FIXED (the same
proposer and verifier defaults: lookup, else the draft, when greedy; block verification when
sampling), their ratio, tokens per round and the draft-length histogram summed over prompts.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demo", default=str(ROOT / "build/release/examples/specdec-demo"))
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temps", default="0,1")
    parser.add_argument("--fixed", type=int, default=8)
    parser.add_argument("--default-flags", default="",
                        help="extra demo flags of the default setting (e.g. '--draft-costs online')")
    parser.add_argument("--out", help="write every run's summary here (JSON)")
    args = parser.parse_args()

    lines = (ROOT / "models/prompts.txt").read_text().split("\n")
    lines = lines[args.first: args.first + args.prompts]
    records = []
    for index, line in enumerate(lines, start=args.first):
        for temp in args.temps.split(","):
            settings = [("default", args.default_flags.split()), (f"K={args.fixed}", ["-k", str(args.fixed)])]
            if index % 2:
                settings.reverse()  # alternate the order by prompt
            for name, extra in settings:
                result = subprocess.run(
                    [args.demo, "--json", "--prompt", line, "--max-new-tokens", str(args.tokens),
                     "--temperature", temp, "--seed", str(index), "--no-baseline-text"] + extra,
                    capture_output=True, text=True)
                if result.returncode != 0:
                    sys.exit(f"demo_policy_compare: {args.demo} failed:\n{result.stderr[-2000:]}")
                d = json.loads(result.stdout)
                records.append(dict(prompt=index, temperature=float(temp), setting=name,
                                    speedup=d["measured_speedup"],
                                    tokens_per_round=d["speculative"]["tokens_per_round"],
                                    draft_lengths=d.get("draft_length_histogram", []),
                                    identical=d.get("identical")))
        print(f"prompt {index + 1 - args.first}/{len(lines)}", file=sys.stderr, flush=True)
    if args.out:
        Path(args.out).write_text("[\n" + ",\n".join(json.dumps(r, separators=(",", ":"))
                                                    for r in records) + "\n]\n")
    for temp in sorted({r["temperature"] for r in records}):
        rows = {}
        for r in records:
            if r["temperature"] == temp:
                rows.setdefault(r["setting"], []).append(r)
        by_prompt = {name: {r["prompt"]: r["speedup"] for r in rs} for name, rs in rows.items()}
        names = list(rows)
        ratio = statistics.median(by_prompt["default"][p] / by_prompt[f"K={args.fixed}"][p]
                                  for p in by_prompt["default"])
        print(f"\nT = {temp:g}, {len(by_prompt['default'])} prompts x {args.tokens} tokens: "
              f"default / K={args.fixed} (median of per-prompt ratios) = {ratio:.3f}")
        for name in names:
            rs = rows[name]
            width = max(len(r["draft_lengths"]) for r in rs)
            histogram = [sum(r["draft_lengths"][i] if i < len(r["draft_lengths"]) else 0
                             for r in rs) for i in range(width)]
            print(f"  {name}: paired speedup {statistics.median(r['speedup'] for r in rs):.3f}x, "
                  f"tokens/round {statistics.median(r['tokens_per_round'] for r in rs):.2f}, "
                  f"draft lengths {histogram}")


if __name__ == "__main__":
    main()
