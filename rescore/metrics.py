"""WER, N-best oracle WER, rare-word buckets (per-bucket WER and cross-entropy) and their plot.

WER comes from jiwer's alignment (design §7); the oracle, which needs one edit distance per
hypothesis, from rapidfuzz's Levenshtein on token lists (jiwer is too slow there). Both minimise
the same total S + D + I, so the figures agree.

Rare-word buckets follow the paper's Figures 2 and 3 (Li, Povey, Khudanpur 2020): sort the
vocabulary by training-text frequency, rarest first, and cut it into n buckets holding roughly
equal numbers of reference tokens. Per bucket: reference tokens, substitutions and deletions of
the reference words of that bucket, and insertions; an insertion has no reference word, so it is
counted in the bucket of the inserted (hypothesis) word, a word never seen in training falling
in bucket 0. A bucket's errors are S + D + I and its WER is errors / its reference tokens, so the
buckets' errors add up exactly to the total errors and the token-weighted mean of their WERs is
the total WER.

Two or more systems on the same references (compare_systems): WER with S/D/I, the relative
change against the first (the baseline), and a paired bootstrap of each difference (Bisani &
Ney, "Bootstrap estimates for confidence intervals in ASR performance evaluation", ICASSP 2004;
Kaldi's compute-wer-bootci): resample whole utterances, or whole recordings/speakers when a
grouping is given, with replacement; per draw the WER of every system on the same sample.
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
    substituted: List[str] = field(default_factory=list)  # substituted ref words
    deleted: List[str] = field(default_factory=list)  # deleted ref words
    substitutions: int = 0
    deletions: int = 0


def check_scorable(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                   ref_path: Optional[PathLike] = None, hyp_path: Optional[PathLike] = None) -> None:
    """What a WER of files needs: WER is errors per reference word, undefined without reference
    words, and an empty hypothesis file is a mistake (a failed decode), not a WER of 100 %."""
    if not refs:
        raise RescoreError("at least one reference ('utt w1 w2 ...' line)", path=ref_path, got="an empty file")
    if not hyps:
        raise RescoreError("at least one hypothesis ('utt w1 w2 ...' line)", path=hyp_path, got="an empty file")
    if not any(len(r) for r in refs.values()):
        raise RescoreError("references with at least one word (WER is undefined on none)", path=ref_path,
                           got=f"{len(refs)} empty references")


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
                               path=hyp_path if hyp_path is not None else ref_path)
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
                a.substituted += r[c.ref_start_idx:c.ref_end_idx]
                a.ref_errors += r[c.ref_start_idx:c.ref_end_idx]
                a.substitutions += c.ref_end_idx - c.ref_start_idx
            elif c.type == "delete":
                a.deleted += r[c.ref_start_idx:c.ref_end_idx]
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


def plot_buckets(rows: List[dict], path: PathLike, *, value: str = "wer", labels: Optional[List[str]] = None,
                 others: Optional[List[List[dict]]] = None, title: str = "", ylabel: Optional[str] = None) -> None:
    """Bar chart of one value per bucket (rarest left) to a PNG; others adds side-by-side series
    (e.g. several models), named by labels (one per series, rows first)."""
    series = [rows] + list(others or [])
    names = labels or [f"series {i}" for i in range(len(series))]
    plot_bucket_series(path, bucket_ticks([r.get("train_count_range") for r in rows]),
                       {n: [r[value] for r in s] for n, s in zip(names, series)}, title=title,
                       ylabel=ylabel or {"wer": "WER on bucket's reference tokens (%)", "ce": "cross-entropy (nats)",
                                         "ce_diff": "cross-entropy difference (nats)"}.get(value, value))


# --------------------------------------------------------------------------------------------
# Two or more systems on the same references: WER, relative change, paired bootstrap


def read_groups(path: PathLike) -> Dict[str, str]:
    """utt -> group from a Kaldi table whose second field names the group: ``segments``
    (utt reco start end: recordings) or ``utt2spk`` (utt spk: speakers)."""
    from rescore.io.kaldi import read_text_table

    table = read_text_table(path, "tokens").as_dict()
    out = {}
    for u, fields_ in table.items():
        if not fields_:
            raise RescoreError(f"a group (second field) for utterance '{u}'", path=path, got="none")
        out[u] = fields_[0]
    return out


def _finite(x: Optional[float]) -> Optional[float]:
    """x, or None for NaN/inf (JSON has neither)."""
    return float(x) if x is not None and math.isfinite(x) else None


def _resample_counts(n_units: int, draws: int, seed: int):
    """(draws, n_units) float64: how often each unit is drawn in each bootstrap sample of
    n_units units drawn with replacement; a sample's sums are then one matrix product."""
    import numpy as np

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_units, size=(draws, n_units))  # (draws, G) the units drawn
    flat = (idx + n_units * np.arange(draws)[:, None]).ravel()
    return np.bincount(flat, minlength=draws * n_units).reshape(draws, n_units).astype(np.float64)


