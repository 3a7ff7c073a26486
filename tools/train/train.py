#!/usr/bin/env python3
"""Train one byte-level GPT on the KJV corpus for a fixed wall-clock budget.

  OMP_WAIT_POLICY=PASSIVE python3 tools/train/train.py --preset target --minutes 60 --threads 1 \
      --batch 8 --lr 2e-3 --bf16 --out build/train/target.pt
  OMP_WAIT_POLICY=PASSIVE python3 tools/train/train.py --preset draft --minutes 30 --threads 1 \
      --batch 16 --out build/train/draft.pt
One thread per run and a passive OpenMP wait policy: on a shared 2-core machine, spinning OpenMP
workers of two runs (plus compilers) slowed each step by 5-10x.

The learning-rate schedule (linear warm-up, cosine decay) runs on elapsed wall-clock time, so a
budget always ends at the low learning rate. A checkpoint is written every few minutes and at the end.
"""
import argparse
import math
import struct
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT, GPTConfig  # noqa: E402

PRESETS = {
    "target": GPTConfig(n_layer=6, n_head=6, d_model=384, d_ff=1536),
    "draft": GPTConfig(n_layer=1, n_head=2, d_model=64, d_ff=256),
    # Two layers can form induction heads (copy what followed an earlier occurrence of the current
    # bytes), which a one-layer draft cannot; ~3x the parameters, still ~2 % of the target's.
    "draft-2l": GPTConfig(n_layer=2, n_head=3, d_model=96, d_ff=384),
}


def load_spdc(model, path):
    """Copies the fp16 tensors of an exported .spdc file (version 2, see export.py) into `model`."""
    import numpy as np
    blob = Path(path).read_bytes()
    dims = struct.unpack("<8I", blob[8:40])
    c = model.config
    expected = (2, c.vocab_size, c.max_context, c.n_layer, c.n_head, c.d_model, c.d_ff, 1)
    if blob[:8] != b"SPDCGPT1" or dims != expected:
        raise SystemExit(f"{path}: not a .spdc file of this preset (header {dims}, expected {expected})")
    import zlib
    if zlib.crc32(blob[:-4]) != struct.unpack("<I", blob[-4:])[0]:
        raise SystemExit(f"{path}: checksum mismatch (corrupted or edited file)")
    offset = 40
    with torch.no_grad():
        for t in model.tensors():
            n = t.numel()
            t.copy_(torch.from_numpy(np.frombuffer(blob, "<f2", n, offset).astype("f4")).view_as(t))
            offset += 2 * n


def load(path):
    return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8).long()


@torch.no_grad()
def bits_per_byte(model, data, block, batches=16, batch=16, seed=0):
    model.eval()
    g = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(batches):
        ix = torch.randint(len(data) - block - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + block + 1] for i in ix])
        total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
    model.train()
    return total / batches / math.log(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, required=True)
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init", help="start from the weights of an exported .spdc file (continue training)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast matmuls (AVX512-BF16 CPUs)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = PRESETS[a.preset]
    model = GPT(cfg)
    if a.init:
        load_spdc(model, a.init)
    lr_max = a.lr or (1e-3 if a.preset == "target" else 3e-3)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr_max, betas=(0.9, 0.95))
    train, held = load(Path(a.corpus) / "train.txt"), load(Path(a.corpus) / "heldout.txt")
    block = cfg.max_context
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{a.preset}: {n_params} parameters, block {block}, batch {a.batch}, {a.minutes} min", flush=True)

    budget = a.minutes * 60
    warmup = min(0.05 * budget, 120.0)
    start = last_ckpt = time.time()
    step = 0
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        torch.save({"config": cfg.__dict__, "model": model.state_dict(), "step": step}, out)

    while (elapsed := time.time() - start) < budget:
        frac = elapsed / budget
        lr = lr_max * min(1.0, elapsed / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(train) - block - 1, (a.batch,))
        x = torch.stack([train[i:i + block] for i in ix])
        y = torch.stack([train[i + 1:i + block + 1] for i in ix])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step} t={elapsed/60:.1f}min lr={lr:.2e} train_bpb={loss.item()/math.log(2):.3f}", flush=True)
        if time.time() - last_ckpt > 300:
            save()
            last_ckpt = time.time()
            print(f"checkpoint: heldout_bpb={bits_per_byte(model, held, block):.3f}", flush=True)
    save()
    print(f"done: {step} steps, heldout_bpb={bits_per_byte(model, held, block, batches=32):.3f}", flush=True)


if __name__ == "__main__":
    main()
