#!/usr/bin/env python3
"""Extract the King James Bible from Debian's bible-kjv package into a byte corpus.

One verse per line, "Book C:V text", ASCII. Every 50th chapter (in canonical order) is held out:
  corpus/train.txt   training verses
  corpus/heldout.txt held-out verses (validation loss, benchmark prompts)
Requires: apt-get install bible-kjv (provides /usr/bin/bible and the public-domain KJV text).
"""
import re
import subprocess
import sys
from pathlib import Path

HELDOUT_EVERY = 50


def verses():
    text = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                          text=True, env={"COLUMNS": "100000", "PATH": "/usr/bin:/bin"}).stdout
    chapter = None
    current = None
    for line in text.splitlines():
        head = re.fullmatch(r"(\S.*\S) (\d+)", line)
        verse = re.match(r"\s+(\d+) (.*)", line)
        if head and not line.startswith(" "):
            if current:
                yield current
                current = None
            chapter = head.group(0)
        elif verse:
            if current:
                yield current
            current = [chapter, int(verse.group(1)), verse.group(2).strip()]
        elif line.strip() and current:
            current[2] += " " + line.strip()
    if current:
        yield current


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "corpus")
    out.mkdir(parents=True, exist_ok=True)
    train, held = [], []
    chapters = []
    for chapter, number, text in verses():
        if not chapters or chapters[-1] != chapter:
            chapters.append(chapter)
        line = f"{chapter}:{number} {text}\n"
        (held if len(chapters) % HELDOUT_EVERY == 0 else train).append(line)
    (out / "train.txt").write_text("".join(train), encoding="ascii")
    (out / "heldout.txt").write_text("".join(held), encoding="ascii")
    print(f"{len(chapters)} chapters, {len(train)} train verses, {len(held)} held-out verses")


if __name__ == "__main__":
    main()
