#!/usr/bin/env python3
"""Export a trained checkpoint to specdec's .spdc weight format, plus golden reference logits.

  python3 tools/train/export.py build/train/target.pt models/kjv-target.spdc \
      --golden models/kjv-target.golden --golden-text "Psalms 23:1 The LORD is my shepherd"
  python3 tools/train/export.py --restamp models/kjv-target.spdc   # version 1 -> 2, in place
  python3 tools/train/export.py build/train/bpe-draft.pt models/kjv-bpe-draft.spdc \
      --tokenizer models/kjv-bpe.tokenizer --golden build/kjv-bpe-draft.golden
A model trained on a BPE's ids (train.py --tokenizer) needs nothing more to export: its vocabulary
size is in the checkpoint's config and the .spdc header. --tokenizer only makes the golden tokens
the tokenizer's ids of --golden-text instead of its bytes (and checks the vocabulary sizes agree).

.spdc layout, version 2 (little-endian; see models/README.md):
  char[8] "SPDCGPT1" | u32 version=2 | u32 vocab_size, max_context, n_layer, n_head, d_model, d_ff
  | u32 dtype=1 (IEEE fp16) | tensors, fp16, row-major, in GPT.tensors() order
  | u32 CRC-32 (zlib.crc32) of every byte before it; nothing after.
Version 1 is the same without the checksum; --restamp converts a version 1 file to version 2
without touching a weight bit (only the version field changes and the checksum is appended).
Golden layout:
  char[8] "SPDCLOG1" | u32 vocab_size | u32 n_tokens | u32 tokens[n] | f32 logits[n][vocab]
  (row i = next-token logits after tokens[0..i], computed in float64 from the fp16-rounded weights)
"""
import argparse
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT, GPTConfig  # noqa: E402


SPDC_VERSION = 2
HEADER_BYTES = 40


def with_checksum(image):
    """A version 2 file: `image` (magic, header, tensors) followed by its CRC-32."""
    return image + struct.pack("<I", zlib.crc32(image))


def restamp(path):
    """Rewrites a version 1 .spdc file as version 2, weights bit-identical."""
    blob = bytearray(Path(path).read_bytes())
    version = struct.unpack_from("<I", blob, 8)[0] if len(blob) >= HEADER_BYTES else None
    if blob[:8] != b"SPDCGPT1" or version != 1:
        raise SystemExit(f"{path}: not a version 1 .spdc file (version {version})")
    vocab, context, layers, heads, d, f, dtype = struct.unpack_from("<7I", blob, 12)
    per_layer = 4 * d + 3 * d * d + 3 * d + d * d + d + f * d + f + d * f + d
    params = vocab * d + context * d + layers * per_layer + 2 * d
    if dtype != 1 or len(blob) != HEADER_BYTES + 2 * params:
        raise SystemExit(f"{path}: {len(blob)} bytes, expected {HEADER_BYTES + 2 * params} (dtype {dtype})")
    struct.pack_into("<I", blob, 8, SPDC_VERSION)
    Path(path).write_bytes(with_checksum(bytes(blob)))
    print(f"restamped {path}: version {SPDC_VERSION}, CRC-32 {zlib.crc32(bytes(blob)):#010x}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--golden")
    ap.add_argument("--golden-text", default="Psalms 23:1 The LORD is my shepherd; I shall not want.")
    ap.add_argument("--tokenizer", help="the BPE (tools/train/bpe.py) the model was trained on: "
                                        "golden tokens are its ids of --golden-text")
    ap.add_argument("--restamp", metavar="SPDC", nargs="+",
                    help="convert version 1 .spdc files to version 2 in place (adds the checksum)")
    a = ap.parse_args()
    if a.restamp:
        for path in a.restamp:
            restamp(path)
        return
    if not (a.checkpoint and a.out):
        ap.error("checkpoint and out are required (or --restamp FILE...)")

    ckpt = torch.load(a.checkpoint, map_location="cpu")
    cfg = GPTConfig(**ckpt["config"])
    model = GPT(cfg)
    model.load_state_dict(ckpt["model"])
    with torch.no_grad():  # round to fp16 so the golden logits use exactly the shipped weights
        for t in model.tensors():
            t.copy_(t.half().float())
    header = b"SPDCGPT1" + struct.pack("<8I", SPDC_VERSION, cfg.vocab_size, cfg.max_context, cfg.n_layer,
                                       cfg.n_head, cfg.d_model, cfg.d_ff, 1)
    body = b"".join(t.detach().half().numpy().astype("<f2").tobytes() for t in model.tensors())
    image = with_checksum(header + body)
    Path(a.out).write_bytes(image)
    print(f"wrote {a.out}: {len(image)} bytes, step {ckpt.get('step')}")

    tokenizer = None
    if a.tokenizer:
        from bpe import Tokenizer
        tokenizer = Tokenizer.load(a.tokenizer)
        if tokenizer.size() != cfg.vocab_size:
            raise SystemExit(f"{a.tokenizer}: {tokenizer.size()} tokens, the model has {cfg.vocab_size}")
    elif cfg.vocab_size != 256:
        print(f"note: vocab_size {cfg.vocab_size}; pass --tokenizer for BPE golden tokens", file=sys.stderr)
    if a.golden:
        text = a.golden_text.encode("ascii")
        tokens = tokenizer.encode(text) if tokenizer else list(text)
        model = model.double()
        with torch.no_grad():
            logits = model(torch.tensor([tokens]))[0].numpy().astype("<f4")
        Path(a.golden).write_bytes(b"SPDCLOG1" + struct.pack("<2I", cfg.vocab_size, len(tokens))
                                   + np.array(tokens, dtype="<u4").tobytes() + logits.tobytes())
        print(f"wrote {a.golden}: {len(tokens)} tokens")


if __name__ == "__main__":
    main()
