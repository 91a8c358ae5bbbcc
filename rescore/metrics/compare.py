"""Two or more systems on the same references: WER with S/D/I, the relative change against the
first (the baseline), and a paired bootstrap of each difference (Bisani & Ney, "Bootstrap
estimates for confidence intervals in ASR performance evaluation", ICASSP 2004; Kaldi's
compute-wer-bootci): resample whole utterances, or whole recordings/speakers when a grouping is
given, with replacement; per draw the WER of every system on the same sample.

A bootstrap knows only the units it has: below ``MIN_BOOTSTRAP_UNITS`` (10) utterances or
groups its intervals are too narrow and its p-values too small to trust (a warning in the log,
``"reliable": false`` and a note in the report); with one unit every draw is the same sample, so
there is no interval, p-value or P(better) at all (None, shown as "-").

The result is a :class:`Comparison`; its ``as_dict()`` is what the reports write as JSON.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from rescore.errors import RescoreError
from rescore.metrics.buckets import BUCKET_RULE, BucketMap, bucket_wer, rare_word_buckets
from rescore.metrics.record import JsonRecord
from rescore.metrics.wer import Alignment, WerStats, align

PathLike = Union[str, Path]
log = logging.getLogger(__name__)

MIN_BOOTSTRAP_UNITS = 10  # fewer utterances or groups: the bootstrap's figures are unreliable


@dataclass
class CorpusFigures(JsonRecord):
    """The corpus figures of a 1-best, the first fields of the reports' records: wer (percent),
    the errors with S/D/I, the reference words and the utterances (:func:`corpus_figures`)."""

    wer: Optional[float]
    errors: int
    substitutions: int
    deletions: int
    insertions: int
    ref_words: int
    num_utts: int


def corpus_figures(stats: WerStats, *, finite: bool = True) -> tuple:
    """CorpusFigures' fields from stats, in their order; with finite, a wer that is not finite is None."""
    return (_finite(stats.wer) if finite else stats.wer, stats.errors, stats.substitutions, stats.deletions,
            stats.insertions, stats.ref_words, stats.num_utts)


@dataclass
class SystemScore(CorpusFigures):
    """One system's corpus figures (in the JSON after its name and path); wer (percent) is None
    where it is not finite, wer_ci its bootstrap interval (None without a bootstrap)."""

    name: str = ""
    path: Optional[str] = None
    wer_ci: Optional[list] = None

    @classmethod
    def of(cls, name: str, path: Optional[str], stats: WerStats) -> "SystemScore":
        return cls(*corpus_figures(stats), name=name, path=path)

    def as_dict(self) -> dict:
        d = super().as_dict()
        return {"name": d.pop("name"), "path": d.pop("path"), **d}


@dataclass
class Difference(JsonRecord):
    """WER(system) - WER(baseline) in points; relative_change in percent of the baseline's WER;
    ci, p_value and prob_improvement from the bootstrap (None without one)."""

    system: str
    baseline: str
    wer_diff: Optional[float]
    relative_change: Optional[float]
    ci: Optional[list] = None
    p_value: Optional[float] = None
    prob_improvement: Optional[float] = None


@dataclass
class BootstrapInfo(JsonRecord):
    """How the bootstrap drew: draws samples of units units (unit: utterance | group; grouping:
    what the groups are, e.g. segments). reliable: at least MIN_BOOTSTRAP_UNITS units, else
    note says why not (with one unit nothing is drawn)."""

    draws: int
    seed: int
    confidence: float
    unit: str
    grouping: Optional[str]
    units: int
    reliable: bool = True
    note: Optional[str] = None

    def unit_names(self) -> Tuple[str, str]:
        """(singular, plural) of the units: 'utterance', or 'recording (by segments)', ..."""
        if self.unit == "utterance":
            return "utterance", "utterances"
        kind = "recording" if self.grouping == "segments" else "group"
        return f"{kind} (by {self.grouping})", f"{kind}s (by {self.grouping})"

    def check_sample(self) -> None:
        """Mark (and log) a sample too small to trust."""
        one, many = self.unit_names()
        if self.units >= MIN_BOOTSTRAP_UNITS:
            return
        self.reliable = False
        if self.units == 1:
            self.note = (f"one {one} only: the bootstrap cannot resample it (every draw is the same), so there is "
                         f"no confidence interval, p-value or P(better)")
        else:
            self.note = (f"only {self.units} {many}: bootstrap intervals, p-values and P(better) from fewer than "
                         f"{MIN_BOOTSTRAP_UNITS} are unreliable (too narrow, too confident)")
        log.warning("%s", self.note)


@dataclass
class BucketDifference(JsonRecord):
    """A system's difference from the baseline on one bucket's reference tokens."""

    wer_diff: float
    ci: Optional[list] = None
    p_value: Optional[float] = None
    prob_improvement: Optional[float] = None