def _bootstrap(counts, errors, ref_words, confidence: float) -> Tuple[List[Optional[list]], List[dict]]:
    """Paired bootstrap of S systems on the same resampled units.

    counts (draws, G) from _resample_counts; errors (S, G) errors of each system per unit;
    ref_words (G,) reference words per unit. Returns (per system its WER's confidence interval,
    per system s >= 1 the statistics of WER_s - WER_0): wer_diff (observed, points), ci,
    p_value (two-sided: the share of draws whose difference, centred on the observed one, is at
    least as far from 0 as the observed one; Efron & Tibshirani 1993 §16.4, with +1 in numerator
    and denominator), prob_improvement (share of draws with WER_s < WER_0: Bisani & Ney's
    "probability of improvement", Kaldi's "probability of Set2 improving Set1").
    Intervals and p are None where no draw has reference words.
    """
    import numpy as np

    err = counts @ errors.T  # (draws, S) errors per system in each draw
    ref = counts @ ref_words  # (draws,)
    ok = ref > 0
    wer = 100.0 * err[ok] / ref[ok, None]  # (n_ok, S)
    n_ok = int(ok.sum())
    obs_ref = float(ref_words.sum())
    obs = 100.0 * errors.sum(axis=1) / obs_ref if obs_ref > 0 else np.zeros(errors.shape[0])
    q = [50.0 * (1.0 - confidence), 50.0 * (1.0 + confidence)]

    def ci(x):
        return [float(v) for v in np.percentile(x, q)] if n_ok else None

    wer_ci = [ci(wer[:, s]) for s in range(errors.shape[0])]
    diffs = []
    for s in range(1, errors.shape[0]):
        d = wer[:, s] - wer[:, 0]
        o = float(obs[s] - obs[0])
        row = {"wer_diff": o, "ci": ci(d), "p_value": None, "prob_improvement": None}
        if n_ok:
            far = np.abs(d - o) >= abs(o) - 1e-9
            row["p_value"] = float((1 + far.sum()) / (n_ok + 1))
            row["prob_improvement"] = float((d < 0).mean())
        diffs.append(row)
    return wer_ci, diffs


