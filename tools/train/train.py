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

--quote-fraction F makes that share of the training windows end in a quotation: a passage of 1-3
consecutive verses (with 0-2 verses after it) is followed by the same text again from the passage's
first byte, cut anywhere; with --quote-shuffle S, that share of the passages have the words of
each verse shuffled (both occurrences alike), so that memory of the training text cannot predict
the quotation and only copying can. The corpus holds every verse once, so on plain windows
nothing rewards copying from the context; quotations do (what code editing, summaries and chat
with quotes ask of a real LLM, and what prompt-lookup drafting relies on). `quote_acc` in the log
is the model's argmax accuracy on the quoted bytes of held-out passages it has never seen, and
`copy_acc` the same on passages whose words are shuffled (only copying predicts those).

--drill-fraction D makes that share of the windows a copying drill instead: a few verses of plain
text, then one passage of 1-2 verses with its words shuffled, repeated until the window is full.
After its first occurrence every byte of the window is predictable by copying and by nothing
else, several times the density of copyable bytes of a quotation window. --drill-letters L
makes that share of the drill passages random letters instead (each letter of the passage
replaced by a random one of the same case; spaces, digits and punctuation kept): within a word
the shuffled passage is still predictable from spelling, a random one only by copying.

--tokenizer FILE trains on the token ids of a byte-level BPE (tools/train/bpe.py, e.g.
models/kjv-bpe.tokenizer) instead of on bytes: the corpus files are encoded once, the model's
vocabulary is the tokenizer's, the context (max_context) counts tokens, and windows are drawn
from the token sequence. The logged bits/byte stay bits per BYTE (total nats of the predicted
tokens / their bytes / ln 2), comparable to a byte-level model's. Not combinable with the
quotation and drill options (they cut windows at byte offsets). Without it, training is exactly
what it was.

  OMP_WAIT_POLICY=PASSIVE python3 tools/train/train.py --preset draft-2l \
      --tokenizer models/kjv-bpe.tokenizer --minutes 25 --threads 1 --batch 16 \
      --out build/train/bpe-draft.pt
