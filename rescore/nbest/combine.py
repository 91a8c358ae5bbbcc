"""Interpolation of an N-best set's costs, 1-best selection and the tuning sweep.

The cost formula itself lives in rescore.nbest.interp; this module applies it to loaded N-best sets
(rescore.nbest.sets) and their NN LM costs, checked once into :class:`NnCosts` (K >= 0 models, one
entry each, mixed by ``Params.mix``: rescore.nbest.interp.mixed_nn_cost), the one input of the 1-best,
the graph costs, the WER sweep and the writers. Writing the outputs and the report is the job
layer's (rescore.jobs.nbest) and the report's content is rescore.metrics'.
"""

from __future__ import annotations

import copy
import itertools
import logging
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from rescore.nbest import interp
from rescore.errors import RescoreError, check
from rescore.io.kaldi import read_nn_costs, read_table
from rescore.metrics.wer import word_errors, word_errors_of_each
from rescore.nbest.interp import Params, total_cost
from rescore.formats.kaldi import kaldi_dir
from rescore.nbest.sets import Hypothesis, NbestSet
from rescore.progress import progress  # a bar on a terminal, log lines in a log

log = logging.getLogger(__name__)
PathLike = Union[str, Path]
NnCostMap = Mapping[str, Sequence[float]]  # key -> per-token costs (n + 1) or [total]: a lmwt.nn


def fixed_cost(hyp: Hypothesis, weight: float, inv_acwt: float, wip: float) -> float:
    """rescore.nbest.interp.fixed_cost of one hypothesis."""
    return interp.fixed_cost(hyp.ac, hyp.withlm, hyp.nolm, len(hyp.words), weight, inv_acwt, wip)


def graph_cost(hyp: Hypothesis, weight: float, l_nn: float) -> float:
    """rescore.nbest.interp.graph_cost of one hypothesis: its new graph cost for Kaldi."""
    return interp.graph_cost(hyp.withlm, hyp.nolm, l_nn, weight)


