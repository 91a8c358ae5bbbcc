"""Interpolation of an N-best set's costs, 1-best selection and the tuning sweep.

The cost formula itself (design §3) lives in rescore.interp; this module applies it to loaded
N-best sets (rescore.nbest) and NN LM costs: one set of costs (a lmwt.nn) or K of them, one
per model, mixed by ``Params.mix`` (rescore.interp.mixed_nn_cost). Writing the outputs and the report is the job
layer's (rescore.pipeline) and the report's content is rescore.metrics'.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from rescore import interp
from rescore.errors import OptionError, RescoreError
from rescore.interp import Params, total_cost
from rescore.nbest import Hypothesis, NbestSet

log = logging.getLogger(__name__)
PathLike = Union[str, Path]
NnCosts = Mapping[str, Sequence[float]]  # key -> per-token costs (n + 1) or [total]
# One model's costs, or K models' (a list, one per model, mixed by Params.mix)
ManyNnCosts = Union[None, NnCosts, Sequence[NnCosts]]
Sources = Union[None, PathLike, Sequence[Optional[PathLike]]]  # where each came from (for errors)


def fixed_cost(hyp: Hypothesis, weight: float, inv_acwt: float, wip: float) -> float:
    """rescore.interp.fixed_cost of one hypothesis."""
    return interp.fixed_cost(hyp.ac, hyp.withlm, hyp.nolm, len(hyp.words), weight, inv_acwt, wip)


def graph_cost(hyp: Hypothesis, weight: float, l_nn: float) -> float:
    """rescore.interp.graph_cost of one hypothesis: its new graph cost for Kaldi."""
    return interp.graph_cost(hyp.withlm, hyp.nolm, l_nn, weight)


def nn_cost(hyp: Hypothesis, nn_costs: Optional[NnCosts], source: Optional[PathLike] = None) -> float:
    """Total NN LM cost of hyp: the sum of its per-token costs (n + 1 of them) or its total.
    0.0 without NN costs."""
    if nn_costs is None:
        return 0.0
    try:
        c = nn_costs[hyp.key]
    except KeyError:
        raise RescoreError(f"an NN LM cost for key '{hyp.key}'", path=source, got="none") from None
    if len(c) not in (1, len(hyp.words) + 1):
        raise RescoreError(f"1 total or {len(hyp.words) + 1} per-token costs ({len(hyp.words)} words + "
                           f"end of sentence) for key '{hyp.key}'", path=source, got=f"{len(c)} costs")
    return float(sum(c))


def cost_sets(nn_costs: ManyNnCosts, source: Sources = None) -> List[tuple]:
    """[(costs, source)] of each model: [] without NN costs, one pair for one mapping."""
    if nn_costs is None:
        return []
    if isinstance(nn_costs, Mapping):
        return [(nn_costs, None if isinstance(source, (list, tuple)) else source)]
    sources = list(source) if isinstance(source, (list, tuple)) else [source] * len(nn_costs)
    if len(sources) != len(nn_costs):
        raise ValueError(f"{len(sources)} sources for {len(nn_costs)} sets of NN LM costs")
    return list(zip(nn_costs, sources))


def _check_mix_for(sets: List[tuple], mix: Sequence[float]) -> None:
    if sets and len(sets) != len(mix):
        raise RescoreError(f"one --mix share per set of NN LM costs ({len(sets)} of them)",
                           path=sets[0][1], got=f"{len(mix)} shares")


def mixed_nn_cost(hyp: Hypothesis, sets: List[tuple], mix: Sequence[float]) -> float:
    """The NN LM cost of hyp under the mix (rescore.interp.mixed_nn_cost of each model's
    total); 0.0 without NN costs. sets: cost_sets()."""
    if not sets:
        return 0.0
    return interp.mixed_nn_cost([nn_cost(hyp, c, src) for c, src in sets], mix)


def mix_costs(nbest: NbestSet, nn_costs: Sequence[NnCosts], mix: Sequence[float],
              source: Sources = None) -> Dict[str, List[float]]:
    """key -> the mixed NN costs of each hypothesis, in the set's order (the lines of a mixed
    lmwt.nn): per token (n + 1) where every model has per-token costs, else [total]."""
    sets = cost_sets(list(nn_costs), source)
    _check_mix_for(sets, mix)
    out = {}
    for u in nbest.utterances():
        for h in u.hyps:
            rows = [c[h.key] if h.key in c else None for c, _ in sets]
            if all(r is not None and len(r) == len(h.words) + 1 for r in rows):
                out[h.key] = [float(x) for x in interp.mixed_nn_cost([np.asarray(r, dtype=np.float64)
                                                                      for r in rows], mix)]
            else:
                out[h.key] = [float(mixed_nn_cost(h, sets, mix))]
    return out


def check_nn_costs(nbest: NbestSet, nn_costs: ManyNnCosts, source: Sources = None) -> None:
    """Every hypothesis has a cost of the right length in every set, and no cost is for an
    unknown key."""
    for costs, src in cost_sets(nn_costs, source):
        _check_one(nbest, costs, src)


def _check_one(nbest: NbestSet, nn_costs: NnCosts, source: Optional[PathLike]) -> None:
    keys = set()
    for u in nbest.utterances():
        for h in u.hyps:
            nn_cost(h, nn_costs, source)
            keys.add(h.key)
    extra = [k for k in nn_costs if k not in keys]
    if extra:
        raise RescoreError(f"only keys of the N-best dir ({len(extra)} extra, e.g. '{extra[0]}')", path=source)


def best_hypotheses(nbest: NbestSet, params: Params, nn_costs: ManyNnCosts = None,
                    source: Sources = None) -> Dict[str, int]:
    """utt -> index (0-based rank) of the hypothesis with the lowest total cost; ties go to the
    better first-pass rank. nn_costs: one model's, or a list of K models' (mixed by params.mix)."""
    sets = cost_sets(nn_costs, source)
    _check_mix_for(sets, params.mix)
    best = {}
    for u in nbest.utterances():
        costs = [total_cost(fixed_cost(h, params.weight, params.inv_acwt, params.wip),
                            mixed_nn_cost(h, sets, params.mix), params.weight) for h in u.hyps]
        best[u.id] = min(range(len(costs)), key=costs.__getitem__)
    return best


class CostArrays:
    """The set's costs as flat float64 arrays (one entry per hypothesis, utterance blocks in
    carry order) for fast sweeps: ac, withlm, nolm, nwords; lnns, one array of NN costs per
    model (one of zeros without NN costs); starts (U,) int64 block starts; errors (num_hyps,)
    int64 word errors of each hypothesis against its reference (or None)."""

    def __init__(self, nbest: NbestSet, nn_costs: ManyNnCosts = None, source: Sources = None):
        from rescore.metrics import word_errors

        hyps = [h for u in nbest.utterances() for h in u.hyps]
        self.utt_ids = [u.id for u in nbest.utterances()]
        self.ac = np.array([h.ac for h in hyps], dtype=np.float64)
        self.withlm = np.array([h.withlm for h in hyps], dtype=np.float64)
        self.nolm = np.array([h.nolm for h in hyps], dtype=np.float64)
        self.nwords = np.array([len(h.words) for h in hyps], dtype=np.float64)
        self.lnns = [np.array([nn_cost(h, c, src) for h in hyps], dtype=np.float64)
                     for c, src in cost_sets(nn_costs, source)] or [np.zeros(len(hyps))]
        self._mixed: tuple = ((), None)  # (mix, l_nn under it): a sweep asks for one mix many times
        self.starts = np.cumsum([0] + [len(u.hyps) for u in nbest.utterances()][:-1]).astype(np.int64)
        self.errors = None
        self.ref_words = 0
        if nbest.refs is not None:
            self.errors = np.array([word_errors(nbest.refs[u.id], h.words) for u in nbest.utterances()
                                    for h in u.hyps], dtype=np.int64)
            self.ref_words = sum(len(nbest.refs[u]) for u in self.utt_ids)

    def lnn(self, mix: Sequence[float] = (1.0,)) -> np.ndarray:
        """(num_hyps,) float64 NN LM cost of each hypothesis under the mix."""
        if len(mix) != len(self.lnns):
            raise RescoreError(f"one --mix share per set of NN LM costs ({len(self.lnns)} of them)",
                               got=f"{len(mix)} shares")
        if self._mixed[0] != tuple(mix):
            self._mixed = (tuple(mix), interp.mixed_nn_cost(self.lnns, mix))
        return self._mixed[1]

    def best(self, params: Params) -> np.ndarray:
        """(U,) int64 flat index of each utterance's lowest-cost hypothesis (first on ties);
        the same arithmetic, in the same order, as fixed_cost + weight * l_nn."""
        fixed = interp.fixed_cost(self.ac, self.withlm, self.nolm, self.nwords, params.weight,
                                  params.inv_acwt, params.wip)
        cost = total_cost(fixed, self.lnn(params.mix), params.weight)
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


def graph_costs(nbest: NbestSet, params: Params, nn_costs: ManyNnCosts = None,
                source: Sources = None) -> Dict[str, float]:
    """key -> new graph cost (``lmwt.interp``) of every hypothesis, in the set's order."""
    sets = cost_sets(nn_costs, source)
    _check_mix_for(sets, params.mix)
    return {h.key: graph_cost(h, params.weight, mixed_nn_cost(h, sets, params.mix))
            for u in nbest.utterances() for h in u.hyps}


