#!/usr/bin/python3
"""specdec over llama.cpp side by side with llama.cpp's own decoding, on the same GGUF files,
prompts, token counts and threads, in one run.

Per prompt (models/prompts.txt, each seen as "\\n" + line), alternating which side goes first:
  llama.cpp plain        llama-completion -no-cnv --ignore-eos (its "total time")
  llama.cpp speculative  llama-speculative-simple --spec-type draft-simple --spec-draft-n-max K
                         (its "encoded" + "decoded" time), K in --llama-k
  specdec                build/.../bench/llama_cpp_speedup: llama.cpp's C-API loop, specdec's
                         plain decoding over the adapter, and every specdec setting, each paired
                         with a plain run of its own (tokens / generate() time)
  specdec-demo           (--demo-threads 1,2) the example GPT engine on the same weights (the
                         .spdc files the GGUFs were made from), its default strategy, each
                         thread count: specdec end to end against llama.cpp's best
--llama-threads 1,2 runs llama.cpp's tools at each thread count (ratios stay against llama.cpp
plain at the first one).
Every figure is tokens per second of the generation, model loading excluded. The tables give,
per setting and temperature, the median over prompts of tokens/s and of its ratio to llama.cpp's
plain decoding of the same prompt (a ratio measured a few seconds apart, on the same host load).

  /usr/bin/python3 bench/llama_cpp_compare.py --build build/release \\
      --llama "$(scripts/install-llama-cpp.sh --tools)" --weights f16 --prompts 50 --tokens 200 \\
      --temps 0,1 --threads 1 --out docs/data/llama_cpp_compare_f16.json
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if result.returncode != 0:
        sys.exit(f"llama_cpp_compare: {' '.join(map(str, cmd))} failed:\n{result.stderr[-2000:]}")
    return result.stdout, result.stderr


def timed_run(cmd, pattern, what):
    """Runs a llama.cpp tool and returns the regex match of its timing line. Under heavy load the
    tools' asynchronous log has (rarely) exited without its summary: retried twice, then
    reported and left out, never a made-up figure."""
    for _ in range(3):
        _, err = run(cmd)
        match = re.search(pattern, err)
        if match:
            return match
    print(f"llama_cpp_compare: no timing summary from {what}; left out:\n{err[-800:]}",
          file=sys.stderr)
    return None


def llama_plain(args, bin_dir, model, prompt, temp, seed, threads):
    # "total time": the prompt, every decode and sampling, as the wall clock saw them (its
    # "eval time" counts only part of each llama_decode: ~35 % less on this host).
    match = timed_run([bin_dir / "llama-completion", "-m", model, "-p", prompt,
                       "-n", str(args.tokens), "-no-cnv", "--ignore-eos", "--temp", str(temp),
                       "-s", str(seed), "-t", str(threads), "-tb", str(threads),
                       "-c", "0", "--no-display-prompt"],
                      r"total time =\s*([\d.]+) ms", f"llama-completion (T={temp}, prompt {seed})")
    return None if match is None else args.tokens / (float(match.group(1)) / 1000)


def llama_speculative(args, bin_dir, target, draft, prompt, temp, seed, k, threads):
    match = timed_run([bin_dir / "llama-speculative-simple", "-m", target, "-md", draft,
                       "-p", prompt, "-n", str(args.tokens), "--spec-type", "draft-simple",
                       "--spec-draft-n-max", str(k), "--temp", str(temp), "-s", str(seed),
                       "-t", str(threads), "-tb", str(threads),
                       "-td", str(threads), "-c", "0", "--ignore-eos"],
                      r"encoded\s+\d+ tokens in\s+([\d.]+) seconds.*\n.*decoded\s+(\d+) tokens "
                      r"in\s+([\d.]+) seconds",
                      f"llama-speculative-simple (K={k}, T={temp}, prompt {seed})")
    if match is None:
        return None
    return int(match.group(2)) / (float(match.group(1)) + float(match.group(3)))


def specdec_runs(args, bench, target, draft, index, temps):
    out, _ = run([bench, "-m", target, "-md", draft, "--first", str(index), "--count", "1",
                  "-n", str(args.tokens), "--temps", ",".join(temps), "-t", str(args.threads),
                  "-td", str(args.threads)] + (["--settings", args.settings] if args.settings else []))
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=str(ROOT / "build/release"))
    parser.add_argument("--llama", required=True, help="llama.cpp prefix (bin/ holds its tools)")
    parser.add_argument("--weights", default="f16", choices=["f16", "f32", "q8_0", "q4_0"],
                        help="which GGUF pair of the build's models/ (q8_0, q4_0: cmake --build "
                             "BUILD --target specdec_gguf_models_quantized)")
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--first", type=int, default=0,
                        help="index of the first prompt (runs in chunks: --first 10 --prompts 10)")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temps", default="0,1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--llama-k", default="2,4,8,16")
    parser.add_argument("--settings", default="",
                        help="specdec settings (llama_cpp_speedup; 'none': skip it)")
    parser.add_argument("--out", help="write every measurement here (JSON)")
    parser.add_argument("--llama-threads", default="",
                        help="run llama.cpp's tools at each of these thread counts (default: --threads)")
    parser.add_argument("--demo-threads", default="",
                        help="also run specdec-demo (the example GPT on the same weights, its default "
                             "strategy) at each of these thread counts")
    args = parser.parse_args()

    build = Path(args.build)
    bin_dir = Path(args.llama).expanduser() / "bin"
    bench = build / "bench/llama_cpp_speedup"
    target = build / f"models/kjv-target-{args.weights}.gguf"
    draft = build / f"models/kjv-draft-{args.weights}.gguf"
    for model in (target, draft):
        if not model.is_file():
            hint = (f" (cmake --build {build} --target specdec_gguf_models_quantized)"
                    if args.weights in ("q8_0", "q4_0") else "")
            sys.exit(f"llama_cpp_compare: {model} not found{hint}")
    temps = args.temps.split(",")
    ks = [int(k) for k in args.llama_k.split(",") if k]
    llama_threads = [int(t) for t in args.llama_threads.split(",") if t] or [args.threads]
    demo_threads = [int(t) for t in args.demo_threads.split(",") if t]

    def suffix(threads, counts):
        return f" (t={threads})" if len(counts) > 1 or threads != args.threads else ""
    lines = (ROOT / "models/prompts.txt").read_text().split("\n")[args.first: args.first + args.prompts]

    records = []  # {prompt, temperature, setting, tokens_per_second, ...}
    for index, line in enumerate(lines, start=args.first):
        prompt = "\n" + line
        llama_side = []

        def llama_all():
            for temp in temps:
                for threads in llama_threads:
                    tps = llama_plain(args, bin_dir, target, prompt, temp, index, threads)
                    if tps is None:
                        continue
                    # the reference of every ratio: llama.cpp plain at the first thread count
                    name = "llama.cpp plain" + (suffix(threads, llama_threads)
                                                if threads != llama_threads[0] else "")
                    llama_side.append(dict(prompt=index, temperature=float(temp),
                                           setting=name, tokens_per_second=tps))
                    for k in ks:
                        tps = llama_speculative(args, bin_dir, target, draft, prompt, temp,
                                                index, k, threads)
                        if tps is None:
                            continue
                        llama_side.append(dict(prompt=index, temperature=float(temp),
                                               setting=f"llama.cpp spec K={k}"
                                                       + suffix(threads, llama_threads),
                                               tokens_per_second=tps))

        def demo_all():
            demo_side = []
            for temp in temps:
                for threads in demo_threads:
                    out, _ = run([build / "examples/specdec-demo", "--json", "--prompt", line,
                                  "--max-new-tokens", str(args.tokens), "--temperature", temp,
                                  "--seed", str(index), "--no-baseline", "--threads", str(threads)])
                    result = json.loads(out)["speculative"]
                    demo_side.append(dict(prompt=index, temperature=float(temp),
                                          setting=f"specdec-demo, example GPT (t={threads})",
                                          tokens_per_second=result["tokens_per_second"],
                                          tokens_per_round=result["tokens_per_round"]))
            return demo_side

        ours = []
        if index % 2 == 0:
            llama_all()
            ours = specdec_runs(args, bench, target, draft, index, temps) if args.settings != "none" else []
            demos = demo_all()
        else:
            demos = demo_all()
            ours = specdec_runs(args, bench, target, draft, index, temps) if args.settings != "none" else []
            llama_all()
        for r in ours:
            r["setting"] = "specdec " + r["setting"]
            r["tokens_per_second"] = r["tokens"] / r["seconds"]
        records += llama_side + ours + demos
        print(f"prompt {index + 1 - args.first}/{len(lines)}", file=sys.stderr, flush=True)

    if args.out:
        def compact(record):  # five significant digits: the timings are not more exact
            return json.dumps({k: float(f"{v:.5g}") if isinstance(v, float) else v
                               for k, v in record.items()}, separators=(",", ":"))
        Path(args.out).write_text("[\n" + ",\n".join(map(compact, records)) + "\n]\n")
    for temp in temps:
        t = float(temp)
        base = {r["prompt"]: r["tokens_per_second"] for r in records
                if r["temperature"] == t and r["setting"] == "llama.cpp plain"}
        settings = []
        for r in records:
            if r["temperature"] == t and r["setting"] not in settings:
                settings.append(r["setting"])
        print(f"\n### {args.weights} weights, T = {temp}, {len(lines)} prompts x {args.tokens} "
              f"tokens, {args.threads} thread(s) per model unless stated\n")
        print("| setting | tokens/s (median) | vs llama.cpp plain (median of per-prompt ratios) "
              "| vs specdec plain (paired) | tokens/round | greedy identical |")
        print("|---|---|---|---|---|---|")
        for s in settings:
            rows = [r for r in records if r["temperature"] == t and r["setting"] == s]
            tps = statistics.median(r["tokens_per_second"] for r in rows)
            ratio = statistics.median(r["tokens_per_second"] / base[r["prompt"]] for r in rows
                                      if r["prompt"] in base)
            paired = (f"{statistics.median(r['speedup'] for r in rows):.3f}x"
                      if "speedup" in rows[0] else "")
            per_round = (f"{statistics.median(r['tokens_per_round'] for r in rows):.2f}"
                         if "tokens_per_round" in rows[0] else "")
            identical = ""
            if t == 0 and "identical" in rows[0]:
                identical = f"{sum(r['identical'] for r in rows)}/{len(rows)}"
            print(f"| {s} | {tps:.0f} | {ratio:.3f}x | {paired} | {per_round} | {identical} |")


if __name__ == "__main__":
    main()