@dataclass
class BucketComparison(JsonRecord):
    """One rare-word bucket: per system (name -> substitutions, deletions, insertions, errors,
    wer) and per further system its difference from the baseline."""

    bucket: int
    train_count_range: Optional[list]
    ref_tokens: int
    systems: Dict[str, dict]
    differences: Dict[str, BucketDifference]


@dataclass
class Comparison(JsonRecord):
    """compare_systems' result: the systems in order (the first is the baseline), each further
    one's difference, the bootstrap's setting (None without one) and the per-bucket rows (None
    without training counts)."""

    num_utts: int
    ref_words: int
    ref_text: Optional[str]
    baseline: str
    systems: List[SystemScore]
    differences: List[Difference]
    bootstrap: Optional[BootstrapInfo] = None
    buckets: Optional[List[BucketComparison]] = None
    bucket_rule: Optional[str] = None


def read_groups(path: PathLike) -> Dict[str, str]:
    """utt -> group from a Kaldi table whose second field names the group: ``segments``
    (utt reco start end: recordings) or ``utt2spk`` (utt spk: speakers)."""
    from rescore.io.kaldi import read_text_table  # (lazy: keeps rescore.io out of the commands' start-up)

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




def _units(utts: Sequence[str], groups: Optional[Mapping[str, str]],
           grouping: Optional[str]) -> Tuple[Dict[str, int], int]:
    """(utt -> bootstrap unit index, number of units): one unit per group (in order of first
    sight) when groups are given, else one per utterance."""
    if groups is None:
        return {u: i for i, u in enumerate(utts)}, len(utts)
    missing = [u for u in utts if u not in groups]
    if missing:
        raise RescoreError(f"a group for every utterance; {len(missing)} missing, e.g. '{missing[0]}'",
                           path=grouping)
    unit_of: Dict[str, int] = {}
    index: Dict[str, int] = {}
    for u in utts:
        unit_of[u] = index.setdefault(groups[u], len(index))
    return unit_of, len(index)


@dataclass
class _UnitCounts:
    """Per bootstrap unit: ref (G,) reference words, err (S, G) errors of each system, bref (K, G)
    reference words of each bucket, berr (S, K, G) errors of each system in each bucket."""

    ref: Any
    err: Any
    bref: Any
    berr: Any

    @classmethod
    def of(cls, refs: Mapping[str, Sequence[str]], alignments: Sequence[Mapping[str, Alignment]],
           unit_of: Mapping[str, int], n_units: int, buckets: Optional[BucketMap]) -> "_UnitCounts":
        K = buckets.n if buckets else 0
        S = len(alignments)
        c = cls(np.zeros(n_units), np.zeros((S, n_units)), np.zeros((K, n_units)), np.zeros((S, K, n_units)))
        for u in refs:
            g = unit_of[u]
            c.ref[g] += len(refs[u])
            if buckets:
                for w in refs[u]:
                    c.bref[buckets[w], g] += 1
        for s, scored in enumerate(alignments):
            for u, a in scored.items():
                g = unit_of[u]
                c.err[s, g] += a.substitutions + a.deletions + len(a.inserted)
                if buckets:
                    for w in (*a.substituted, *a.deleted, *a.inserted):
                        c.berr[s, buckets[w], g] += 1
        return c


def _differences(systems: Sequence[SystemScore]) -> List[Difference]:
    """Each further system against the first, without the bootstrap's figures."""
    base = systems[0]
    diffs = []
    for r in systems[1:]:
        dw = None if r.wer is None or base.wer is None else r.wer - base.wer
        rel = 100.0 * dw / base.wer if dw is not None and base.wer else None
        diffs.append(Difference(r.name, base.name, dw, rel))
    return diffs


def _with_bootstrap(diff, boot: dict):
    """diff (a Difference or BucketDifference) with the bootstrap's ci, p_value, prob_improvement."""
    diff.ci, diff.p_value, diff.prob_improvement = boot["ci"], boot["p_value"], boot["prob_improvement"]
    return diff


def _bucket_comparisons(names: Sequence[str], alignments: Sequence[Mapping[str, Alignment]], buckets: BucketMap,
                        units: _UnitCounts, counts, confidence: float) -> List[BucketComparison]:
    """The per-bucket rows: each system's bucket_wer, each further one's difference from the
    first (bootstrapped on the same draws, counts, when there are draws)."""
    per_sys = {n: bucket_wer(a, buckets) for n, a in zip(names, alignments)}
    rows = []
    for k in range(buckets.n):
        first = per_sys[names[0]][k]
        systems = {n: {f: per_sys[n][k][f] for f in ("substitutions", "deletions", "insertions", "errors", "wer")}
                   for n in names}
        bd = None
        if counts is not None:
            _, bd = _bootstrap(counts, units.berr[:, k, :], units.bref[k], confidence)
        diffs = {}
        for s, n in enumerate(names[1:]):
            d = BucketDifference(systems[n]["wer"] - systems[names[0]]["wer"])
            diffs[n] = _with_bootstrap(d, bd[s]) if bd is not None else d
        rows.append(BucketComparison(k, first["train_count_range"], first["ref_tokens"], systems, diffs))
    return rows


