#!/usr/bin/env python3
"""A bigram ARPA LM from a text, for the real-Kaldi check (tools/kaldi/kaldi_check.sh): Kaldi's
arpa2fst and arpa-to-const-arpa turn it into the G.fst and G.carpa a decode would have used.

Absolute discounting (Ney et al. 1994), interpolated with the unigram and written in backoff
form, so that every history's distribution sums to 1:

    p(w | h) = max(c(h w) - D, 0) / c(h) + D * n(h) / c(h) * p1(w)     (seen h w)
    bow(h)   = (1 - sum_seen p(w | h)) / (1 - sum_seen p1(w))
    p1(w)    = (c(w) + 1) / (N + V)                                     (add-one unigram)

with n(h) the number of distinct words after h. The vocabulary is the words of words.txt that
occur in the text, plus <unk> (text words outside words.txt count as <unk>) and </s>; <s> has
no probability of its own. Words given with --drop are left out of the LM entirely (their
occurrences count as <unk>): a G.fst from it rejects every hypothesis that contains one.

Usage: arpa_bigram.py TEXT WORDS_TXT OUT_ARPA [--discount D] [--drop w1,w2,...]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter

SPECIAL = {"<eps>", "<s>", "</s>"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("text")
    ap.add_argument("words_txt")
    ap.add_argument("out_arpa")
    ap.add_argument("--discount", type=float, default=0.7)
    ap.add_argument("--drop", default="", help="comma-separated words left out of the LM")
    args = ap.parse_args()

    symbols = set()
    with open(args.words_txt, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 2:
                sys.exit(f"{args.words_txt}:{n}: expected 'word id', got {line.rstrip()!r}")
            symbols.add(parts[0])
    if "<unk>" not in symbols:
        sys.exit(f"{args.words_txt}: expected the symbol <unk>")
    drop = {w for w in args.drop.split(",") if w}
    known = {w for w in symbols if w not in SPECIAL and not w.startswith("#")} - drop

    uni: Counter = Counter()
    bi: Counter = Counter()
    with open(args.text, encoding="utf-8") as f:
        for line in f:
            words = ["<s>"] + [w if w in known else "<unk>" for w in line.split()] + ["</s>"]
            if len(words) == 2:
                continue
            uni.update(words[1:])
            bi.update(zip(words, words[1:]))
    vocab = sorted(uni) + ["<s>"]
    V, N = len(uni), sum(uni.values())
    p1 = {w: (uni[w] + 1) / (N + V) for w in uni}

    after: dict = {}
    for (h, w), c in bi.items():
        after.setdefault(h, []).append((w, c))
    D = args.discount
    probs, bows = {}, {}
    for h, succ in after.items():
        ch = sum(c for _, c in succ)
        lam = D * len(succ) / ch
        seen_p, seen_p1 = 0.0, 0.0
        for w, c in succ:
            p = max(c - D, 0.0) / ch + lam * p1[w]
            probs[(h, w)] = p
            seen_p += p
            seen_p1 += p1[w]
        bows[h] = max(1.0 - seen_p, 1e-12) / max(1.0 - seen_p1, 1e-12)

    tmp = args.out_arpa + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(f"\\data\\\nngram 1={len(vocab)}\nngram 2={len(probs)}\n\n\\1-grams:\n")
        for w in vocab:
            lp = -99.0 if w == "<s>" else math.log10(p1[w])
            if w in bows:
                out.write(f"{lp:.6f}\t{w}\t{math.log10(bows[w]):.6f}\n")
            else:
                out.write(f"{lp:.6f}\t{w}\n")
        out.write("\n\\2-grams:\n")
        for (h, w), p in sorted(probs.items()):
            out.write(f"{math.log10(p):.6f}\t{h} {w}\n")
        out.write("\n\\end\\\n")
    os.replace(tmp, args.out_arpa)
    print(f"{args.out_arpa}: {len(vocab)} unigrams, {len(probs)} bigrams from {N} tokens"
          + (f"; left out: {', '.join(sorted(drop))}" if drop else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