def compare_systems(refs: Mapping[str, Sequence[str]], systems: Mapping[str, Mapping[str, Sequence[str]]], *,
                    train_counts: Optional[Counter] = None, num_buckets: int = 10,
                    groups: Optional[Mapping[str, str]] = None, grouping: Optional[str] = None,
                    draws: int = 1000, seed: int = 0, confidence: float = 0.95,
                    allow_missing: bool = False, paths: Optional[Mapping[str, str]] = None,
                    ref_path: Optional[PathLike] = None) -> dict:
    """Score systems (name -> utt -> tokens; the first is the baseline) on refs and compare each
    further one with the baseline. JSON-ready (no NaN or inf: None instead).

    groups: utt -> recording/speaker; the bootstrap then resamples whole groups (errors of one
    recording are correlated), else utterances. grouping names them (e.g. "segments").
    draws: bootstrap samples (0: no bootstrap). train_counts adds the rare-word bucket table.

    Returns {"num_utts", "ref_words", "baseline", "systems": [{"name", "path", "wer", "errors",
    "substitutions", "deletions", "insertions", "ref_words", "num_utts", "wer_ci"}],
    "differences": [{"system", "baseline", "wer_diff", "relative_change" (percent of the
    baseline's WER), "ci", "p_value", "prob_improvement"}], "bootstrap": {"draws", "seed",
    "confidence", "unit" (utterance | group), "grouping", "units"} or None,
    "buckets": [{"bucket", "train_count_range", "ref_tokens", "systems": {name: {"substitutions",
    "deletions", "insertions", "errors", "wer"}}, "differences": {name: {"wer_diff", "ci",
    "p_value", "prob_improvement"}}}] or None, "bucket_rule"}.
    """
    import numpy as np

    names = list(systems)
    if not names:
        raise ValueError("at least one system")
    if draws < 0 or not 0.0 < confidence < 1.0:
        raise ValueError("draws >= 0 and 0 < confidence < 1")
    paths = dict(paths or {})
    scored = {n: align(refs, systems[n], allow_missing=allow_missing, ref_path=ref_path, hyp_path=paths.get(n))
              for n in names}
    utts = list(refs)
    if groups is not None:
        missing = [u for u in utts if u not in groups]
        if missing:
            raise RescoreError(f"a group for every utterance; {len(missing)} missing, e.g. '{missing[0]}'",
                               path=grouping)
        unit_of: Dict[str, int] = {}
        index: Dict[str, int] = {}
        for u in utts:
            unit_of[u] = index.setdefault(groups[u], len(index))
        n_units = len(index)
    else:
        unit_of = {u: i for i, u in enumerate(utts)}
        n_units = len(utts)
    buckets = (rare_word_buckets(train_counts, (w for r in refs.values() for w in r), num_buckets)
               if train_counts is not None else None)
    K = buckets.n if buckets else 0
    S = len(names)
    ref_u = np.zeros(n_units)  # (G,) reference words per unit
    err_u = np.zeros((S, n_units))  # (S, G) errors per system and unit
    bref_u = np.zeros((K, n_units))  # (K, G) per bucket
    berr_u = np.zeros((S, K, n_units))  # (S, K, G)
    for u in utts:
        g = unit_of[u]
        ref_u[g] += len(refs[u])
        if buckets:
            for w in refs[u]:
                bref_u[buckets[w], g] += 1
    for s, n in enumerate(names):
        for u, a in scored[n][1].items():
            g = unit_of[u]
            err_u[s, g] += a.substitutions + a.deletions + len(a.inserted)
            if buckets:
                for w in (*a.substituted, *a.deleted, *a.inserted):
                    berr_u[s, buckets[w], g] += 1

    sys_rows = []
    for n in names:
        d = scored[n][0].as_dict()
        d["wer"] = _finite(d["wer"])
        sys_rows.append({"name": n, "path": paths.get(n), **d, "wer_ci": None})
    base = sys_rows[0]
    diffs = []
    for r in sys_rows[1:]:
        dw = None if r["wer"] is None or base["wer"] is None else r["wer"] - base["wer"]
        rel = 100.0 * dw / base["wer"] if dw is not None and base["wer"] else None
        diffs.append({"system": r["name"], "baseline": base["name"], "wer_diff": dw, "relative_change": rel,
                      "ci": None, "p_value": None, "prob_improvement": None})
    boot = None
    counts = None
    if draws > 0 and n_units > 0:
        counts = _resample_counts(n_units, draws, seed)
        wer_ci, bd = _bootstrap(counts, err_u, ref_u, confidence)
        for r, c in zip(sys_rows, wer_ci):
            r["wer_ci"] = c
        for d, b in zip(diffs, bd):
            d.update({k: b[k] for k in ("ci", "p_value", "prob_improvement")})
        boot = {"draws": draws, "seed": seed, "confidence": confidence,
                "unit": "group" if groups is not None else "utterance",
                "grouping": grouping if groups is not None else "utterance", "units": n_units}

    bucket_rows = None
    if buckets:
        per_sys = {n: bucket_wer(scored[n][1], buckets) for n in names}
        bucket_rows = []
        for k in range(K):
            first = per_sys[names[0]][k]
            row = {"bucket": k, "train_count_range": first["train_count_range"], "ref_tokens": first["ref_tokens"],
                   "systems": {n: {f: per_sys[n][k][f] for f in ("substitutions", "deletions", "insertions",
                                                                  "errors", "wer")} for n in names},
                   "differences": {}}
            bd = None
            if counts is not None:
                _, bd = _bootstrap(counts, berr_u[:, k, :], bref_u[k], confidence)
            for s, n in enumerate(names[1:]):
                d = {"wer_diff": row["systems"][n]["wer"] - row["systems"][names[0]]["wer"], "ci": None,
                     "p_value": None, "prob_improvement": None}
                if bd is not None:
                    d.update({f: bd[s][f] for f in ("ci", "p_value", "prob_improvement")})
                row["differences"][n] = d
            bucket_rows.append(row)
    return {"num_utts": len(utts), "ref_words": int(ref_u.sum()), "ref_text": None if ref_path is None else str(ref_path),
            "baseline": names[0], "systems": sys_rows, "differences": diffs, "bootstrap": boot,
            "buckets": bucket_rows, "bucket_rule": BUCKET_RULE if buckets else None}


