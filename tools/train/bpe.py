#!/usr/bin/env python3
"""A GPT-2-style byte-level BPE tokenizer for the KJV corpus: training, encode, decode.

  python3 tools/train/bpe.py train build/corpus/train.txt models/kjv-bpe.tokenizer --vocab 1024
  python3 tools/train/bpe.py encode models/kjv-bpe.tokenizer " the LORD's"      # ids, one line
  python3 tools/train/bpe.py stats models/kjv-bpe.tokenizer models/prompts.txt  # tokens per byte

Vocabulary: ids 0..255 are the single bytes (id = byte value); id 256 + k is the k-th merge, the
concatenation of the two earlier tokens it joins. Nothing else: no special tokens.

Pre-tokenization is GPT-2's pattern
    's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^\\s L N]+|\\s+(?!\\S)|\\s+
applied to BYTES, with the classes defined on single bytes:
    L (letters)    A-Z, a-z and every byte >= 0x80 (so a UTF-8 sequence stays inside one word)
    N (digits)     0-9
    \\s (space)    \\t \\n \\v \\f \\r and ' ' (0x09-0x0D, 0x20: Unicode's White_Space in ASCII)
    anything else (punctuation, other control bytes) is the "other" class.
The contractions are case-sensitive ("'S" is not one), as in GPT-2. On ASCII text this is what
GPT-2 and llama.cpp's gpt2 pre-tokenizer do; on non-ASCII text GPT-2 classifies code points by
their Unicode category instead (a UTF-8 "é" is a letter for both, but a non-ASCII punctuation
or space character is a letter here), and bytes that are not valid UTF-8 are just letters here.
Merges never cross a pre-token boundary.

Training (GPT-2's): count every adjacent token pair inside the pre-tokens of the corpus (each
distinct pre-token weighted by its frequency); merge the most frequent pair into a new token
(ties: the smallest (left id, right id)), re-count, until the vocabulary has --vocab tokens.
Encoding a pre-token: repeatedly merge, left to right and without overlap, every occurrence of the
adjacent pair with the lowest merge rank until no adjacent pair is a merge.

File format (.tokenizer, ASCII text, '\\n' line ends):
    SPDCBPE1 1 <vocab_size> <n_merges>       magic, format version, vocab_size = 256 + n_merges
    <a> <b>                                  n_merges lines, in merge order: merge k (line k + 2)
                                             makes token 256 + k from tokens a and b, a, b < 256 + k
No other lines (no blank line, no comment); the last line ends in '\\n'; a pair occurs once.
"""
import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

MAGIC = "SPDCBPE1"
VERSION = 1

_L = rb"A-Za-z\x80-\xff"
_N = rb"0-9"
_S = rb"\t\n\x0b\x0c\r "
PRETOKEN = re.compile(
    rb"'s|'t|'re|'ve|'m|'ll|'d"
    rb"| ?[" + _L + rb"]+"
    rb"| ?[" + _N + rb"]+"
    rb"| ?[^" + _S + _L + _N + rb"]+"
    rb"|[" + _S + rb"]+(?![^" + _S + rb"])"
    rb"|[" + _S + rb"]+")


def pretokenize(data: bytes):
    """The pre-tokens of `data` (bytes), in order; their concatenation is `data`."""
    return PRETOKEN.findall(data)


