#!/usr/bin/env python3
"""Export a trained checkpoint to specdec's .spdc weight format, plus golden reference logits.

  python3 tools/train/export.py build/train/target.pt models/kjv-target.spdc \
      --golden models/kjv-target.golden --golden-text "Psalms 23:1 The LORD is my shepherd"

.spdc layout (little-endian; see models/README.md):
  char[8] "SPDCGPT1" | u32 version=1 | u32 vocab_size, max_context, n_layer, n_head, d_model, d_ff
  | u32 dtype=1 (IEEE fp16) | tensors, fp16, row-major, in GPT.tensors() order; nothing after.
Golden layout:
  char[8] "SPDCLOG1" | u32 vocab_size | u32 n_tokens | u32 tokens[n] | f32 logits[n][vocab]
  (row i = next-token logits after tokens[0..i], computed in float64 from the fp16-rounded weights)
"""
import argparse
import struct
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--golden")
    ap.add_argument("--golden-text", default="Psalms 23:1 The LORD is my shepherd; I shall not want.")
    a = ap.parse_args()

    ckpt = torch.load(a.checkpoint, map_location="cpu")
    cfg = GPTConfig(**ckpt["config"])
    model = GPT(cfg)
    model.load_state_dict(ckpt["model"])
    with torch.no_grad():  # round to fp16 so the golden logits use exactly the shipped weights
        for t in model.tensors():
            t.copy_(t.half().float())
    header = b"SPDCGPT1" + struct.pack("<8I", 1, cfg.vocab_size, cfg.max_context, cfg.n_layer,
                                       cfg.n_head, cfg.d_model, cfg.d_ff, 1)
    body = b"".join(t.detach().half().numpy().astype("<f2").tobytes() for t in model.tensors())
    Path(a.out).write_bytes(header + body)
    print(f"wrote {a.out}: {len(header) + len(body)} bytes, step {ckpt.get('step')}")

    if a.golden:
        tokens = list(a.golden_text.encode("ascii"))
        model = model.double()
        with torch.no_grad():
            logits = model(torch.tensor([tokens]))[0].numpy().astype("<f4")
        Path(a.golden).write_bytes(b"SPDCLOG1" + struct.pack("<2I", cfg.vocab_size, len(tokens))
                                   + np.array(tokens, dtype="<u4").tobytes() + logits.tobytes())
        print(f"wrote {a.golden}: {len(tokens)} tokens")


if __name__ == "__main__":
    main()