class NnCosts:
    """NN LM costs of every hypothesis of one N-best set, checked once: K >= 0 models (a list,
    one entry per model, mixed by ``Params.mix``), hypotheses in the set's order.

    keys: (num_hyps,) hypothesis keys; rows[k][i]: model k's costs of hypothesis i, per token
    (n + 1, end of sentence last) or [total]; totals[k]: (num_hyps,) float64 sums of the rows;
    sources[k]: where model k's costs came from (a lmwt.nn), for the errors.
    """

    def __init__(self, keys: List[str], rows: List[List[List[float]]], sources: Sequence[Optional[str]]):
        self.keys = keys
        self.rows = rows
        self.sources = [None if s is None else str(s) for s in sources]
        self.totals = [np.array([sum(r) for r in m], dtype=np.float64) for m in rows]
        self._mixed: tuple = ((), None)  # (mix, l_nn under it): a sweep asks for one mix many times
        for k, t in enumerate(self.totals):
            bad = np.flatnonzero(~np.isfinite(t))
            if len(bad):
                key = keys[bad[0]]
                raise RescoreError(f"NN LM costs whose sum stays finite (the {len(rows[k][bad[0]])} costs of "
                                   f"'{key}' sum to {t[bad[0]]})", path=self.sources[k],
                                   line=_line_of(self.sources[k], key), got=_shown(rows[k][bad[0]]))

    @classmethod
    def check(cls, nbest: NbestSet, costs: Sequence[NnCostMap], sources: Sequence[Optional[PathLike]],
              share: bool = False) -> "NnCosts":
        """The costs of each model (key -> costs, e.g. read_nn_costs of a lmwt.nn) checked against
        the set: every hypothesis has a cost of the right length in every model's, no cost is for
        an unknown key. share: the set is a share of the set the costs are of (a --split job), so
        costs of other utterances are passed over (those of the share's utterances still must
        be the share's hypotheses')."""
        if len(costs) != len(sources):
            raise ValueError(f"{len(sources)} sources for {len(costs)} sets of NN LM costs")
        hyps = [h for u in nbest.utterances() for h in u.hyps]
        rows = []
        for c, src in zip(costs, sources):
            rows.append([_row(h, c, src) for h in hyps])
            if len(c) != len(hyps):
                known = {h.key for h in hyps}
                extra = [k for k in c if k not in known]
                if share:
                    utts = {u.id for u in nbest.utterances()}
                    extra = [k for k in extra if k.rsplit("-", 1)[0] in utts]
                if not extra:
                    continue
                raise RescoreError(f"only keys of the N-best dir ({len(extra)} extra, e.g. '{extra[0]}')",
                                   path=src)
        return cls([h.key for h in hyps], rows, sources)

    @classmethod
    def read(cls, nbest: NbestSet, paths: Sequence[PathLike], share: bool = False) -> "NnCosts":
        """The lmwt.nn files of K models (read_nn_costs), checked against the set (share: as
        for check)."""
        return cls.check(nbest, [read_nn_costs(p) for p in paths], list(paths), share)

    @classmethod
    def of_engine(cls, nbest: NbestSet, results: Sequence[list], sources: Sequence[Optional[PathLike]]) -> "NnCosts":
        """What the engine computed for K models: results[k][c][u][h] (rescore.engine.score.score_nbest)."""
        keys = [h.key for u in nbest.utterances() for h in u.hyps]
        return cls(keys, [[r for conv in res for utt in conv for r in utt] for res in results], sources)

    @property
    def num_models(self) -> int:
        return len(self.rows)

    def model(self, k: int) -> Dict[str, List[float]]:
        """key -> model k's costs (the lines of its lmwt.nn), in the set's order."""
        return dict(zip(self.keys, self.rows[k]))

    def mixed(self, mix: Sequence[float]) -> np.ndarray:
        """(num_hyps,) float64 NN LM cost of each hypothesis under the mix; zeros without models."""
        if not self.rows:
            return np.zeros(len(self.keys))
        if len(mix) != len(self.rows):
            raise RescoreError(f"one --mix share per set of NN LM costs ({len(self.rows)} of them)",
                               path=self.sources[0], got=f"{len(mix)} shares")
        if self._mixed[0] != tuple(mix):
            self._mixed = (tuple(mix), interp.mixed_nn_cost(self.totals, mix))
        return self._mixed[1]

    def mixed_rows(self, mix: Sequence[float]) -> Dict[str, List[float]]:
        """key -> the mixed NN costs of each hypothesis (the lines of a mixed lmwt.nn): per token
        (n + 1) where every model has them (the same number), else [total]."""
        totals = self.mixed(mix)
        out = {}
        for i, key in enumerate(self.keys):
            rows = [m[i] for m in self.rows]
            if len({len(r) for r in rows}) == 1 and len(rows[0]) > 1:
                out[key] = [float(x) for x in interp.mixed_nn_cost([np.asarray(r, dtype=np.float64)
                                                                     for r in rows], mix)]
            else:
                out[key] = [float(totals[i])]
        return out

    def subset(self, nbest: NbestSet) -> "NnCosts":
        """The costs of the hypotheses of nbest (a part of this set, e.g. NbestSet.subset)."""
        keys = [h.key for u in nbest.utterances() for h in u.hyps]
        if keys == self.keys:
            return self
        at = {k: i for i, k in enumerate(self.keys)}
        missing = [k for k in keys if k not in at]
        if missing:
            raise RescoreError(f"an NN LM cost for key '{missing[0]}'", path=self.sources[0] if self.sources else None,
                               got="none")
        idx = [at[k] for k in keys]
        return NnCosts(keys, [[m[i] for i in idx] for m in self.rows], self.sources)


def _row(hyp: Hypothesis, costs: NnCostMap, source) -> List[float]:
    """hyp's costs in costs: n + 1 per-token costs or one total."""
    try:
        c = costs[hyp.key]
    except KeyError:
        raise RescoreError(f"an NN LM cost for key '{hyp.key}'", path=source, got="none") from None
    if len(c) not in (1, len(hyp.words) + 1):
        raise RescoreError(f"1 total or {len(hyp.words) + 1} per-token costs ({len(hyp.words)} words + "
                           f"end of sentence) for key '{hyp.key}'", path=source, got=f"{len(c)} costs")
    return c


def _shown(values) -> str:
    return " ".join(repr(float(x)) for x in values)


def _line_of(path: Optional[PathLike], key: str, kind: str = "tokens") -> Optional[int]:
    """The line (text) or entry (binary) of key in the table at path; None where it cannot be
    read back (only for an error message, so a failure here must not hide that error)."""
    if path is None:
        return None
    try:
        keys = read_table(path, kind).keys
        return keys.index(key) + 1
    except (RescoreError, OSError, ValueError):
        return None