# --------------------------------------------------------------------------------------------
# Tuning


def progress_mixes(mixes: Sequence[tuple]):
    """The mixes of a sweep, with a bar (or log lines) when there are several."""
    if len(mixes) == 1:
        return mixes
    from rescore.progress import progress

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
    if any(not 0.0 <= a <= 1.0 for a in grid):
        raise OptionError("shares in [0, 1]", option=option, got=",".join(f"{a:g}" for a in grid))
    if k == 2:
        return [interp.check_mix((a, round(1.0 - a, 12)), option) for a in grid]
    if len(grid) ** (k - 1) > 1_000_000:
        raise OptionError(f"a coarser grid of shares for {k} models", option=option, got=f"{len(grid)} shares")
    out = []
    for head in itertools.product(grid, repeat=k - 1):
        last = 1.0 - sum(head)
        near = min(grid, key=lambda a: abs(a - last))
        if abs(near - last) < 1e-9:
            out.append(interp.check_mix((*head, near), option))
    if not out:
        raise OptionError(f"a grid of shares with {k} of them summing to 1", option=option,
                          got=",".join(f"{a:g}" for a in grid))
    return out


def sweep(arrays: CostArrays, weights: Sequence[float], inv_acwts: Sequence[float],
          wips: Sequence[float], mix: Sequence[float] = (1.0,)) -> List[dict]:
    """WER (percent) of every setting of the grid: [{weight, inv_acwt, wip, wer}] in grid order
    (each row with its "mix" too when there are several models)."""
    from rescore.progress import progress  # a bar on a terminal, log lines in a log

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
         nn_costs: Union[ManyNnCosts, Callable[[float], ManyNnCosts]] = None, nn_source: Sources = None,
         held_out: Optional[NbestSet] = None, mixes: Optional[Sequence[Sequence[float]]] = None) -> dict:
    """Pick the grid setting with the lowest WER on dev (ties: first in grid order, i.e. the
    first mix, then the smallest weight, inv_acwt, wip) and, when held_out is given, report its
    WER there too.

    nn_costs: fixed costs (a lmwt.nn, or a list of K, one per model), or a function weight ->
    costs for a model whose costs depend on the weight (state carried along the best
    hypotheses by the final cost); the function may return costs for more keys than the set
    holds. mixes: the shares of the K models to sweep (mix_grid; default: one model, (1.0,)).

    Returns {"best": {weight, inv_acwt, wip[, mix]}, "dev_wer", "dev_utts", "dev_conversations",
    "dev_choice" (utt -> 0-based rank of its 1-best under the best setting), "grid": [rows of
    sweep]} and with held_out: "held_out_wer", "held_out_utts", "held_out_conversations",
    "held_out_errors", "held_out_ref_words", "held_out_choice", "held_out_first_pass_wer".
    """
    if dev.refs is None:
        raise RescoreError("references for the tuning set (a data dir with 'text')", path=dev.path)
    if nn_costs is None and any(w != 0.0 for w in weights):
        log.info("no NN LM costs: sweeping weight 0 only")
        weights = [0.0]
    if any(a <= 0 for a in inv_acwts):
        raise RescoreError("inv_acwt values > 0", got=str(list(inv_acwts)))
    costs_for = nn_costs if callable(nn_costs) else (lambda w: nn_costs)
    mixes = [tuple(m) for m in (mixes or [(1.0,)])] if nn_costs is not None else [(1.0,)]
    rows = []
    arrays = {}  # weight -> the dev set's arrays (one entry when the costs do not depend on it)
    if callable(nn_costs):
        for w in weights:
            arrays[w] = CostArrays(dev, costs_for(w), nn_source)
            for mix in mixes:
                rows += sweep(arrays[w], [w], inv_acwts, wips, mix)
    else:
        arrays = dict.fromkeys(weights, CostArrays(dev, nn_costs, nn_source))
        for mix in progress_mixes(mixes):
            rows += sweep(arrays[weights[0]], weights, inv_acwts, wips, mix)
    best = min(range(len(rows)), key=lambda i: rows[i]["wer"])
    params = Params(rows[best]["weight"], rows[best]["inv_acwt"], rows[best]["wip"],
                    tuple(rows[best].get("mix", (1.0,))))
    out = {"best": params.as_dict(), "dev_wer": rows[best]["wer"], "dev_utts": dev.num_utts,
           "dev_conversations": len(dev.conversations), "grid": rows,
           "dev_choice": arrays[params.weight].choice(params)}
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
        ho = CostArrays(held_out, costs_for(params.weight), nn_source)
        out.update(held_out_wer=ho.wer(params), held_out_utts=held_out.num_utts,
                   held_out_conversations=len(held_out.conversations),
                   held_out_errors=ho.errors_of(params), held_out_ref_words=ho.ref_words,
                   held_out_choice=ho.choice(params),
                   held_out_first_pass_wer=100.0 * float(ho.errors[ho.starts].sum()) / max(ho.ref_words, 1))
        log.info("held out (%d utterances): WER %.2f %% (rank 1: %.2f %%)", held_out.num_utts,
                 out["held_out_wer"], out["held_out_first_pass_wer"])
    return out


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
    from rescore.metrics import word_errors

    return [word_errors(nbest.refs[u.id], u.hyps[0].words) for u in nbest.utterances()]
