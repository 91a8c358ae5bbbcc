#!/usr/bin/env python3
"""Real English running text for the mini recipe: the World English Bible from Debian.

Debian's package ``sword-text-web`` holds the World English Bible (public domain, modern
English, about 900k words with the deuterocanon) as a SWORD zText module: per testament a
block index ``*.bzs`` (12 bytes a block: offset, compressed size, size; little-endian u32) over
zlib-compressed blocks ``*.bzz``, one block per book, with OSIS markup inside.  We read it with
the standard library (no SWORD tools), split it into chapters (``<chapter sID=...>``), drop
footnotes and headings, and normalize as ASR output looks (as WikiText-2's ASR-style text): lowercase, words of
``[a-z']`` only, no punctuation, one sentence a line (split at . ? ! ; :).  One chapter is one
document: its sentences in order.

Writes to OUT_DIR: ``train.txt``/``train.docids`` (LM training text), ``valid.txt`` (LM early
stopping), ``dev.txt``/``dev.docids`` and ``test.txt``/``test.docids`` (sentences to synthesize,
5..MAX words, the first SENTS of each chapter of the held-out books), ``all_books.txt`` and
``stats.json``.  Held-out books are never in train.txt or valid.txt.
"""

import argparse
import json
import re
import struct
import sys
import zlib
from pathlib import Path

NUM_WORDS = {
    0: "zero", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
    9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen",
    16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen", 20: "twenty", 30: "thirty",
    40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety",
}


def spell(n: int) -> str:
    """Cardinal number in words (the WEB has a few digits: '1,000', '120')."""
    if n < 20 or (n < 100 and n % 10 == 0):
        return NUM_WORDS[n]
    if n < 100:
        return f"{NUM_WORDS[n - n % 10]} {NUM_WORDS[n % 10]}"
    if n < 1000:
        rest = f" {spell(n % 100)}" if n % 100 else ""
        return f"{NUM_WORDS[n // 100]} hundred{rest}"
    for div, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= div:
            rest = f" {spell(n % div)}" if n % div else ""
            return f"{spell(n // div)} {name}{rest}"
    return str(n)


def read_ztext(module_dir: Path):
    """Yield (book, chapter, osis_text) for every chapter of the module."""
    for testament in ("ot", "nt"):
        bzs = (module_dir / f"{testament}.bzs").read_bytes()
        bzz = (module_dir / f"{testament}.bzz").read_bytes()
        for k in range(len(bzs) // 12):
            off, size, usize = struct.unpack("<III", bzs[12 * k:12 * k + 12])
            raw = zlib.decompress(bzz[off:off + size])
            if len(raw) != usize:
                sys.exit(f"error: {module_dir}/{testament}.bzz: block {k}: expected {usize} bytes, got {len(raw)}")
            block = raw.decode("utf-8")
            parts = re.split(r'<chapter [^>]*sID="([^"]+)"[^>]*/>', block)
            # parts = [before, id1, text1, id2, text2, ...]; 'before' is front matter.
            for cid, text in zip(parts[1::2], parts[2::2]):
                text = re.split(r'<chapter [^>]*eID=', text)[0]
                book, _, chap = cid.rpartition(".")
                yield book, chap, text


def osis_to_plain(text: str) -> str:
    text = re.sub(r"<note\b.*?</note>", " ", text, flags=re.S)
    text = re.sub(r"<title\b.*?</title>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return text


def normalize(text: str):
    """Plain text -> list of sentences (lists of words)."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u02bc", "'")
    text = re.sub(r"(\d),(\d{3})", r"\1\2", text)
    text = re.sub(r"\d+", lambda m: " " + spell(int(m.group())) + " ", text)
    sentences = []
    for piece in re.split(r"[.?!;:]+", text):
        words = []
        for tok in re.split(r"[^A-Za-z']+", piece):
            tok = tok.lower().strip("'")
            if tok:
                words.append(tok)
        if words:
            sentences.append(words)
    return sentences


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module_dir", type=Path,
                    help="SWORD module dir, e.g. /usr/share/sword/modules/texts/ztext/engWEB2015eb")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--dev-books", default="Ruth,Jonah,Phil",
                    help="OSIS book ids held out for dev (default: %(default)s)")
    ap.add_argument("--test-books", default="Mark", help="OSIS book ids held out for test (default: %(default)s)")
    ap.add_argument("--valid-books", default="Esth,Titus", help="held out for LM early stopping (default: %(default)s)")
    ap.add_argument("--sents", type=int, default=6,
                    help="sentences per held-out chapter to speak (default: %(default)s)")
    ap.add_argument("--chapters", type=int, default=1000,
                    help="chapters per held-out set, at most (default: %(default)s)")
    ap.add_argument("--min-words", type=int, default=5, help="shortest spoken sentence (default: %(default)s)")
    ap.add_argument("--max-words", type=int, default=25, help="longest spoken sentence (default: %(default)s)")
    ap.add_argument("--train-words", type=int, default=0,
                    help="cap on LM training words, 0 = all (default: %(default)s)")
    args = ap.parse_args()
    for f in ("ot.bzs", "ot.bzz", "nt.bzs", "nt.bzz"):
        if not (args.module_dir / f).exists():
            sys.exit(f"error: {args.module_dir / f}: expected a SWORD zText module (apt-get install sword-text-web)")
    dev_books = set(args.dev_books.split(","))
    test_books = set(args.test_books.split(","))
    valid_books = set(args.valid_books.split(","))
    out = {n: [] for n in ("train", "valid", "dev", "test")}
    books = []
    n_chap = {"dev": 0, "test": 0}
    train_words = 0
    for book, chap, osis in read_ztext(args.module_dir):
        if not books or books[-1] != book:
            books.append(book)
        sents = normalize(osis_to_plain(osis))
        doc = f"{book.lower()}{int(chap):03d}" if chap.isdigit() else f"{book.lower()}-{chap}"
        if book in dev_books or book in test_books:
            part = "dev" if book in dev_books else "test"
            if n_chap[part] >= args.chapters:
                continue
            chosen = [s for s in sents if args.min_words <= len(s) <= args.max_words][: args.sents]
            if chosen:
                n_chap[part] += 1
                out[part] += [(doc, s) for s in chosen]
        elif book in valid_books:
            out["valid"] += [(doc, s) for s in sents]
        else:
            if args.train_words and train_words >= args.train_words:
                continue
            out["train"] += [(doc, s) for s in sents]
            train_words += sum(len(s) for s in sents)
    missing = (dev_books | test_books | valid_books) - set(books)
    if missing:
        sys.exit(f"error: {args.module_dir}: books {sorted(missing)} not found (have {','.join(books)})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stats = {"books": len(books)}
    for name, rows in out.items():
        (args.out_dir / f"{name}.txt").write_text("".join(" ".join(s) + "\n" for _, s in rows))
        (args.out_dir / f"{name}.docids").write_text("".join(d + "\n" for d, _ in rows))
        stats[name] = {"sentences": len(rows), "words": sum(len(s) for _, s in rows),
                       "documents": len({d for d, _ in rows})}
    (args.out_dir / "all_books.txt").write_text("\n".join(books) + "\n")
    (args.out_dir / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
