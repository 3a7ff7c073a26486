#!/usr/bin/python3
"""specdec-llama with the padded draft (kjv-draft-padded-f16.gguf: 32 unused tokens appended,
drafted through MappedDraft with no flag) against the shipped draft it was exported from, over
the held-out prompts, paired: per prompt and temperature both drafts run back to back (the
order alternating by prompt), each with specdec-llama's own plain decoding of the same prompt
(its measured_speedup).

  /usr/bin/python3 bench/llama_cpp_padded_draft.py --cli build/release/examples/specdec-llama \\
      --models build/release/models --prompts 20 --tokens 200 --temps 0,1

Per temperature, prints the mean tokens per round and acceptance rate of each draft, the mean
and median paired speedup over plain decoding, and the mean paired difference of the speedups
with a 95% interval; and checks that both drafts emit the same text (the mapped padded draft's
rows are the unpadded draft's bit for bit, so with one seed even the sampled outputs agree).
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAFTS = {"shipped": "kjv-draft-f16.gguf", "padded": "kjv-draft-padded-f16.gguf"}


def run(cli, models, draft, prompt, tokens, temperature, seed):
    command = [cli, "--json", "-m", str(models / "kjv-target-f16.gguf"),
               "-md", str(models / DRAFTS[draft]), "-p", prompt, "-n", str(tokens),
               "--temp", str(temperature), "-s", str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", default=str(ROOT / "build/release/examples/specdec-llama"))
    parser.add_argument("--models", default=str(ROOT / "build/release/models"))
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temps", default="0,1")
    parser.add_argument("--out", help="write every run's JSON summary here")
    a = parser.parse_args()
    prompts = (ROOT / "models/prompts.txt").read_text().splitlines()[:a.prompts]
    models = Path(a.models)
    results = []
    for temperature in (float(t) for t in a.temps.split(",")):
        runs = {draft: [] for draft in DRAFTS}
        for i, prompt in enumerate(prompts):
            order = list(DRAFTS) if i % 2 == 0 else list(reversed(DRAFTS))
            for draft in order:
                summary = run(a.cli, models, draft, prompt, a.tokens, temperature, seed=i)
                runs[draft].append(summary)
                results.append({"temperature": temperature, "prompt": i, "draft": draft,
                                "summary": summary})
        print(f"T = {temperature:g}, {len(prompts)} prompts x {a.tokens} tokens")
        for draft, summaries in runs.items():
            spec = [s["speculative"] for s in summaries]
            speedups = [s["measured_speedup"] for s in summaries]
            print(f"  {draft:8} tokens/round {statistics.mean(x['tokens_per_round'] for x in spec):.3f}"
                  f"  acceptance {statistics.mean(x['acceptance_rate'] for x in spec):.3f}"
                  f"  speedup mean {statistics.mean(speedups):.3f}"
                  f" median {statistics.median(speedups):.3f}")
        differences = [p["measured_speedup"] - s["measured_speedup"]
                       for p, s in zip(runs["padded"], runs["shipped"])]
        mean = statistics.mean(differences)
        half = 1.96 * statistics.stdev(differences) / math.sqrt(len(differences))
        same_text = sum(p["speculative"]["text"] == s["speculative"]["text"]
                        for p, s in zip(runs["padded"], runs["shipped"]))
        same_rounds = sum(p["speculative"]["rounds"] == s["speculative"]["rounds"]
                          for p, s in zip(runs["padded"], runs["shipped"]))
        print(f"  padded - shipped speedup: {mean:+.3f} (95% interval {mean - half:+.3f} .. "
              f"{mean + half:+.3f}); same text {same_text}/{len(prompts)}, same rounds "
              f"{same_rounds}/{len(prompts)}")
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