FIRST_PASS, RESCORED = "first-pass", "rescored"


def compare_nbest(nbest, one_best: Mapping[str, Sequence[str]], *, train_counts: Optional[Counter] = None,
                  num_buckets: int = 10, draws: int = 1000, seed: int = 0) -> dict:
    """The report's comparison of an N-best set's first pass (each utterance's rank 1) with its
    rescored 1-best (utt -> words), by compare_systems; the bootstrap resamples whole
    conversations when the set has them (segments or utt2spk), else utterances."""
    first = {u.id: u.hyps[0].words for u in nbest.utterances()}
    groups = None
    if nbest.grouping != "utterance":
        groups = {u.id: c.id for c in nbest.conversations for u in c.utterances}
    return compare_systems(nbest.refs, {FIRST_PASS: first, RESCORED: one_best}, train_counts=train_counts,
                           num_buckets=num_buckets, groups=groups, grouping=nbest.grouping, draws=draws,
                           seed=seed)


def nbest_chart_title(nbest) -> str:
    """'WER per rare-word bucket on exp/mini/nbest/test (96 utterances): first-pass vs rescored'."""
    return (f"WER per rare-word bucket on {nbest.path} ({nbest.num_utts} utterances): "
            f"{FIRST_PASS} vs {RESCORED}")