"""
import argparse
import dataclasses
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


def line_starts(data):
    """Offsets just after every newline (the start of a verse), as a tensor; the corpus ends in a
    newline, so the last is len(data)."""
    return (data == 10).nonzero().flatten() + 1


def quote_window(data, starts, block, g, shuffle=0.0):
    """block + 1 bytes ending in a quotation of an earlier passage of the same window; returns the
    window and the offset where the quotation starts."""
    while True:
        i = int(torch.randint(0, len(starts) - 8, (1,), generator=g))
        verses = int(torch.randint(1, 4, (1,), generator=g))
        after = int(torch.randint(0, 3, (1,), generator=g))
        s, e = int(starts[i]), int(starts[i + verses + after])
        room = block + 1 - (e - s)   # bytes left for the quotation
        if room >= 24 and e - (block + 1) >= 0:
            break
    m = int(torch.randint(16, room + 1, (1,), generator=g))
    a = e - (block + 1 - m)
    passage = data[s:e]
    if float(torch.rand(1, generator=g)) < shuffle:
        passage = shuffled_words(passage, g)
    quoted = torch.cat([passage, data[e:s + m]])[:m]
    window = torch.cat([data[a:s], passage, quoted])
    return window, block + 1 - m


def shuffled_words(passage, g):
    """The passage with the words of each verse (after its "Book C:V" reference) in a random order:
    text the model cannot predict from memory, so only copying predicts its quotation."""
    lines = bytes(passage.tolist()).split(b"\n")
    out = []
    for line in lines:
        words = line.split(b" ")
        head = 3 if words[0][:1].isdigit() else 2
        body = words[head:]
        order = torch.randperm(len(body), generator=g).tolist()
        out.append(b" ".join(words[:head] + [body[i] for i in order]))
    return torch.tensor(list(b"\n".join(out)), dtype=torch.long)


def random_letters(passage, g):
    """The passage with every ASCII letter replaced by a random letter of the same case."""
    out = passage.clone()
    lower = (out >= 97) & (out <= 122)
    upper = (out >= 65) & (out <= 90)
    draws = torch.randint(0, 26, out.shape, generator=g)
    out[lower] = 97 + draws[lower]
    out[upper] = 65 + draws[upper]
    return out


def drill_window(data, starts, block, g, letters=0.0):
    """block + 1 bytes: plain text, then a word-shuffled passage repeated to the end of the
    window; returns the window and the offset where the first repetition starts."""
    while True:
        i = int(torch.randint(0, len(starts) - 4, (1,), generator=g))
        verses = int(torch.randint(1, 3, (1,), generator=g))
        s, e = int(starts[i]), int(starts[i + verses])
        lead = int(torch.randint(0, block // 4, (1,), generator=g))
        if 2 * (e - s) + lead + 16 <= block + 1 and s - lead >= 0:
            break
    passage = shuffled_words(data[s:e], g)
    if letters > 0 and float(torch.rand(1, generator=g)) < letters:
        passage = random_letters(passage, g)
    reps = (block + 1 - lead) // len(passage) + 1
    window = torch.cat([data[s - lead:s]] + [passage] * reps)[:block + 1]
    return window, lead + len(passage)


def batch_windows(data, starts, block, batch, quote_fraction, g, shuffle=0.0, drill_fraction=0.0,
                  letters=0.0):
    rows, quote_at = [], []
    for _ in range(batch):
        if drill_fraction > 0 and float(torch.rand(1, generator=g)) < drill_fraction:
            w, q = drill_window(data, starts, block, g, letters)
        elif quote_fraction > 0 and float(torch.rand(1, generator=g)) < quote_fraction:
            w, q = quote_window(data, starts, block, g, shuffle)
        else:
            i = int(torch.randint(len(data) - block - 1, (1,), generator=g))
            w, q = data[i:i + block + 1], block + 1
        rows.append(w)
        quote_at.append(q)
    w = torch.stack(rows)
    return w[:, :-1], w[:, 1:], quote_at


@torch.no_grad()
def quote_accuracy(model, data, block, windows=64, seed=0, shuffle=0.0):
    """Argmax accuracy on the quoted bytes (after the first 4 of each quotation) of windows built
    from `data`: how well the model copies a passage it was just shown."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    starts = line_starts(data)
    hits = total = 0
    for _ in range(windows // 16):
        x, y, quote_at = batch_windows(data, starts, block, 16, 1.0, g, shuffle)
        pred = model(x).argmax(-1)
        for r, q in enumerate(quote_at):
            lo = q - 1 + 4        # y index of the 5th quoted byte
            hits += int((pred[r, lo:] == y[r, lo:]).sum())
            total += y.shape[1] - lo
    model.train()
    return hits / max(total, 1)


@torch.no_grad()
def bits_per_byte(model, data, block, batches=16, batch=16, seed=0, token_bytes=None):
    """Held-out bits per byte on random windows of `data`. For a tokenizer's ids, `token_bytes[id]`
    is the number of bytes of token id: the total nats of all predicted tokens are divided by
    their total bytes."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    total = 0.0
    nats = byte_count = 0.0
    vocab = model.config.vocab_size
    for _ in range(batches):
        ix = torch.randint(len(data) - block - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + block + 1] for i in ix])
        if token_bytes is None:
            total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
        else:
            nats += F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1),
                                    reduction="sum").double().item()
            byte_count += float(token_bytes[y].sum())
    model.train()
    if token_bytes is not None:
        return nats / byte_count / math.log(2)
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
    ap.add_argument("--quote-fraction", type=float, default=0.0,
                    help="share of training windows that end in a quotation of an earlier passage")
    ap.add_argument("--quote-shuffle", type=float, default=0.0,
                    help="share of quoted passages whose words are shuffled (both occurrences alike)")
    ap.add_argument("--drill-fraction", type=float, default=0.0,
                    help="share of training windows that repeat one word-shuffled passage to the end")
    ap.add_argument("--drill-letters", type=float, default=0.0,
                    help="share of drill passages made of random letters (only copying predicts them)")
    ap.add_argument("--tokenizer", help="train on the ids of this byte-level BPE (tools/train/bpe.py) "
                                        "instead of bytes; the vocabulary is the tokenizer's")
    a = ap.parse_args()
    tok = token_bytes = None
    if a.tokenizer:
        if a.quote_fraction > 0 or a.drill_fraction > 0:
            ap.error("--tokenizer cannot be combined with --quote-fraction / --drill-fraction")
        from bpe import Tokenizer
        tok = Tokenizer.load(a.tokenizer)
        token_bytes = torch.tensor([len(v) for v in tok.vocab], dtype=torch.long)

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = PRESETS[a.preset]
    if tok is not None:
        cfg = dataclasses.replace(cfg, vocab_size=tok.size())
    model = GPT(cfg)
    if a.init:
        load_spdc(model, a.init)
    lr_max = a.lr or (1e-3 if a.preset == "target" else 3e-3)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr_max, betas=(0.9, 0.95))
    if tok is None:
        train, held = load(Path(a.corpus) / "train.txt"), load(Path(a.corpus) / "heldout.txt")
    else:
        def load_ids(path):  # the token ids of the file instead of its bytes
            data = Path(path).read_bytes()
            ids = torch.tensor(tok.encode(data), dtype=torch.long)
            print(f"{path}: {len(data)} bytes -> {len(ids)} tokens of {a.tokenizer} "
                  f"({len(ids) / len(data):.4f} tokens/byte)", flush=True)
            return ids
        train, held = load_ids(Path(a.corpus) / "train.txt"), load_ids(Path(a.corpus) / "heldout.txt")
    block = cfg.max_context
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{a.preset}: {n_params} parameters, block {block}, batch {a.batch}, {a.minutes} min, "
          f"lr {lr_max}, quote fraction {a.quote_fraction} (shuffled {a.quote_shuffle}), "
          f"drill fraction {a.drill_fraction} (random letters {a.drill_letters}), init {a.init}"
          + (f", tokenizer {a.tokenizer} (vocab {cfg.vocab_size}, block in tokens)" if tok else ""),
          flush=True)
    train_starts = line_starts(train)
    windows = torch.Generator().manual_seed(a.seed)

    def evaluate(batches):
        text = f"heldout_bpb={bits_per_byte(model, held, block, batches=batches, token_bytes=token_bytes):.3f}"
        if a.quote_fraction > 0 or a.drill_fraction > 0:
            text += (f" quote_acc={quote_accuracy(model, held, block):.3f}"
                     f" copy_acc={quote_accuracy(model, held, block, shuffle=1.0):.3f}")
        return text

    if a.init:
        print(f"start: {evaluate(16)}", flush=True)

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
        if a.quote_fraction > 0 or a.drill_fraction > 0:
            x, y, _ = batch_windows(train, train_starts, block, a.batch, a.quote_fraction, windows,
                                    a.quote_shuffle, a.drill_fraction, a.drill_letters)
        else:  # plain windows, drawn exactly as before the quotation option existed
            ix = torch.randint(len(train) - block - 1, (a.batch,))
            x = torch.stack([train[i:i + block] for i in ix])
            y = torch.stack([train[i + 1:i + block + 1] for i in ix])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            bpb = loss.item() / math.log(2)
            if token_bytes is not None:  # bits per byte of this batch, not per token
                bpb *= y.numel() / float(token_bytes[y].sum())
            print(f"step {step} t={elapsed/60:.1f}min lr={lr:.2e} train_bpb={bpb:.3f}", flush=True)
        if time.time() - last_ckpt > 300:
            save()
            last_ckpt = time.time()
            print(f"checkpoint: {evaluate(16)}", flush=True)
    save()
    print(f"done: {step} steps, {evaluate(32)}", flush=True)


if __name__ == "__main__":
    main()
