"""WER, N-best oracle WER, rare-word buckets (per-bucket WER and cross-entropy) and their plot.

WER comes from jiwer's alignment (design §7); the oracle, which needs one edit distance per
hypothesis, from rapidfuzz's Levenshtein on token lists (jiwer is too slow there). Both minimise
the same total S + D + I, so the figures agree.

Rare-word buckets follow the paper's Figures 2 and 3 (Li, Povey, Khudanpur 2020): sort the
vocabulary by training-text frequency, rarest first, and cut it into n buckets holding roughly
equal numbers of reference tokens. Per bucket: reference tokens, errors on them (substitutions
+ deletions of reference words of that bucket), and insertions counted in the bucket of the
inserted word, so sum(errors) + sum(insertions) = total errors.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError

PathLike = Union[str, Path]


@dataclass
class WerStats:
    """Corpus-level edit counts; wer is in percent."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    ref_words: int = 0
    num_utts: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Percent; 0 reference words with errors gives inf, without errors 0."""
        if self.ref_words == 0:
            return 0.0 if self.errors == 0 else math.inf
        return 100.0 * self.errors / self.ref_words

    def as_dict(self) -> dict:
        return {"wer": self.wer, "errors": self.errors, "substitutions": self.substitutions,
                "deletions": self.deletions, "insertions": self.insertions,
                "ref_words": self.ref_words, "num_utts": self.num_utts}


@dataclass
class Alignment:
    """One utterance's alignment: reference words in error, and inserted hypothesis words."""

    ref: List[str]
    hyp: List[str]
    ref_errors: List[str] = field(default_factory=list)  # substituted or deleted ref words
    inserted: List[str] = field(default_factory=list)  # inserted hyp words
    substitutions: int = 0
    deletions: int = 0


def _check_keys(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                allow_missing: bool, ref_path: Optional[PathLike], hyp_path: Optional[PathLike]) -> List[str]:
    missing = [u for u in refs if u not in hyps]
    extra = [u for u in hyps if u not in refs]
    if not allow_missing:
        if missing:
            raise RescoreError(f"a hypothesis for every reference; {len(missing)} missing, e.g. '{missing[0]}'",
                               path=hyp_path)
        if extra:
            raise RescoreError(f"only utterances that have a reference; {len(extra)} extra, e.g. '{extra[0]}'",
                               path=hyp_path if ref_path is None else ref_path)
    # allow_missing: a reference without hypothesis scores as all deletions (empty hypothesis);
    # a hypothesis without reference is left out.
    return list(refs)


def align(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]], *,
          allow_missing: bool = False, ref_path: Optional[PathLike] = None,
          hyp_path: Optional[PathLike] = None) -> Tuple[WerStats, Dict[str, Alignment]]:
    """Align hypotheses to references (utt -> token lists) with jiwer; corpus counts + per-utt."""
    import jiwer

    utts = _check_keys(refs, hyps, allow_missing, ref_path, hyp_path)
    stats = WerStats(num_utts=len(utts))
    out: Dict[str, Alignment] = {}
    if not utts:
        return stats, out
    ref_l = [list(refs[u]) for u in utts]
    hyp_l = [list(hyps.get(u, [])) for u in utts]
    # Tokens never contain whitespace (they come from splitting), so joining and letting jiwer
    # split again is the identity; jiwer 4 wants strings.
    tr = jiwer.Compose([jiwer.ReduceToListOfListOfWords()])
    o = jiwer.process_words([" ".join(r) for r in ref_l], [" ".join(h) for h in hyp_l],
                            reference_transform=tr, hypothesis_transform=tr)
    for u, r, h, chunks in zip(utts, ref_l, hyp_l, o.alignments):
        a = Alignment(r, h)
        for c in chunks:
            if c.type == "substitute":
                a.ref_errors += r[c.ref_start_idx:c.ref_end_idx]
                a.substitutions += c.ref_end_idx - c.ref_start_idx
            elif c.type == "delete":
                a.ref_errors += r[c.ref_start_idx:c.ref_end_idx]
                a.deletions += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                a.inserted += h[c.hyp_start_idx:c.hyp_end_idx]
        out[u] = a
        stats.substitutions += a.substitutions
        stats.deletions += a.deletions
        stats.insertions += len(a.inserted)
        stats.ref_words += len(r)
    return stats, out


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two token lists (S + D + I), via rapidfuzz."""
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(ref, hyp)


def oracle_errors(ref: Sequence[str], hyps: Iterable[Sequence[str]]) -> int:
    """Fewest word errors of any hypothesis against ref."""
    return min(word_errors(ref, h) for h in hyps)


def oracle_wer(refs: Mapping[str, Sequence[str]], nbests: Mapping[str, Sequence[Sequence[str]]]) -> float:
    """N-best oracle WER in percent: per utterance the hypothesis with the fewest errors."""
    errs = sum(oracle_errors(refs[u], nbests[u]) for u in refs)
    n = sum(len(r) for r in refs.values())
    return 100.0 * errs / n if n else 0.0


# --------------------------------------------------------------------------------------------
# Rare-word buckets


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


def count_words(path: PathLike) -> Counter:
    """Word counts of a training text (whitespace tokens, one sentence per line, gz allowed)."""
    from rescore.io.kaldi import iter_lines  # the strict line reader every input goes through

    c: Counter = Counter()
    for _, line in iter_lines(path):
        c.update(line.split())
    return c


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
    vocab = sorted(set(train_counts) | set(ref_counts), key=lambda w: (train_counts.get(w, 0), w))
    bucket_of: Dict[str, int] = {}
    ranges: List[Optional[Tuple[int, int]]] = [None] * n
    before = 0
    for w in vocab:
        r = ref_counts.get(w, 0)
        b = min(n - 1, int(n * (before + r / 2) / total)) if total else 0
        bucket_of[w] = b
        before += r
        if r:
            c = train_counts.get(w, 0)
            lo_hi = ranges[b]
            ranges[b] = (c, c) if lo_hi is None else (min(lo_hi[0], c), max(lo_hi[1], c))
    return BucketMap(n, bucket_of, Counter(train_counts), ranges)


def bucket_wer(alignments: Mapping[str, Alignment], buckets: BucketMap) -> List[dict]:
    """Per bucket: ref_tokens, errors (S + D on its reference words), wer (percent of its
    reference tokens), insertions (inserted words of that bucket), train_count_range."""
    rows = [{"bucket": b, "ref_tokens": 0, "errors": 0, "insertions": 0} for b in range(buckets.n)]
    for a in alignments.values():
        for w in a.ref:
            rows[buckets[w]]["ref_tokens"] += 1
        for w in a.ref_errors:
            rows[buckets[w]]["errors"] += 1
        for w in a.inserted:
            rows[buckets[w]]["insertions"] += 1
    for row, rng in zip(rows, buckets.ranges):
        row["wer"] = 100.0 * row["errors"] / row["ref_tokens"] if row["ref_tokens"] else 0.0
        row["train_count_range"] = list(rng) if rng else None
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


def format_bucket_table(rows: List[dict]) -> str:
    """A readable table of bucket_wer rows, with a total line that adds up to the WER's errors."""
    lines = [f"{'bucket':>6} {'train count':>15} {'ref tok':>8} {'errors':>7} {'WER %':>7} {'ins':>5}"]
    for r in rows:
        rng = r.get("train_count_range")
        rng_s = f"{rng[0]}-{rng[1]}" if rng else "-"
        lines.append(f"{r['bucket']:>6} {rng_s:>15} {r['ref_tokens']:>8} {r['errors']:>7} {r['wer']:>7.2f} "
                     f"{r['insertions']:>5}")
    n_ref = sum(r["ref_tokens"] for r in rows)
    n_err = sum(r["errors"] for r in rows)
    n_ins = sum(r["insertions"] for r in rows)
    lines.append(f"{'total':>6} {'':>15} {n_ref:>8} {n_err:>7} {100.0 * (n_err + n_ins) / max(n_ref, 1):>7.2f} "
                 f"{n_ins:>5}   (WER = (errors + ins) / ref tokens)")
    return "\n".join(lines)