def _fmt(x: Optional[float], spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _fmt_ci(ci: Optional[list], spec: str = "+.2f") -> str:
    return "-" if ci is None else f"[{ci[0]:{spec}}, {ci[1]:{spec}}]"


def _fmt_p(p: Optional[float]) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def describe_bootstrap(boot: Optional[dict], baseline: str) -> str:
    """One line saying how the intervals were drawn."""
    if not boot:
        return "no bootstrap (--bootstrap 0)"
    unit = ("utterances" if boot["unit"] == "utterance"
            else f"{'recordings' if boot['grouping'] == 'segments' else 'groups'} (by {boot['grouping']})")
    return (f"paired bootstrap (Bisani & Ney 2004): {boot['draws']} draws of the {boot['units']} {unit} with "
            f"replacement, seed {boot['seed']}; {100 * boot['confidence']:g}% CI of WER(system) - WER({baseline}) "
            f"in points; p two-sided; P(better) = share of draws where the system's WER is lower")


def format_comparison(cmp: dict) -> str:
    """The readable comparison: one line per system, then the per-bucket table (rows add up to
    the total line, which is the corpus figure)."""
    names = [s["name"] for s in cmp["systems"]]
    base = cmp["baseline"]
    w = max(8, *(len(n) for n in names))
    conf = int(round(100 * cmp["bootstrap"]["confidence"])) if cmp["bootstrap"] else 95
    lines = [f"{cmp['num_utts']} utterances, {cmp['ref_words']} reference words; baseline: {base}",
             f"{'system':<{w}} {'%WER':>6} {'errors':>7} {'sub':>5} {'del':>5} {'ins':>5} {'rel.change':>10} "
             f"{'diff':>6} {str(conf) + '% CI of diff':>16} {'p':>6} {'P(better)':>9}"]
    diffs = {d["system"]: d for d in cmp["differences"]}
    for s in cmp["systems"]:
        d = diffs.get(s["name"])
        line = (f"{s['name']:<{w}} {_fmt(s['wer'], '6.2f', 'inf'):>6} {s['errors']:>7} {s['substitutions']:>5} "
                f"{s['deletions']:>5} {s['insertions']:>5}")
        if d is None:
            line += f" {'(baseline)':>10}"
        else:
            rel = _fmt(d["relative_change"], "+.1f")
            poi = "-" if d["prob_improvement"] is None else f"{100 * d['prob_improvement']:.1f} %"
            line += (f" {rel + ' %' if d['relative_change'] is not None else rel:>10} {_fmt(d['wer_diff'], '+6.2f'):>6} "
                     f"{_fmt_ci(d['ci']):>16} {_fmt_p(d['p_value']):>6} "
                     f"{poi:>9}")
        lines.append(line.rstrip())
    lines.append(describe_bootstrap(cmp["bootstrap"], base))
    if cmp.get("buckets"):
        lines += ["", "per rare-word bucket (0 = rarest in the LM training text; train count = range of the "
                      "training counts of its reference words):"]
        top = f"{'':>6} {'':>13} {'':>7}"
        head = f"{'bucket':>6} {'train count':>13} {'ref tok':>7}"
        for n in names:
            span = 14 if n == base else 14 + 7 + 17
            top += f" | {n[:span]:^{span}}"
            head += f" | {'errors':>7} {'WER':>6}"
            if n != base:
                head += f" {'diff':>6} {'CI of diff':>16}"
        lines += [top.rstrip(), head]
        tot_ref = 0
        tot_err = {n: 0 for n in names}
        for r in cmp["buckets"]:
            tot_ref += r["ref_tokens"]
            line = f"{r['bucket']:>6} {_range_label(r['train_count_range']):>13} {r['ref_tokens']:>7}"
            for n in names:
                x = r["systems"][n]
                tot_err[n] += x["errors"]
                line += f" | {x['errors']:>7} {x['wer']:>6.2f}"
                if n != base:
                    d = r["differences"][n]
                    line += f" {d['wer_diff']:>+6.2f} {_fmt_ci(d['ci']):>16}"
            lines.append(line)
        line = f"{'total':>6} {'':>13} {tot_ref:>7}"
        for n in names:
            line += f" | {tot_err[n]:>7} {100.0 * tot_err[n] / max(tot_ref, 1):>6.2f}"
            if n != base:
                d = diffs[n]
                line += f" {_fmt(d['wer_diff'], '+6.2f'):>6} {_fmt_ci(d['ci']):>16}"
        lines.append(line)
        lines.append(cmp["bucket_rule"])
    return "\n".join(lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: PathLike) -> None:
    from rescore.io.kaldi import atomic_output

    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)


def bucket_ticks(ranges: Sequence[Optional[Sequence[int]]], total: Optional[str] = None) -> List[str]:
    """x tick labels of a bucket chart: the bucket and its training-count range on two lines,
    then ``total`` (e.g. "all") when given."""
    ticks = [f"{b}\n{_range_label(r, short=True)}" for b, r in enumerate(ranges)]
    return ticks + ([f"{total}\n"] if total else [])


