"""Rare-word buckets: per-bucket WER and cross-entropy, and the bucket table.

Rare-word buckets follow the paper's Figures 2 and 3 (Li, Povey, Khudanpur 2020): sort the
vocabulary by training-text frequency, rarest first, and cut it into n buckets holding roughly
equal numbers of reference tokens. Per bucket: reference tokens, substitutions and deletions of
the reference words of that bucket, and insertions; an insertion has no reference word, so it is
counted in the bucket of the inserted (hypothesis) word, a word never seen in training falling
in bucket 0. A bucket's errors are S + D + I and its WER is errors / its reference tokens, so the
buckets' errors add up exactly to the total errors and the token-weighted mean of their WERs is
the total WER.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from rescore.metrics.wer import Alignment


@dataclass
class BucketMap:
    """word -> bucket index, 0 = rarest in training text; unseen words fall in bucket 0.

    train_counts: the training counts used; ranges[b] = (min, max) training count of the words
    of bucket b that occur in the references.
    """

    n: int
    bucket_of: Dict[str, int]
    train_counts: Counter
    ranges: List[Optional[Tuple[int, int]]]

    def __getitem__(self, word: str) -> int:
        return self.bucket_of.get(word, 0)


def rare_word_buckets(train_counts: Counter, ref_tokens: Iterable[str], n: int = 10) -> BucketMap:
    """Cut the vocabulary (training words and reference words), sorted rarest first by training
    count (ties by word), into n buckets of roughly equal numbers of reference tokens.

    A word goes to bucket floor(n * (tokens before it + half its own) / total tokens), so a word
    is never split and frequent words land where their mass centres.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    ref_counts = Counter(ref_tokens)
    total = sum(ref_counts.values())
    words = sorted(set(train_counts) | set(ref_counts))
    order = np.argsort([train_counts.get(w, 0) for w in words], kind="stable").tolist()
    vocab = [words[i] for i in order]  # rarest first, ties by word
    train = np.array([train_counts.get(w, 0) for w in vocab], dtype=np.int64)
    ref = np.array([ref_counts.get(w, 0) for w in vocab], dtype=np.int64)
    before = np.cumsum(ref) - ref  # reference tokens of the rarer words
    if total:  # (the rule's float arithmetic, in Python's order, on every word at once)
        bucket = np.minimum(n - 1, (n * (before + ref / 2) / total).astype(np.int64))
    else:
        bucket = np.zeros(len(vocab), dtype=np.int64)
    ranges: List[Optional[Tuple[int, int]]] = [None] * n
    for b, c in zip(bucket[ref > 0].tolist(), train[ref > 0].tolist()):
        lo_hi = ranges[b]
        ranges[b] = (c, c) if lo_hi is None else (min(lo_hi[0], c), max(lo_hi[1], c))
    return BucketMap(n, dict(zip(vocab, bucket.tolist())), Counter(train_counts), ranges)


def bucket_wer(alignments: Mapping[str, Alignment], buckets: BucketMap) -> List[dict]:
    """Per bucket (see the module doc): bucket, train_count_range ([min, max] training count of
    its reference words, None when it has none), ref_tokens, substitutions, deletions,
    insertions (inserted words of that bucket), errors = S + D + I and wer = errors / ref_tokens
    in percent (0 for a bucket without reference tokens). The rows' errors add up to the total."""
    rows = [{"bucket": b, "train_count_range": list(rng) if rng else None, "ref_tokens": 0,
             "substitutions": 0, "deletions": 0, "insertions": 0}
            for b, rng in zip(range(buckets.n), buckets.ranges)]
    for a in alignments.values():
        for w in a.ref:
            rows[buckets[w]]["ref_tokens"] += 1
        for w in a.substituted:
            rows[buckets[w]]["substitutions"] += 1
        for w in a.deleted:
            rows[buckets[w]]["deletions"] += 1
        for w in a.inserted:
            rows[buckets[w]]["insertions"] += 1
    for row in rows:
        row["errors"] = row["substitutions"] + row["deletions"] + row["insertions"]
        row["wer"] = 100.0 * row["errors"] / row["ref_tokens"] if row["ref_tokens"] else 0.0
    return rows


def bucket_cross_entropy(tokens: Iterable[str], costs: Iterable[float], buckets: BucketMap) -> List[dict]:
    """Per bucket: tokens and ce = mean cost (nats, negated natural log prob) of the target
    tokens of that bucket. tokens[i] is the target word whose cost is costs[i]."""
    tot = [0.0] * buckets.n
    cnt = [0] * buckets.n
    for w, c in zip(tokens, costs):
        b = buckets[w]
        tot[b] += c
        cnt[b] += 1
    return [{"bucket": b, "tokens": cnt[b], "ce": tot[b] / cnt[b] if cnt[b] else 0.0} for b in range(buckets.n)]


def bucket_ce_difference(a: List[dict], b: List[dict]) -> List[dict]:
    """Per bucket ce(a) - ce(b) (negative: a is better on that bucket)."""
    return [{"bucket": x["bucket"], "tokens": x["tokens"], "ce_diff": x["ce"] - y["ce"]} for x, y in zip(a, b)]


def _count_label(c: int) -> str:
    """12, 3.8k, 131k, 1.2M: a training count in a few characters."""
    for div, suffix in ((1_000_000, "M"), (1000, "k")):
        if c >= div:
            v = c / div
            return f"{v:.1f}{suffix}" if v < 10 else f"{v:.0f}{suffix}"
    return str(c)


def _range_label(rng, short: bool = False) -> str:
    """'3-17' for a training-count range (short: '3.8k-9.1k'), '-' for none."""
    if not rng:
        return "-"
    lo, hi = (_count_label(c) for c in rng) if short else rng
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def format_bucket_table(rows: List[dict]) -> str:
    """A readable table of bucket_wer rows; its total line is the sum of the rows, so it is the
    corpus WER's errors exactly."""
    lines = [f"{'bucket':>6} {'train count':>13} {'ref tok':>8} {'sub':>5} {'del':>5} {'ins':>5} "
             f"{'errors':>7} {'WER %':>7}"]
    tot = {k: 0 for k in ("ref_tokens", "substitutions", "deletions", "insertions", "errors")}
    for r in rows:
        for k in tot:
            tot[k] += r[k]
        lines.append(f"{r['bucket']:>6} {_range_label(r.get('train_count_range')):>13} {r['ref_tokens']:>8} "
                     f"{r['substitutions']:>5} {r['deletions']:>5} {r['insertions']:>5} {r['errors']:>7} "
                     f"{r['wer']:>7.2f}")
    lines.append(f"{'total':>6} {'':>13} {tot['ref_tokens']:>8} {tot['substitutions']:>5} {tot['deletions']:>5} "
                 f"{tot['insertions']:>5} {tot['errors']:>7} {100.0 * tot['errors'] / max(tot['ref_tokens'], 1):>7.2f}")
    lines.append(BUCKET_RULE)
    return "\n".join(lines)


BUCKET_RULE = ("errors = sub + del of the bucket's reference words + insertions of its words (an "
               "inserted word counts in its own bucket; unseen words are bucket 0)")