def train(text: bytes, vocab_size: int, log=None):
    """The merges (list of (a, b)) of a BPE of vocab_size tokens trained on `text`."""
    if vocab_size < 256:
        raise ValueError("vocab_size must be at least 256")
    counts = Counter(pretokenize(text))
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pairs = Counter()
    where = defaultdict(set)   # pair -> indices of the words that contain it
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += freq[i]
            where[p].add(i)
    merges = []
    while 256 + len(merges) < vocab_size and pairs:
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] <= 0:
            break
        new = 256 + len(merges)
        merges.append(best)
        a, b = best
        for i in sorted(where[best]):
            w = words[i]
            f = freq[i]
            for p in zip(w, w[1:]):       # remove the word's old pairs
                pairs[p] -= f
                if pairs[p] == 0:
                    del pairs[p]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):   # add its new ones
                pairs[p] += f
                where[p].add(i)
        del where[best]
        if log and len(merges) % 128 == 0:
            log(f"{len(merges)} merges")
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.ranks = {m: k for k, m in enumerate(self.merges)}
        self.vocab = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self.cache = {}

    def size(self):
        return len(self.vocab)

    @classmethod
    def load(cls, path):
        lines = Path(path).read_text(encoding="ascii").split("\n")
        head = lines[0].split()
        if len(head) != 4 or head[0] != MAGIC or head[1] != str(VERSION):
            raise SystemExit(f"{path}: not a {MAGIC} version {VERSION} tokenizer file")
        vocab, n = int(head[2]), int(head[3])
        if vocab != 256 + n or len(lines) != n + 2 or lines[-1] != "":
            raise SystemExit(f"{path}: header says {n} merges, vocab {vocab}; file has {len(lines) - 2} lines")
        merges = []
        for k, line in enumerate(lines[1:-1]):
            a, b = (int(x) for x in line.split(" "))
            if not (0 <= a < 256 + k and 0 <= b < 256 + k):
                raise SystemExit(f"{path}: merge {k} ({a} {b}) refers to a token not yet defined")
            merges.append((a, b))
        if len(set(merges)) != len(merges):
            raise SystemExit(f"{path}: a merge occurs twice")
        return cls(merges)

    def save(self, path):
        text = f"{MAGIC} {VERSION} {self.size()} {len(self.merges)}\n"
        text += "".join(f"{a} {b}\n" for a, b in self.merges)
        Path(path).write_text(text, encoding="ascii")

    def encode_word(self, word: bytes):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        w = list(word)
        ranks = self.ranks
        while len(w) > 1:
            best = min(zip(w, w[1:]), key=lambda p: ranks.get(p, 1 << 30))
            rank = ranks.get(best)
            if rank is None:
                break
            a, b = best
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(256 + rank)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        self.cache[word] = w
        return w

    def encode(self, data):
        """Token ids of `data` (bytes, or str as UTF-8)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        out = []
        for word in pretokenize(data):
            out.extend(self.encode_word(word))
        return out

    def decode(self, ids) -> bytes:
        return b"".join(self.vocab[i] for i in ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train on a text file and write the .tokenizer file")
    t.add_argument("corpus")
    t.add_argument("out")
    t.add_argument("--vocab", type=int, default=1024, help="vocabulary size: 256 bytes + merges")
    e = sub.add_parser("encode", help="print the ids of each TEXT (Python escapes allowed), one line each")
    e.add_argument("tokenizer")
    e.add_argument("text", nargs="+")
    s = sub.add_parser("stats", help="tokens per byte of a text file")
    s.add_argument("tokenizer")
    s.add_argument("file")
    a = ap.parse_args()
    if a.cmd == "train":
        text = Path(a.corpus).read_bytes()
        merges = train(text, a.vocab, log=lambda m: print(m, file=sys.stderr, flush=True))
        tok = Tokenizer(merges)
        tok.save(a.out)
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        print(f"wrote {a.out}: {tok.size()} tokens ({len(merges)} merges); {a.corpus}: "
              f"{len(text)} bytes -> {len(ids)} tokens ({len(ids) / len(text):.4f} tokens/byte)")
    elif a.cmd == "encode":
        tok = Tokenizer.load(a.tokenizer)
        for text in a.text:
            data = text.encode("utf-8").decode("unicode_escape").encode("latin-1")
            print(" ".join(map(str, tok.encode(data))))
    else:
        tok = Tokenizer.load(a.tokenizer)
        data = Path(a.file).read_bytes()
        ids = tok.encode(data)
        assert tok.decode(ids) == data
        print(f"{a.file}: {len(data)} bytes -> {len(ids)} tokens ({len(ids) / len(data):.4f} tokens/byte)")


if __name__ == "__main__":
    main()