def plot_bucket_series(path: PathLike, ticks: Sequence[str], series: Mapping[str, Sequence[float]], *,
                       title: str, ylabel: str,
                       diffs: Optional[Mapping[str, Tuple[Sequence[float], Optional[Sequence[Optional[Sequence[float]]]]]]] = None,
                       diff_ylabel: str = "difference", diff_title: str = "", separate_last: bool = False,
                       diff_color: Optional[str] = None) -> None:
    """The one bucket chart (PNG): above, grouped bars of each series (legend: the series'
    names); below, when diffs is given, each difference series as bars with optional interval
    whiskers (name -> (values, [lo, hi] per bar or None)), a line at 0. separate_last draws a
    dotted line before the last group (an "all" group beside the buckets). The difference bars
    take the colour of the series they belong to (the last ones), or diff_color."""
    import textwrap

    plt = _pyplot()
    xs = list(range(len(ticks)))
    panels = 2 if diffs else 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 7.5 if diffs else 4.5), sharex=True, squeeze=False)
    ax = axes[0][0]
    width = 0.8 / max(1, len(series))
    top = 0.0
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], list(vals), width, label=name)
        top = max([top, *vals])
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)  # room for the legend above the bars
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper center", ncol=len(series), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(textwrap.fill(title, 95))
    if diffs:
        ax2 = axes[1][0]
        width = 0.8 / len(diffs)
        for i, (name, (vals, cis)) in enumerate(diffs.items()):
            vals = [v or 0.0 for v in vals]
            yerr = None
            if cis is not None:
                yerr = [[v - c[0] if c else 0.0 for v, c in zip(vals, cis)],
                        [c[1] - v if c else 0.0 for v, c in zip(vals, cis)]]
            ax2.bar([x + (i - (len(diffs) - 1) / 2) * width for x in xs], vals, width, yerr=yerr, capsize=3,
                    color=diff_color or f"C{len(series) - len(diffs) + i}", label=name)
        ax2.axhline(0, color="black", linewidth=0.8)
        ax2.set_ylabel(diff_ylabel)
        if len(diffs) > 1 or not diff_title:
            ax2.legend(loc="best", fontsize=9)
        ax2.grid(axis="y", alpha=0.3)
        if diff_title:
            ax2.set_title(diff_title, fontsize=10)
    for row in axes:
        if separate_last:
            row[0].axvline(len(xs) - 1.5, color="grey", linewidth=0.8, linestyle=":")
    bottom = axes[-1][0]
    bottom.set_xticks(xs)
    bottom.set_xticklabels(list(ticks), fontsize=8)
    bottom.set_xlabel("rare-word bucket (0 = rarest) and the training counts of its words")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_comparison(cmp: dict, path: PathLike, title: str) -> None:
    """PNG of a compare_systems result with buckets: above, each system's WER per bucket and
    overall ("all") as grouped bars; below, each further system's difference from the baseline
    with its bootstrap CI as whiskers (< 0: fewer errors than the baseline)."""
    if not cmp.get("buckets"):
        raise RescoreError("a per-bucket comparison (the LM training text) for the chart")
    names = [s["name"] for s in cmp["systems"]]
    base = cmp["baseline"]
    rows = cmp["buckets"]
    series = {n: [r["systems"][n]["wer"] for r in rows] + [s["wer"] or 0.0]
              for n, s in zip(names, cmp["systems"])}
    diffs = None
    if len(names) > 1:
        total = {d["system"]: d for d in cmp["differences"]}
        diffs = {f"{n} - {base}": ([r["differences"][n]["wer_diff"] for r in rows] + [total[n]["wer_diff"]],
                                   [r["differences"][n]["ci"] for r in rows] + [total[n]["ci"]])
                 for n in names[1:]}
    boot = cmp["bootstrap"]
    conf = f"whiskers: {100 * boot['confidence']:g}% bootstrap CI" if boot else "no bootstrap CI"
    plot_bucket_series(path, bucket_ticks([r["train_count_range"] for r in rows], "all"), series, title=title,
                       ylabel="WER (%)\n(sub + del + ins) / ref tokens", diffs=diffs,
                       diff_ylabel=f"WER difference (points)\n{conf}",
                       diff_title=f"difference from {base} (< 0: fewer errors than {base})", separate_last=True)


def wer_report(ref_text: PathLike, hyp_text: PathLike, *, train_text: Optional[PathLike] = None,
               num_buckets: int = 10, allow_missing: bool = False, train_counts: Optional[Counter] = None) -> dict:
    """WER of two Kaldi text files (``utt w1 w2 ...``) keyed by utterance, with the rare-word
    bucket table when train_text (or its counts, train_counts) is given. Missing or extra
    utterances are an error unless allow_missing (then a missing hypothesis counts as empty, an
    extra one is ignored). JSON-ready: a WER of no reference words with errors is None."""
    from rescore.io.kaldi import read_text_table

    refs = read_text_table(ref_text, "tokens").as_dict()
    hyps = read_text_table(hyp_text, "tokens").as_dict()
    check_scorable(refs, hyps, ref_text, hyp_text)
    stats, alignments = align(refs, hyps, allow_missing=allow_missing, ref_path=ref_text, hyp_path=hyp_text)  # type: ignore[arg-type]
    report = {**stats.as_dict(), "ref_text": str(ref_text), "hyp_text": str(hyp_text),
              "missing_hyps": sum(1 for u in refs if u not in hyps),
              "extra_hyps": sum(1 for u in hyps if u not in refs)}
    report["wer"] = _finite(report["wer"])
    if train_counts is None and train_text is not None:
        from rescore.vocab import count_words, read_sentences

        train_counts = count_words(read_sentences(train_text))
    if train_counts is not None:
        buckets = rare_word_buckets(train_counts, (w for r in refs.values() for w in r), num_buckets)
        report["buckets"] = bucket_wer(alignments, buckets)
    return report