def compare_systems(refs: Mapping[str, Sequence[str]], systems: Mapping[str, Mapping[str, Sequence[str]]], *,
                    train_counts: Optional[Counter] = None, num_buckets: int = 10,
                    groups: Optional[Mapping[str, str]] = None, grouping: Optional[str] = None,
                    draws: int = 1000, seed: int = 0, confidence: float = 0.95,
                    allow_missing: bool = False, paths: Optional[Mapping[str, str]] = None,
                    ref_path: Optional[PathLike] = None, aligned: Optional[Sequence[tuple]] = None,
                    buckets: Optional[BucketMap] = None) -> Comparison:
    """Score systems (name -> utt -> tokens; the first is the baseline) on refs and compare each
    further one with the baseline. JSON-ready (no NaN or inf: None instead).

    groups: utt -> recording/speaker; the bootstrap then resamples whole groups (errors of one
    recording are correlated), else utterances. grouping names them (e.g. "segments").
    draws: bootstrap samples (0: no bootstrap). train_counts adds the rare-word bucket table.
    aligned, buckets: what the caller has already computed, so as not to do it twice: each
    system's align(refs, system) (WerStats, alignments), and rare_word_buckets(train_counts,
    the reference tokens, num_buckets).
    """
    names = list(systems)
    if not names:
        raise ValueError("at least one system")
    if draws < 0 or not 0.0 < confidence < 1.0:
        raise ValueError("draws >= 0 and 0 < confidence < 1")
    paths = dict(paths or {})
    scored = list(aligned) if aligned is not None else [
        align(refs, systems[n], allow_missing=allow_missing, ref_path=ref_path, hyp_path=paths.get(n)) for n in names]
    alignments = [a for _, a in scored]
    unit_of, n_units = _units(list(refs), groups, grouping)
    if buckets is None and train_counts is not None:
        buckets = rare_word_buckets(train_counts, (w for r in refs.values() for w in r), num_buckets)
    units = _UnitCounts.of(refs, alignments, unit_of, n_units, buckets)
    sys_rows = [SystemScore.of(n, paths.get(n), stats) for n, (stats, _) in zip(names, scored)]
    cmp = Comparison(len(refs), int(units.ref.sum()), None if ref_path is None else str(ref_path), names[0],
                     sys_rows, _differences(sys_rows), bucket_rule=BUCKET_RULE if buckets else None)
    counts = None
    if draws > 0 and n_units > 0:
        cmp.bootstrap = BootstrapInfo(draws, seed, confidence, "group" if groups is not None else "utterance",
                                      grouping if groups is not None else "utterance", n_units)
        cmp.bootstrap.check_sample()
    if cmp.bootstrap is not None and n_units > 1:
        counts = _resample_counts(n_units, draws, seed)
        wer_ci, bd = _bootstrap(counts, units.err, units.ref, confidence)
        for r, c in zip(sys_rows, wer_ci):
            r.wer_ci = c
        for d, b in zip(cmp.differences, bd):
            _with_bootstrap(d, b)
    if buckets:
        cmp.buckets = _bucket_comparisons(names, alignments, buckets, units, counts, confidence)
    return cmp


FIRST_PASS, RESCORED = "first-pass", "rescored"


@dataclass
class NbestWords:
    """An N-best set as the metrics read it: words, no costs (rescore.nbest.sets.NbestSet.words()
    makes one). path: where it was read; hyps: utt -> the words of its hypotheses in rank order,
    the utterances in carry order; refs: utt -> reference words (None: no references); grouping:
    how its utterances form conversations (segments | utt2spk | utterance); conversation: utt ->
    the id of its conversation."""

    path: str
    hyps: Dict[str, List[Sequence[str]]]
    refs: Optional[Dict[str, List[str]]]
    grouping: str
    conversation: Dict[str, str]


def compare_nbest(nbest: NbestWords, one_best: Mapping[str, Sequence[str]], *,
                  train_counts: Optional[Counter] = None, num_buckets: int = 10, draws: int = 1000, seed: int = 0,
                  aligned: Optional[Sequence[tuple]] = None, buckets: Optional[BucketMap] = None) -> Comparison:
    """The report's comparison of an N-best set's first pass (each utterance's rank 1) with its
    rescored 1-best (utt -> words), by compare_systems (aligned, buckets: its, of the first pass
    and the 1-best); the bootstrap resamples whole conversations when the set has them
    (segments or utt2spk), else utterances."""
    first = {u: hyps[0] for u, hyps in nbest.hyps.items()}
    groups = nbest.conversation if nbest.grouping != "utterance" else None
    return compare_systems(nbest.refs, {FIRST_PASS: first, RESCORED: one_best}, train_counts=train_counts,
                           num_buckets=num_buckets, groups=groups, grouping=nbest.grouping, draws=draws,
                           seed=seed, aligned=aligned, buckets=buckets)
