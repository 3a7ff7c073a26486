#!/usr/bin/env python3
"""Distil the draft from the target: train it on the target's own next-byte distributions.

  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 5 python3 tools/train/distill.py \
      --target models/kjv-target.spdc --init models/kjv-draft.spdc --threads 1 \
      --cache build/distill/cache.pt --text-windows 3072 --sample-windows 2048 \
      --minutes 25 --batch 16 --lr 1e-3 --out build/train/draft-distilled.pt
(the shipped draft's run, from the text-trained draft; the cache took 36 minutes and 1.0 GB, the
training 25 minutes, on one loaded core).

Two phases (DistillSpec, Zhou et al., ICLR 2024):
 1. Cache (built once; when --cache exists it is read instead, and must match the arguments). The
    target is run over a fixed, seeded set of windows of --context bytes and its full 256-way
    log-probabilities are kept (fp16, 512 bytes per position): --text-windows windows of the
    training text, teacher-forced, and --sample-windows sequences the target samples itself at
    T = 1 (with a KV cache, in batches) from a short prompt that is the start of a random training
    verse: generated data, the kind of text the decoder verifies, not only Bible text. The log-probabilities of the
    sampled sequences come out of the sampling itself, so they cost no second pass. The target is
    also run once over --eval-windows held-out windows for the agreement metrics.
 2. Train the draft (the architecture of --preset, train.py's "draft" by default; optionally
    from --init weights) on the cache with the forward KL(p_target || q_draft) at T = 1,
    optionally mixed with the ordinary cross-entropy on the real next byte of the text windows
    (--ce-weight). Wall-clock cosine schedule as in train.py. Every --eval-minutes and at the end
    it logs held-out bits/byte (same measure and windows as train.py), held-out greedy agreement
    with the target (argmax equal), held-out expected acceptance at T = 1 (sum_v min(p, q)) and
    held-out KL.

  python3 tools/train/distill.py --target models/kjv-target.spdc --eval models/kjv-draft.spdc \
      --cache build/distill/cache.pt
evaluates exported drafts (any number of --eval files) on the same held-out windows and exits.
"""
import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT  # noqa: E402
from train import PRESETS, bits_per_byte, line_starts, load, load_spdc  # noqa: E402


@torch.no_grad()
def teacher_forced(model, windows, batch):
    """Full log-probabilities of `model` at every position of `windows` [N, L], as fp16."""
    out = []
    for i in range(0, len(windows), batch):
        out.append(F.log_softmax(model(windows[i:i + batch]).float(), dim=-1).half())
    return torch.cat(out)


@torch.no_grad()
def sample_with_cache(model, prompts, length, gen):
    """Samples `prompts` [B, P] on to `length` bytes at T = 1 with a per-layer KV cache.

    Returns (tokens [B, length], log-probs [B, length, V] fp16): row t of the log-probs is the
    model's distribution of byte t + 1 given bytes 0..t, exactly what teacher forcing would give.
    """
    B, P = prompts.shape
    D = model.config.d_model
    H = model.config.n_head
    hd = D // H
    ks = [torch.empty(B, H, length, hd) for _ in model.blocks]
    vs = [torch.empty(B, H, length, hd) for _ in model.blocks]
    tokens = torch.empty(B, length, dtype=torch.long)
    tokens[:, :P] = prompts
    logp = torch.empty(B, length, model.config.vocab_size, dtype=torch.float16)

    def step(idx, pos):  # idx [B, T] at positions pos..pos+T-1; returns log-probs [B, T, V]
        T = idx.shape[1]
        x = model.wte(idx) + model.wpe(torch.arange(pos, pos + T))
        for li, b in enumerate(model.blocks):
            q, k, v = b.qkv(b.ln1(x)).split(D, dim=2)
            q = q.view(B, T, H, hd).transpose(1, 2)
            ks[li][:, :, pos:pos + T] = k.view(B, T, H, hd).transpose(1, 2)
            vs[li][:, :, pos:pos + T] = v.view(B, T, H, hd).transpose(1, 2)
            kk, vv = ks[li][:, :, :pos + T], vs[li][:, :, :pos + T]
            att = (q @ kk.transpose(-2, -1)) / math.sqrt(hd)
            mask = torch.ones(T, pos + T, dtype=torch.bool).tril(diagonal=pos)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ vv).transpose(1, 2).reshape(B, T, D)
            x = x + b.proj(y)
            x = x + b.fc2(F.gelu(b.fc1(b.ln2(x)), approximate="tanh"))
        return F.log_softmax((model.ln_f(x) @ model.wte.weight.T).float(), dim=-1)

    lp = step(prompts, 0)
    logp[:, :P] = lp.half()
    for t in range(P, length):
        nxt = torch.multinomial(lp[:, -1].exp(), 1, generator=gen)
        tokens[:, t] = nxt[:, 0]
        lp = step(nxt, t)
        logp[:, t] = lp[:, 0].half()
    return tokens, logp