def best_hypotheses(nbest: NbestSet, params: Params, nn: Optional[NnCosts] = None) -> Dict[str, int]:
    """utt -> index (0-based rank) of the hypothesis with the lowest total cost; ties go to the
    better first-pass rank. nn: the checked NN costs of the K models (mixed by params.mix)."""
    return CostArrays(nbest, nn).choice(params)


def graph_costs(nbest: NbestSet, params: Params, nn: Optional[NnCosts] = None) -> Dict[str, float]:
    """key -> new graph cost (``lmwt.interp``) of every hypothesis, in the set's order."""
    return CostArrays(nbest, nn).graph_costs(params)


class CostArrays:
    """The set's costs as flat float64 arrays (one entry per hypothesis, utterance blocks in
    carry order) for fast sweeps: ac, withlm, nolm, nwords; nn, the NN costs (NnCosts, of no
    model without them); starts (U,) int64 block starts; errors (num_hyps,) int64 word errors of
    each hypothesis against its reference (None without references; computed when first asked).

    Every combination of costs is checked: one that overflows (finite inputs whose interpolated
    cost is not finite) is a RescoreError naming the archive, the line and the hypothesis.

    eligible: (num_hyps,) bool, the hypotheses that may be chosen (a cascade's survivors:
    rescore.nbest.cascade; the others' total is taken as +inf), None: all of them.
    """

    def __init__(self, nbest: NbestSet, nn: Optional[NnCosts] = None, eligible: Optional[np.ndarray] = None):
        hyps = [h for u in nbest.utterances() for h in u.hyps]
        self._nbest = nbest
        self.utt_ids = [u.id for u in nbest.utterances()]
        self.keys = [h.key for h in hyps]
        self.ac = np.array([h.ac for h in hyps], dtype=np.float64)
        self.withlm = np.array([h.withlm for h in hyps], dtype=np.float64)
        self.nolm = np.array([h.nolm for h in hyps], dtype=np.float64)
        self.nwords = np.array([len(h.words) for h in hyps], dtype=np.float64)
        self.nn = nn.subset(nbest) if nn is not None else NnCosts(self.keys, [], [])
        sizes = [len(u.hyps) for u in nbest.utterances()]
        self.starts = np.cumsum([0] + sizes[:-1] if sizes else []).astype(np.int64)
        self._errors: Optional[np.ndarray] = None
        self.eligible = eligible
        self.ref_words = 0
        if nbest.refs is not None:
            self.ref_words = sum(len(nbest.refs[u]) for u in self.utt_ids)

    def with_nn(self, nn: Optional[NnCosts], eligible: Optional[np.ndarray] = None) -> "CostArrays":
        """These arrays with the NN costs ``nn`` and ``eligible`` (as the constructor takes them):
        the set's own arrays shared, not read from it again."""
        out = copy.copy(self)
        out.nn = nn.subset(self._nbest) if nn is not None else NnCosts(self.keys, [], [])
        out.eligible = eligible
        return out

    @property
    def errors(self) -> Optional[np.ndarray]:
        if self._errors is None and self._nbest.refs is not None:
            refs = self._nbest.refs
            self._errors = np.array([e for u in self._nbest.utterances()
                                     for e in word_errors_of_each(refs[u.id], [h.words for h in u.hyps])],
                                    dtype=np.int64)
        return self._errors

    def lnn(self, mix: Sequence[float] = (1.0,)) -> np.ndarray:
        """(num_hyps,) float64 NN LM cost of each hypothesis under the mix."""
        if self.nn.num_models == 0 and len(mix) != 1:
            raise RescoreError("one --mix share per set of NN LM costs (1 of them)", got=f"{len(mix)} shares")
        return self.nn.mixed(mix)

    def fixed(self, params: Params) -> np.ndarray:
        """(num_hyps,) float64 fixed cost of each hypothesis (rescore.nbest.interp.fixed_cost), checked."""
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is the error of _check
            fixed = interp.fixed_cost(self.ac, self.withlm, self.nolm, self.nwords, params.weight,
                                      params.inv_acwt, params.wip)
        self._check(fixed, params, "fixed cost")
        return fixed

    def total(self, params: Params) -> np.ndarray:
        """(num_hyps,) float64 final interpolated cost of each hypothesis, checked."""
        fixed, lnn = self.fixed(params), self.lnn(params.mix)
        with np.errstate(over="ignore", invalid="ignore"):
            cost = total_cost(fixed, lnn, params.weight)
        self._check(cost, params, "interpolated cost")
        return cost

    def graph_costs(self, params: Params) -> Dict[str, float]:
        """key -> new graph cost (``lmwt.interp``) of every hypothesis, checked."""
        lnn = self.lnn(params.mix)
        with np.errstate(over="ignore", invalid="ignore"):
            cost = interp.graph_cost(self.withlm, self.nolm, lnn, params.weight)
        self._check(cost, params, "graph cost")
        if self.eligible is not None:  # out of a cascade: out of the running in Kaldi's scoring too
            from rescore.nbest.cascade import OUT_OF_CASCADE

            cost = cost + np.where(self.eligible, 0.0, OUT_OF_CASCADE)
        return dict(zip(self.keys, cost.tolist()))

    def best(self, params: Params) -> np.ndarray:
        """(U,) int64 flat index of each utterance's lowest-cost hypothesis (first on ties);
        the same arithmetic, in the same order, as fixed_cost + weight * l_nn."""
        cost = self.total(params)
        if not self.utt_ids:  # no utterance (an empty --split share)
            return np.zeros(0, dtype=np.int64)
        if self.eligible is not None:  # a cascade: only its survivors can win
            cost = np.where(self.eligible, cost, np.inf)
        mins = np.minimum.reduceat(cost, self.starts)
        seg = np.repeat(np.arange(len(self.starts)), np.diff(np.append(self.starts, len(cost))))
        at_min = np.flatnonzero(cost == mins[seg])
        _, first = np.unique(seg[at_min], return_index=True)
        return at_min[first]

    def choice(self, params: Params) -> Dict[str, int]:
        """utt -> 0-based rank of its lowest-cost hypothesis under params (as best())."""
        return {u: int(i - s) for u, i, s in zip(self.utt_ids, self.best(params), self.starts)}

    def errors_of(self, params: Params) -> int:
        """Word errors (S + D + I) of the 1-best under params."""
        if self.errors is None:
            raise RescoreError("references (a data dir with 'text')")
        return int(self.errors[self.best(params)].sum())

    def wer(self, params: Params) -> float:
        """WER (percent) of the 1-best under params."""
        errors = self.errors_of(params)
        if self.ref_words == 0:
            raise RescoreError("references with at least one word (WER is undefined on none)")
        return 100.0 * float(errors) / self.ref_words

    def _check(self, cost: np.ndarray, params: Params, what: str) -> None:
        if not np.isfinite(cost).all():
            raise self._overflow(int(np.flatnonzero(~np.isfinite(cost))[0]), params, what)

    def _overflow(self, i: int, params: Params, what: str) -> RescoreError:
        """The error of hypothesis i, whose ``what`` is not finite although every input is: it
        names the input of the term that overflows (the first term that is not finite, else the
        biggest one: their sum overflows), its archive and line."""
        w, inv, wip = params.weight, params.inv_acwt, params.wip
        with np.errstate(over="ignore", invalid="ignore"):
            terms = self._terms(i, params)
        if what == "graph cost":
            terms = terms[1:3] + terms[4:]
        elif what == "fixed cost":
            terms = terms[:4]
        bad = [t for t in terms if not np.isfinite(t[3])]
        term, source, value, _ = bad[0] if bad else max(terms, key=lambda t: abs(t[3]))
        key = self.keys[i]
        table = self._nbest.source_table  # (path, key -> line, archive -> column)
        if isinstance(source, int):
            path, kind = self.nn.sources[source], "tokens"
        elif table is not None:  # a set read from a table (rescore.nbest.tables.to_nbest_set)
            column = table[2].get(source, source)
            return RescoreError(
                f"costs whose {what} stays finite: {term} overflows for hypothesis '{key}' under weight {w:g}, "
                f"inv_acwt {inv:g}, wip {wip:g} (column {column})", path=table[0], line=table[1].get(key) or None,
                got=f"{key} ({int(value)} words)" if term == "wip * words" else f"{key} {float(value)!r}")
        else:
            archives = (self._nbest.kaldi or kaldi_dir(self._nbest.path)).archives
            if source == "words":
                source = "words_text" if archives["words_text"] else "words"
            path = archives[source]
            kind = {"words": "ints", "words_text": "tokens"}.get(source, "float")
        return RescoreError(
            f"costs whose {what} stays finite: {term} overflows for hypothesis '{key}' under weight {w:g}, "
            f"inv_acwt {inv:g}, wip {wip:g}", path=path, line=_line_of(path, key, kind),
            got=f"{key} ({int(value)} words)" if term == "wip * words" else f"{key} {float(value)!r}")

    def _terms(self, i: int, params: Params) -> list:
        """(term, its input's archive name or NN model index, the input's value, the term's value)
        of each term of hypothesis i's interpolated cost, in rescore.nbest.interp's order."""
        w, inv, wip = params.weight, params.inv_acwt, params.wip
        lm_name = "lmwt.withlm" if abs(self.withlm[i]) >= abs(self.nolm[i]) else "lmwt.nolm"
        lm_value = self.withlm[i] if lm_name == "lmwt.withlm" else self.nolm[i]
        terms = [("ac / inv_acwt", "acwt", self.ac[i], self.ac[i] / inv),
                 ("nolm", "lmwt.nolm", self.nolm[i], self.nolm[i]),
                 ("(1 - weight) * (withlm - nolm)", lm_name, lm_value, (1.0 - w) * (self.withlm[i] - self.nolm[i])),
                 ("wip * words", "words", self.nwords[i], wip * self.nwords[i])]
        if self.nn.num_models:
            k = int(np.argmax([abs(t[i]) for t in self.nn.totals]))
            terms.append(("weight * NN LM cost", k, self.nn.totals[k][i], w * self.lnn(params.mix)[i]))
        return terms


