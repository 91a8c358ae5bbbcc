#!/usr/bin/env python3
"""The sentences of the dev set: from the normalized WikiText-2 valid text, those of MIN..MAX
words that hold only ``[a-z']`` words (no ``<unk>``, digits or non-ASCII letters), the first
PER_ARTICLE of each article, articles in order.

Writes to OUT_DIR: ``text`` (one sentence a line), ``docids`` (the article index written with
three digits, so that recording ids sort in article order: ``000``) and ``sentidx`` (``valid
<article> <line>`` per sentence, the line 0-based in TEXT_DIR/valid.txt).

Usage: select_dev.py [--articles N] [--per-article K] [--min-words A] [--max-words B] TEXT_DIR OUT_DIR
"""

import argparse
import re
import sys
from pathlib import Path

SPEAKABLE = re.compile(r"^[a-z']+$")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("text_dir", type=Path, help="normalize.py's output (valid.txt, valid.docids)")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--articles", type=int, default=0, help="the first N articles only (0: all)")
    p.add_argument("--per-article", type=int, default=11, help="sentences per article, at most")
    p.add_argument("--min-words", type=int, default=5)
    p.add_argument("--max-words", type=int, default=30)
    a = p.parse_args()
    if a.articles < 0 or a.per_article < 1 or not 1 <= a.min_words <= a.max_words:
        p.error("expected --articles >= 0, --per-article >= 1, 1 <= --min-words <= --max-words")
    text, ids = a.text_dir / "valid.txt", a.text_dir / "valid.docids"
    for f in (text, ids):
        if not f.is_file():
            sys.exit(f"error: {f}: expected normalize.py's output, got no such file")
    lines = text.read_text(encoding="utf-8").splitlines()
    docids = ids.read_text(encoding="utf-8").splitlines()
    if len(lines) != len(docids):
        sys.exit(f"error: {ids}: expected {len(lines)} lines (one per line of {text}), got {len(docids)}")
    taken, rows = {}, []
    for n, (line, doc) in enumerate(zip(lines, docids)):
        if not doc.isdigit():
            sys.exit(f"error: {ids}:{n + 1}: expected an article index, got {doc!r}")
        if a.articles and int(doc) >= a.articles:
            break
        words = line.split()
        if (a.min_words <= len(words) <= a.max_words and all(SPEAKABLE.match(w) for w in words)
                and taken.get(doc, 0) < a.per_article):
            taken[doc] = taken.get(doc, 0) + 1
            rows.append((line, f"{int(doc):03d}", f"valid {doc} {n}"))
    if not rows:
        sys.exit(f"error: {text}: expected sentences to select, got none")
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for name, k in (("text", 0), ("docids", 1), ("sentidx", 2)):
        (a.out_dir / name).write_text("".join(r[k] + "\n" for r in rows), encoding="utf-8")
    print(f"selected {len(rows)} sentences of {len(taken)} articles", file=sys.stderr)


if __name__ == "__main__":
    main()