def plot_buckets(rows: List[dict], path: PathLike, *, value: str = "wer", labels: Optional[List[str]] = None,
                 others: Optional[List[List[dict]]] = None, title: str = "", ylabel: Optional[str] = None) -> None:
    """Bar chart of one value per bucket (rarest left) to a PNG; others adds side-by-side series
    (e.g. several models), named by labels (one per series, rows first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rescore.io.kaldi import atomic_output

    series = [rows] + list(others or [])
    names = labels or [f"series {i}" for i in range(len(series))]
    n = len(rows)
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (s, name) in enumerate(zip(series, names)):
        ax.bar([b + (i - (len(series) - 1) / 2) * width for b in range(n)], [r[value] for r in s], width, label=name)
    ax.set_xticks(range(n))
    ax.set_xticklabels([str(b) for b in range(n)])
    ax.set_xlabel("rare-word bucket (0 = rarest in training text)")
    ax.set_ylabel(ylabel or {"wer": "WER on bucket's reference tokens (%)", "ce": "cross-entropy (nats)",
                             "ce_diff": "cross-entropy difference (nats)"}.get(value, value))
    if title:
        ax.set_title(title)
    if len(series) > 1 or labels:
        ax.legend()
    fig.tight_layout()
    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def wer_report(ref_text: PathLike, hyp_text: PathLike, *, train_text: Optional[PathLike] = None,
               num_buckets: int = 10, allow_missing: bool = False) -> dict:
    """WER of two Kaldi text files (``utt w1 w2 ...``) keyed by utterance, with the rare-word
    bucket table when train_text is given. Missing or extra utterances are an error unless
    allow_missing (then a missing hypothesis counts as empty, an extra one is ignored)."""
    from rescore.io.kaldi import read_text_table

    refs = read_text_table(ref_text, "tokens").as_dict()
    hyps = read_text_table(hyp_text, "tokens").as_dict()
    stats, alignments = align(refs, hyps, allow_missing=allow_missing, ref_path=ref_text, hyp_path=hyp_text)  # type: ignore[arg-type]
    report = {**stats.as_dict(), "ref_text": str(ref_text), "hyp_text": str(hyp_text),
              "missing_hyps": sum(1 for u in refs if u not in hyps),
              "extra_hyps": sum(1 for u in hyps if u not in refs)}
    if train_text is not None:
        buckets = rare_word_buckets(count_words(train_text), (w for r in refs.values() for w in r), num_buckets)
        report["buckets"] = bucket_wer(alignments, buckets)
    return report


def format_wer_report(report: dict) -> str:
    """Kaldi compute-wer style line, plus the bucket table when present."""
    lines = [f"%WER {report['wer']:.2f} [ {report['errors']} / {report['ref_words']}, {report['insertions']} ins, "
             f"{report['deletions']} del, {report['substitutions']} sub ]  ({report['num_utts']} utterances)"]
    if "buckets" in report:
        lines += ["", "per rare-word bucket (0 = rarest in training text):", format_bucket_table(report["buckets"])]
    return "\n".join(lines)