def build_cache(a, target, train, held):
    L = a.context
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    # Held-out evaluation windows (fixed by the seed, independent of the training windows).
    hx = torch.randint(len(held) - L - 1, (a.eval_windows,), generator=gen)
    held_x = torch.stack([held[i:i + L] for i in hx])
    held_y = torch.stack([held[i + 1:i + L + 1] for i in hx])
    held_logp = teacher_forced(target, held_x, a.target_batch)
    print(f"cache: {a.eval_windows} held-out windows in {time.time() - t0:.0f}s", flush=True)
    # Training text, teacher-forced.
    tx = torch.randint(len(train) - L - 1, (a.text_windows,), generator=gen)
    text_x = torch.stack([train[i:i + L] for i in tx])
    text_y = torch.stack([train[i + 1:i + L + 1] for i in tx])
    chunks = []
    for i in range(0, a.text_windows, a.target_batch):
        chunks.append(teacher_forced(target, text_x[i:i + a.target_batch], a.target_batch))
        if (i // a.target_batch) % 32 == 0:
            print(f"cache: text {i + a.target_batch}/{a.text_windows} windows, "
                  f"{(time.time() - t0) / 60:.1f} min", flush=True)
    text_logp = torch.cat(chunks)
    # Sequences the target samples itself at T = 1, from the first --prompt-bytes of a training
    # verse (with the preceding newline, as the decoder's prompts have).
    starts = line_starts(train)
    starts = starts[starts < len(train) - L - 1]
    samp_x, samp_logp = [], []
    for i in range(0, a.sample_windows, a.sample_batch):
        n = min(a.sample_batch, a.sample_windows - i)
        s = starts[torch.randint(len(starts), (n,), generator=gen)] - 1  # include the "\n"
        prompts = torch.stack([train[j:j + a.prompt_bytes] for j in s])
        tok, lp = sample_with_cache(target, prompts, L, gen)
        samp_x.append(tok)
        samp_logp.append(lp)
        print(f"cache: sampled {i + n}/{a.sample_windows} sequences, "
              f"{(time.time() - t0) / 60:.1f} min", flush=True)
    if samp_x:
        print("cache: sample:", repr(bytes(samp_x[0][0].tolist()).decode("ascii", "replace")[:300]),
              flush=True)
    cache = {
        "meta": cache_meta(a),
        "held_x": held_x, "held_y": held_y, "held_logp": held_logp,
        "text_x": text_x, "text_y": text_y, "text_logp": text_logp,
        "samp_x": torch.cat(samp_x) if samp_x else torch.empty(0, L, dtype=torch.long),
        "samp_logp": (torch.cat(samp_logp) if samp_logp
                      else torch.empty(0, L, 256, dtype=torch.float16)),
        "seconds": time.time() - t0,
    }
    return cache


def cache_meta(a):
    return {k: getattr(a, k) for k in ("target", "context", "seed", "eval_windows", "text_windows",
                                       "sample_windows", "prompt_bytes")}


@torch.no_grad()
def agreement(model, cache, batch=16):
    """Held-out greedy agreement, expected T = 1 acceptance and KL(target || draft)."""
    model.eval()
    agree = accept = kl = 0.0
    n = 0
    for i in range(0, len(cache["held_x"]), batch):
        logq = F.log_softmax(model(cache["held_x"][i:i + batch]).float(), dim=-1)
        logp = cache["held_logp"][i:i + batch].float()
        agree += (logq.argmax(-1) == logp.argmax(-1)).float().sum().item()
        accept += torch.minimum(logp.exp(), logq.exp()).sum(-1).sum().item()
        kl += (logp.exp() * (logp - logq)).sum(-1).sum().item()
        n += logp.shape[0] * logp.shape[1]
    model.train()
    return agree / n, accept / n, kl / n / math.log(2)


def report(tag, model, cache, held, block):
    bpb = bits_per_byte(model, held, block, batches=32)
    agree, accept, kl = agreement(model, cache)
    print(f"{tag}: heldout_bpb={bpb:.3f} agree_greedy={agree:.4f} accept_T1={accept:.4f} "
          f"kl_bits={kl:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="exported target (.spdc)")
    ap.add_argument("--preset", default="draft", choices=[k for k in PRESETS if k != "target"],
                    help="the draft's architecture (train.py's presets)")
    ap.add_argument("--init", help="start the draft from these exported weights (.spdc)")
    ap.add_argument("--eval", nargs="*", help="only evaluate these exported drafts and exit")
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--cache", required=True, help="target distributions; built if missing")
    ap.add_argument("--context", type=int, default=384)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--text-windows", type=int, default=1536)
    ap.add_argument("--sample-windows", type=int, default=1536)
    ap.add_argument("--prompt-bytes", type=int, default=24)
    ap.add_argument("--target-batch", type=int, default=8)
    ap.add_argument("--sample-batch", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=0.0, help="training budget (0: cache only)")
    ap.add_argument("--out", help="draft checkpoint (.pt, as train.py writes; export.py reads it)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ce-weight", type=float, default=0.0,
                    help="weight of the hard-label cross-entropy on the text windows (0: pure KL)")
    ap.add_argument("--eval-minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, held = load(Path(a.corpus) / "train.txt"), load(Path(a.corpus) / "heldout.txt")
    cfg = PRESETS[a.preset]
    block = cfg.max_context
    if a.context > block:
        raise SystemExit(f"--context {a.context} > the draft's context {block}")

    cache_path = Path(a.cache)
    cache = torch.load(cache_path) if cache_path.exists() else None
    if cache is not None and cache["meta"] != cache_meta(a) and not a.eval:
        raise SystemExit(f"{cache_path} was built with {cache['meta']}; "
                         "delete it or match the arguments")
    if cache is None:
        target = GPT(PRESETS["target"])
        load_spdc(target, a.target)
        target.eval()
        print(f"building {cache_path}: target {a.target}, {a.eval_windows} held-out + "
              f"{a.text_windows} text + {a.sample_windows} sampled windows of {a.context}",
              flush=True)
        cache = build_cache(a, target, train, held)
        del target
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(cache, cache_path)
        print(f"cache: built in {cache['seconds'] / 60:.1f} min, saved {cache_path}", flush=True)
    else:
        print(f"cache: {cache_path} ({len(cache['text_x'])} text + {len(cache['samp_x'])} sampled "
              f"windows, built in {cache['seconds'] / 60:.1f} min)", flush=True)

    if a.eval:
        for path in a.eval:
            model = GPT(cfg)
            load_spdc(model, path)
            report(path, model, cache, held, block)
        return
    if a.minutes <= 0:
        return
    if not a.out:
        raise SystemExit("--out is required for training")

    model = GPT(cfg)
    if a.init:
        load_spdc(model, a.init)
    report("start", model, cache, held, block)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    xs = torch.cat([cache["text_x"], cache["samp_x"]])
    logps = torch.cat([cache["text_logp"], cache["samp_logp"]])
    n_text = len(cache["text_x"])
    ys = cache["text_y"]
    print(f"distill: {sum(p.numel() for p in model.parameters())} parameters, {len(xs)} windows "
          f"({n_text} text), batch {a.batch}, lr {a.lr}, ce_weight {a.ce_weight}, {a.minutes} min",
          flush=True)

    budget = a.minutes * 60
    warmup = min(0.05 * budget, 60.0)
    start = last_eval = time.time()
    step = 0
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(a.seed + 1)

    def save():
        torch.save({"config": cfg.__dict__, "model": model.state_dict(), "step": step}, out)

    while (elapsed := time.time() - start) < budget:
        frac = elapsed / budget
        lr = a.lr * min(1.0, elapsed / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(xs), (a.batch,), generator=gen)
        logq = F.log_softmax(model(xs[ix]).float(), dim=-1)
        logp = logps[ix].float()
        kl = (logp.exp() * (logp - logq)).sum(-1).mean()
        loss = kl
        if a.ce_weight > 0:
            is_text = ix < n_text
            if is_text.any():
                ce = F.nll_loss(logq[is_text].reshape(-1, 256), ys[ix[is_text]].reshape(-1))
                loss = loss + a.ce_weight * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            print(f"step {step} t={elapsed / 60:.1f}min lr={lr:.2e} "
                  f"train_kl_bits={kl.item() / math.log(2):.4f}", flush=True)
        if time.time() - last_eval > a.eval_minutes * 60:
            save()
            report(f"checkpoint step {step}", model, cache, held, block)
            last_eval = time.time()
    save()
    report(f"done: {step} steps in {(time.time() - start) / 60:.1f} min", model, cache, held, block)


if __name__ == "__main__":
    main()
