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
import json, sys, statistics, collections
rs = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip()]
cells = collections.defaultdict(lambda: collections.defaultdict(list))
plain = collections.defaultdict(list)
for r in rs:
    key = (r['weights'], r['threads'], r['temperature'])
    cells[key][r['setting']].append(r['speedup'])
    if r['setting'] == 'goodput-measured':
        dl = r.get('draft_lengths', [])
        plain[key].append(dl[0] / sum(dl) if dl and sum(dl) else 0)
statics = ['K2', 'K4', 'K8', 'block4']
order = {'f16': 0, 'q8_0': 1, 'q4_0': 2}
print('| weights | threads | T | prompts | goodput | gp-block | ' + ' | '.join(statics) +
      ' | goodput / best static (gp-block) | plain rounds, goodput |')
print('|---|---|---|---|' + '---|' * (len(statics) + 4))
for key in sorted(cells, key=lambda k: (order.get(k[0], 9), k[1], k[2])):
    c = cells[key]
    med = {s: statistics.median(v) for s, v in c.items()}
    best = max(med[s] for s in statics if s in med)
    g, gb = med.get('goodput-measured', float('nan')), med.get('goodput-measured-block', float('nan'))
    row = [key[0], str(key[1]), f"{key[2]:g}", str(len(c['goodput-measured'])), f"{g:.3f}", f"{gb:.3f}"]
    row += [f"{med[s]:.3f}" if s in med else '-' for s in statics]
    row += [f"{g / best:.3f} ({gb / best:.3f})", f"{100 * statistics.mean(plain[key]):.0f} %"]
    print('| ' + ' | '.join(row) + ' |')