def format_wer_report(report: dict) -> str:
    """Kaldi compute-wer style line, plus the bucket table when present."""
    lines = [f"%WER {_fmt(report['wer'], '.2f', 'inf')} [ {report['errors']} / {report['ref_words']}, "
             f"{report['insertions']} ins, {report['deletions']} del, {report['substitutions']} sub ]  "
             f"({report['num_utts']} utterances)"]
    if "buckets" in report:
        lines += ["", "per rare-word bucket (0 = rarest in training text):", format_bucket_table(report["buckets"])]
    return "\n".join(lines)


def nbest_report(nbest, best: Mapping[str, int], *, params: Mapping[str, float], train_counts=None,
                 num_buckets: int = 10, extra: Optional[dict] = None) -> dict:
    """The report of a rescored N-best set (``rescore.nbest.NbestSet`` with references): WER of
    the chosen 1-best (``best``: utt -> 0-based rank), rank-1 and oracle WER, how many 1-bests
    changed, the setting, the per rare-word bucket table when train_counts is given, and the
    first pass against the rescored 1-best (compare_nbest)."""
    if nbest.refs is None:
        raise RescoreError("references (a data dir with 'text')", path=nbest.path)
    one_best = {u.id: u.hyps[best[u.id]].words for u in nbest.utterances()}
    stats, alignments = align(nbest.refs, one_best)
    nbests = {u.id: [h.words for h in u.hyps] for u in nbest.utterances()}
    report = {
        **stats.as_dict(),
        "num_hyps": nbest.num_hyps,
        "num_conversations": len(nbest.conversations),
        "grouping": nbest.grouping,
        "oracle_wer": oracle_wer(nbest.refs, nbests),
        "first_rank_wer": align(nbest.refs, {u.id: u.hyps[0].words for u in nbest.utterances()})[0].wer,
        "changed_utts": sum(1 for i in best.values() if i != 0),
        "params": dict(params),
        "nbest_dir": nbest.path,
        **(extra or {}),
    }
    if train_counts is not None:
        buckets = rare_word_buckets(train_counts, (w for r in nbest.refs.values() for w in r), num_buckets)
        report["buckets"] = bucket_wer(alignments, buckets)
    report["comparison"] = compare_nbest(nbest, one_best, train_counts=train_counts, num_buckets=num_buckets)
    return report


def format_report(report: dict) -> str:
    """The readable report.txt of rescore-nbest (also what the commands print)."""
    p = report.get("params", {})
    lines = [
        f"N-best dir   {report.get('nbest_dir', '')}",
        f"setting      weight {p.get('weight')}  inv_acwt {p.get('inv_acwt')}  wip {p.get('wip')}",
        *([f"NN LMs       " + "  ".join(f"{m} ({s:g})" for m, s in zip(report["models"], p.get("mix", [])))]
          if report.get("models") else []),
        f"utterances   {report['num_utts']}  hypotheses {report['num_hyps']}  conversations "
        f"{report.get('num_conversations')} (by {report.get('grouping')})",
        f"%WER {report['wer']:.2f} [ {report['errors']} / {report['ref_words']}, {report['insertions']} ins, "
        f"{report['deletions']} del, {report['substitutions']} sub ]",
        f"rank-1 WER   {report['first_rank_wer']:.2f} %   oracle WER {report['oracle_wer']:.2f} %   "
        f"1-best changed in {report['changed_utts']} utterances",
    ]
    if "comparison" in report:
        lines += ["", "first pass (rank 1 of the N-best) against rescored:", format_comparison(report["comparison"])]
    return "\n".join(lines)