# --------------------------------------------------------------------------------------------
# Tuning


def progress_mixes(mixes: Sequence[tuple]):
    """The mixes of a sweep, with a bar (or log lines) when there are several."""
    if len(mixes) == 1:
        return mixes
    return progress(mixes, desc="tune", unit="mix")


def split_half(nbest: NbestSet) -> tuple:
    """(first, second): the first half of the conversations (carry order) and the rest; tune on
    one, report on the other, so no figure is tuned on the utterances it reports."""
    n = len(nbest.conversations)
    if n < 2:
        raise RescoreError("at least 2 conversations to split in halves", path=nbest.path, got=f"{n}")
    ids = [c.id for c in nbest.conversations]
    return nbest.subset(ids[: n // 2]), nbest.subset(ids[n // 2 :])


def mix_grid(shares: Sequence[float], k: int, option: str = "--mixes") -> List[tuple]:
    """The mixes rescore-tune sweeps for k models, from a grid of shares (e.g. 0:1:0.1):
    k = 1: [(1.0,)]; k = 2: (a, 1 - a) for each share a of the first model; k > 2: every mix
    whose k shares all lie in the grid (a simplex grid: 0:1:0.1 gives shares in steps of 0.1)."""
    if k < 1:
        raise ValueError("k >= 1")
    if k == 1:
        return [(1.0,)]
    grid = sorted(set(float(a) for a in shares))
    check(all(0.0 <= a <= 1.0 for a in grid), "shares in [0, 1]", option, ",".join(f"{a:g}" for a in grid))
    if k == 2:
        return [interp.check_mix((a, round(1.0 - a, 12)), option) for a in grid]
    check(len(grid) ** (k - 1) <= 1_000_000, f"a coarser grid of shares for {k} models", option, f"{len(grid)} shares")
    out = []
    for head in itertools.product(grid, repeat=k - 1):
        last = 1.0 - sum(head)
        near = min(grid, key=lambda a: abs(a - last))
        if abs(near - last) < 1e-9:
            out.append(interp.check_mix((*head, near), option))
    check(bool(out), f"a grid of shares with {k} of them summing to 1", option, ",".join(f"{a:g}" for a in grid))
    return out


def sweep(arrays: CostArrays, weights: Sequence[float], inv_acwts: Sequence[float],
          wips: Sequence[float], mix: Sequence[float] = (1.0,)) -> List[dict]:
    """WER (percent) of every setting of the grid: [{weight, inv_acwt, wip, wer}] in grid order
    (each row with its "mix" too when there are several models)."""
    mix = tuple(mix)
    rows = []
    for w in progress(weights, desc="tune", unit="weight", leave=False):
        for a in inv_acwts:
            for p in wips:
                row = {"weight": w, "inv_acwt": a, "wip": p}
                if len(mix) > 1:
                    row["mix"] = list(mix)
                row["wer"] = arrays.wer(Params(w, a, p, mix))
                rows.append(row)
    return rows


def tune(dev: NbestSet, *, weights: Sequence[float], inv_acwts: Sequence[float], wips: Sequence[float],
         nn_costs: Union[None, NnCosts, Callable[[float], NnCosts]] = None, held_out: Optional[NbestSet] = None,
         mixes: Optional[Sequence[Sequence[float]]] = None, cascades: Optional[tuple] = None) -> dict:
    """Pick the grid setting with the lowest WER on dev (ties: first in grid order, i.e. the
    first mix, then the smallest weight, inv_acwt, wip) and, when held_out is given, report its
    WER there too.

    nn_costs: the checked NN costs of the K models (NnCosts), or a function weight -> NnCosts
    for models whose costs depend on the weight (state carried along the best hypotheses by the
    final cost); either may hold the costs of a bigger set than dev (and held_out). mixes: the
    shares of the K models to sweep (mix_grid; default: one model, (1.0,)). cascades: (the
    ranking of a cascade's scoring run, rescore.nbest.cascade.CascadeRanks; the cascade settings
    to sweep, a list of Cascade), an outer loop: under each only its survivors can win.

    Returns {"best": {weight, inv_acwt, wip[, mix]}, "dev_wer", "dev_utts", "dev_conversations",
    "dev_choice" (utt -> 0-based rank of its 1-best under the best setting), "grid": [rows of
    sweep]; with cascades each row's "cascade" and the best's, {top, margin}} and with held_out:
    "held_out_wer", "held_out_utts", "held_out_conversations", "held_out_errors",
    "held_out_ref_words", "held_out_choice", "held_out_first_pass_wer".
    """
    if dev.refs is None:
        raise RescoreError("references for the tuning set (a data dir with 'text')", path=dev.path)
    if nn_costs is None and any(w != 0.0 for w in weights):
        log.warning("no NN LM costs (--nn-costs): sweeping weight 0 only, not the NN LM weights asked for")
        weights = [0.0]
    if any(a <= 0 for a in inv_acwts):
        raise RescoreError("inv_acwt values > 0", got=str(list(inv_acwts)))
    costs_for = nn_costs if callable(nn_costs) else (lambda w: nn_costs)
    mixes = [tuple(m) for m in (mixes or [(1.0,)])] if nn_costs is not None else [(1.0,)]
    ranks, settings = cascades if cascades is not None else (None, [None])
    rows = []
    # weight -> the dev set's arrays (one entry when the costs do not depend on it), built once
    arrays = {} if callable(nn_costs) else dict.fromkeys(weights, CostArrays(dev, nn_costs))
    for cascade in settings:
        start = len(rows)
        if callable(nn_costs):
            for w in weights:
                arrays[w] = _eligible(arrays.get(w) or CostArrays(dev, costs_for(w)), ranks, cascade)
                for mix in mixes:
                    rows += sweep(arrays[w], [w], inv_acwts, wips, mix)
        else:
            _eligible(arrays[weights[0]], ranks, cascade)
            for mix in progress_mixes(mixes):
                rows += sweep(arrays[weights[0]], weights, inv_acwts, wips, mix)
        if cascade is not None:
            for row in rows[start:]:
                row["cascade"] = cascade.as_dict()
    best = min(range(len(rows)), key=lambda i: rows[i]["wer"])
    params = Params(rows[best]["weight"], rows[best]["inv_acwt"], rows[best]["wip"],
                    tuple(rows[best].get("mix", (1.0,))))
    cascade = None
    if ranks is not None:  # the best's cascade, for the choice here and on the held-out set
        from rescore.nbest.cascade import Cascade

        cascade = Cascade(rows[best]["cascade"]["top"] or 0, rows[best]["cascade"]["margin"])
        arrays = {w: _eligible(a, ranks, cascade) for w, a in arrays.items()}
    out = {"best": params.as_dict(), "dev_wer": rows[best]["wer"], "dev_utts": dev.num_utts,
           "dev_conversations": len(dev.conversations), "grid": rows,
           "dev_choice": arrays[params.weight].choice(params)}
    if cascade is not None:
        out["cascade"] = cascade.as_dict()
    for name, grid, v in (("inv_acwt", inv_acwts, params.inv_acwt), ("wip", wips, params.wip)):
        if len(grid) > 1 and v in (min(grid), max(grid)):
            log.warning("best %s %g is at the edge of its grid %s: widen the grid", name, v, list(grid))
    log.info("best on %d utterances: weight %g inv_acwt %g wip %g%s -> WER %.2f %%", dev.num_utts,
             params.weight, params.inv_acwt, params.wip,
             " mix " + ",".join(f"{m:g}" for m in params.mix) if params.num_models > 1 else "",
             rows[best]["wer"])
    if held_out is not None:
        if held_out.refs is None:
            raise RescoreError("references for the held-out set", path=held_out.path)
        ho = _eligible(CostArrays(held_out, costs_for(params.weight)), ranks, cascade)
        out.update(held_out_wer=ho.wer(params), held_out_utts=held_out.num_utts,
                   held_out_conversations=len(held_out.conversations),
                   held_out_errors=ho.errors_of(params), held_out_ref_words=ho.ref_words,
                   held_out_choice=ho.choice(params),
                   held_out_first_pass_wer=100.0 * float(ho.errors[ho.starts].sum()) / max(ho.ref_words, 1))
        log.info("held out (%d utterances): WER %.2f %% (rank 1: %.2f %%)", held_out.num_utts,
                 out["held_out_wer"], out["held_out_first_pass_wer"])
    return out


def _eligible(arrays: CostArrays, ranks, cascade) -> CostArrays:
    """arrays with only the survivors of ``cascade`` (rescore.nbest.cascade.Cascade, under the
    scoring run's ranking ``ranks``) eligible; unchanged without a cascade."""
    if cascade is not None:
        arrays.eligible = ranks.mask(arrays.keys, cascade)
    return arrays


def cross_validate(nbest: NbestSet, **tune_args) -> dict:
    """Two-fold cross-validated tuning by conversation: tune on the first half of the
    conversations (split_half) and apply the setting to the second, then the other way round.
    No figure is tuned on the utterances it reports. tune_args go to tune() (grids, NN costs).

    Returns {"folds": [tune() of half 1 with half 2 held out, tune() of half 2 with half 1 held
    out] (each with "tuned_on"/"reported_on" = 1 or 2), "pooled_wer" (every utterance under the
    setting tuned on the other half: the honest figure for the whole set), "pooled_errors",
    "pooled_ref_words", "pooled_utts", "pooled_first_pass_wer" (rank 1), "pooled_choice"
    (utt -> 0-based rank, in the set's utterance order)}.
    """
    if nbest.refs is None:
        raise RescoreError("references for the tuning set (a data dir with 'text')", path=nbest.path)
    halves = split_half(nbest)
    folds = []
    for k, (tuned, reported) in enumerate((halves, halves[::-1])):
        log.info("fold %d: tune on half %d (%d conversations), report on half %d (%d conversations)",
                 k + 1, k + 1, len(tuned.conversations), 2 - k, len(reported.conversations))
        folds.append({"tuned_on": k + 1, "reported_on": 2 - k, **tune(tuned, held_out=reported, **tune_args)})
    errors = sum(f["held_out_errors"] for f in folds)
    ref_words = sum(f["held_out_ref_words"] for f in folds)
    chosen = {**folds[0]["held_out_choice"], **folds[1]["held_out_choice"]}
    first = sum(word_errors_rank1(nbest))
    out = {"folds": folds, "pooled_wer": 100.0 * errors / ref_words if ref_words else 0.0,
           "pooled_errors": errors, "pooled_ref_words": ref_words, "pooled_utts": nbest.num_utts,
           "pooled_first_pass_wer": 100.0 * first / ref_words if ref_words else 0.0,
           "pooled_choice": {u.id: chosen[u.id] for u in nbest.utterances()}}
    log.info("cross-validated: half 1 %.2f %% (tuned on half 2), half 2 %.2f %% (tuned on half 1), pooled "
             "%.2f %% on %d utterances (rank 1: %.2f %%)", folds[1]["held_out_wer"], folds[0]["held_out_wer"],
             out["pooled_wer"], nbest.num_utts, out["pooled_first_pass_wer"])
    return out


def word_errors_rank1(nbest: NbestSet) -> List[int]:
    """Word errors of each utterance's rank-1 hypothesis (the first pass), in the set's order."""
    return [word_errors(nbest.refs[u.id], u.hyps[0].words) for u in nbest.utterances()]
