"""Interpolation in Kaldi's cost conventions, 1-best selection, and the rescore-nbest job.

design §3: for hypothesis h with n-gram LM cost l_ng = withlm - nolm, graph rest g_0 = nolm,
NN LM cost l_nn, acoustic cost ac and |h| words::

    cost(h) = ac / inv_acwt + g_0 + (1 - w) * l_ng + w * l_nn + wip * |h|
            = fixed_cost(h)                         + w * l_nn

fixed_cost holds everything but the NN term, so the engine (which computes l_nn while carrying
LM state along the best hypotheses) can pick each utterance's best by the final cost. The new
graph cost written back for Kaldi (``lmwt.interp``) is ``g_0 + (1 - w) * l_ng + w * l_nn``:
Kaldi's ``local/score.sh`` adds the acoustic scale and the insertion penalty itself.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from rescore.errors import RescoreError
from rescore.nbest import Hypothesis, NbestSet

log = logging.getLogger(__name__)
PathLike = Union[str, Path]
NnCosts = Mapping[str, Sequence[float]]  # key -> per-token costs (n + 1) or [total]


@dataclass
class Params:
    """The interpolation setting; what rescore-tune writes and rescore-nbest --params reads."""

    weight: float = 0.0  # w, NN LM weight (0: first-pass n-gram only, 1: NN LM only)
    inv_acwt: float = 10.0  # LMWT = 1 / acoustic scale (Kaldi's --lmwt / PocketSphinx's lw)
    wip: float = 0.0  # word insertion penalty, cost per hypothesis word

    def to_json(self, path: PathLike, **extra) -> None:
        from rescore.io.kaldi import atomic_output

        with atomic_output(path, "w") as f:
            json.dump({**asdict(self), **extra}, f, indent=1)
            f.write("\n")

    @classmethod
    def from_json(cls, path: PathLike) -> "Params":
        try:
            d = json.loads(Path(path).read_text())
        except OSError as e:
            raise RescoreError("a readable JSON file", path=path, got=e.strerror) from None
        except json.JSONDecodeError as e:
            raise RescoreError("JSON", path=path, line=e.lineno, got=e.msg) from None
        try:
            return cls(**{k: float(d[k]) for k in ("weight", "inv_acwt", "wip")})
        except (KeyError, TypeError, ValueError):
            raise RescoreError("an object with numeric 'weight', 'inv_acwt', 'wip'", path=path) from None


def fixed_cost(hyp: Hypothesis, weight: float, inv_acwt: float, wip: float) -> float:
    """ac / inv_acwt + nolm + (1 - weight) * (withlm - nolm) + wip * |words| (design §3)."""
    return hyp.ac / inv_acwt + hyp.nolm + (1.0 - weight) * (hyp.withlm - hyp.nolm) + wip * len(hyp.words)


def total_cost(fixed: float, l_nn: float, weight: float) -> float:
    """Final interpolated cost: fixed_cost + weight * l_nn."""
    return fixed + weight * l_nn


def graph_cost(hyp: Hypothesis, weight: float, l_nn: float) -> float:
    """New graph cost for Kaldi: nolm + (1 - weight) * (withlm - nolm) + weight * l_nn."""
    return hyp.nolm + (1.0 - weight) * (hyp.withlm - hyp.nolm) + weight * l_nn


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


def check_nn_costs(nbest: NbestSet, nn_costs: NnCosts, source: Optional[PathLike] = None) -> None:
    """Every hypothesis has a cost of the right length, and no cost is for an unknown key."""
    keys = set()
    for u in nbest.utterances():
        for h in u.hyps:
            nn_cost(h, nn_costs, source)
            keys.add(h.key)
    extra = [k for k in nn_costs if k not in keys]
    if extra:
        raise RescoreError(f"only keys of the N-best dir ({len(extra)} extra, e.g. '{extra[0]}')", path=source)


def best_hypotheses(nbest: NbestSet, params: Params, nn_costs: Optional[NnCosts] = None,
                    source: Optional[PathLike] = None) -> Dict[str, int]:
    """utt -> index (0-based rank) of the hypothesis with the lowest total cost; ties go to the
    better first-pass rank."""
    best = {}
    for u in nbest.utterances():
        costs = [total_cost(fixed_cost(h, params.weight, params.inv_acwt, params.wip), nn_cost(h, nn_costs, source),
                            params.weight) for h in u.hyps]
        best[u.id] = min(range(len(costs)), key=costs.__getitem__)
    return best


class CostArrays:
    """The set's costs as flat float64 arrays (one entry per hypothesis, utterance blocks in
    carry order) for fast sweeps: ac, withlm, nolm, nwords, lnn; starts (U,) int64 block starts;
    errors (num_hyps,) int64 word errors of each hypothesis against its reference (or None)."""

    def __init__(self, nbest: NbestSet, nn_costs: Optional[NnCosts] = None, source: Optional[PathLike] = None):
        from rescore.metrics import word_errors

        hyps = [h for u in nbest.utterances() for h in u.hyps]
        self.utt_ids = [u.id for u in nbest.utterances()]
        self.ac = np.array([h.ac for h in hyps], dtype=np.float64)
        self.withlm = np.array([h.withlm for h in hyps], dtype=np.float64)
        self.nolm = np.array([h.nolm for h in hyps], dtype=np.float64)
        self.nwords = np.array([len(h.words) for h in hyps], dtype=np.float64)
        self.lnn = np.array([nn_cost(h, nn_costs, source) for h in hyps], dtype=np.float64)
        self.starts = np.cumsum([0] + [len(u.hyps) for u in nbest.utterances()][:-1]).astype(np.int64)
        self.errors = None
        self.ref_words = 0
        if nbest.refs is not None:
            self.errors = np.array([word_errors(nbest.refs[u.id], h.words) for u in nbest.utterances()
                                    for h in u.hyps], dtype=np.int64)
            self.ref_words = sum(len(nbest.refs[u]) for u in self.utt_ids)

    def best(self, params: Params) -> np.ndarray:
        """(U,) int64 flat index of each utterance's lowest-cost hypothesis (first on ties);
        the same arithmetic, in the same order, as fixed_cost + weight * l_nn."""
        w = params.weight
        cost = self.ac / params.inv_acwt + self.nolm + (1.0 - w) * (self.withlm - self.nolm) \
            + params.wip * self.nwords + w * self.lnn
        mins = np.minimum.reduceat(cost, self.starts)
        seg = np.repeat(np.arange(len(self.starts)), np.diff(np.append(self.starts, len(cost))))
        at_min = np.flatnonzero(cost == mins[seg])
        _, first = np.unique(seg[at_min], return_index=True)
        return at_min[first]

    def wer(self, params: Params) -> float:
        """WER (percent) of the 1-best under params."""
        if self.errors is None:
            raise RescoreError("references (a data dir with 'text')")
        return 100.0 * float(self.errors[self.best(params)].sum()) / max(self.ref_words, 1)


def _write_text(path: Path, rows: Mapping[str, Sequence[str]]) -> None:
    from rescore.io.kaldi import atomic_output

    with atomic_output(path, "w") as f:
        for u, words in rows.items():
            f.write(" ".join([u, *words]) + "\n")


def rescore_nbest(
    nbest: NbestSet,
    out_dir: PathLike,
    *,
    params: Params,
    nn_costs: Optional[NnCosts] = None,
    nn_source: Optional[PathLike] = None,
    train_counts=None,
    num_buckets: int = 10,
    plot: bool = True,
    extra_report: Optional[dict] = None,
) -> Optional[dict]:
    """Interpolate, pick the 1-best, write OUT_DIR/{lmwt.interp,text} and, with references,
    report.json / report.txt (+ buckets.png with train_counts). Returns the report (or None).

    nn_costs: key -> per-token NN LM costs (n + 1, last = end of sentence) or [total], from a
    ``lmwt.nn`` file or computed by a model; None means no NN LM (weight must then be 0).
    train_counts: Counter of training-text words, for the rare-word bucket table.
    """
    from rescore.io.kaldi import atomic_output, write_table
    from rescore import metrics

    if nn_costs is None and params.weight != 0.0:
        raise RescoreError("NN LM costs (--nn-costs or a model) when --weight is not 0",
                           got=f"weight {params.weight}")
    for name, v in asdict(params).items():
        if not math.isfinite(v):
            raise RescoreError(f"a finite {name}", got=str(v))
    if params.inv_acwt <= 0:
        raise RescoreError("inv_acwt > 0", got=str(params.inv_acwt))
    if nn_costs is not None:
        check_nn_costs(nbest, nn_costs, nn_source)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    best = best_hypotheses(nbest, params, nn_costs, nn_source)
    interp = {h.key: graph_cost(h, params.weight, nn_cost(h, nn_costs, nn_source))
              for u in nbest.utterances() for h in u.hyps}
    write_table(out / "lmwt.interp", "float", interp)
    one_best = {u.id: u.hyps[best[u.id]].words for u in nbest.utterances()}
    _write_text(out / "text", one_best)
    log.info("wrote %s and %s", out / "lmwt.interp", out / "text")
    if nbest.refs is None:
        log.info("no references (no --data-dir with 'text'): no WER report")
        return None

    stats, alignments = metrics.align(nbest.refs, one_best)
    nbests = {u.id: [h.words for h in u.hyps] for u in nbest.utterances()}
    report = {
        **stats.as_dict(),
        "num_hyps": nbest.num_hyps,
        "num_conversations": len(nbest.conversations),
        "grouping": nbest.grouping,
        "oracle_wer": metrics.oracle_wer(nbest.refs, nbests),
        "first_rank_wer": metrics.align(nbest.refs, {u.id: u.hyps[0].words for u in nbest.utterances()})[0].wer,
        "changed_utts": sum(1 for i in best.values() if i != 0),
        "params": asdict(params),
        "nbest_dir": nbest.path,
        **(extra_report or {}),
    }
    if train_counts is not None:
        buckets = metrics.rare_word_buckets(train_counts, (w for r in nbest.refs.values() for w in r), num_buckets)
        report["buckets"] = metrics.bucket_wer(alignments, buckets)
    report["comparison"] = metrics.compare_nbest(nbest, one_best, train_counts=train_counts, num_buckets=num_buckets)
    if train_counts is not None and plot:
        metrics.plot_comparison(report["comparison"], out / "buckets.png", metrics.nbest_chart_title(nbest))
    with atomic_output(out / "report.json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    with atomic_output(out / "report.txt", "w") as f:
        f.write(format_report(report) + "\n")
    return report


def format_report(report: dict) -> str:
    """The readable report.txt (also what the commands print)."""
    p = report.get("params", {})
    lines = [
        f"N-best dir   {report.get('nbest_dir', '')}",
        f"setting      weight {p.get('weight')}  inv_acwt {p.get('inv_acwt')}  wip {p.get('wip')}",
        f"utterances   {report['num_utts']}  hypotheses {report['num_hyps']}  conversations "
        f"{report.get('num_conversations')} (by {report.get('grouping')})",
        f"%WER {report['wer']:.2f} [ {report['errors']} / {report['ref_words']}, {report['insertions']} ins, "
        f"{report['deletions']} del, {report['substitutions']} sub ]",
        f"rank-1 WER   {report['first_rank_wer']:.2f} %   oracle WER {report['oracle_wer']:.2f} %   "
        f"1-best changed in {report['changed_utts']} utterances",
    ]
    if "comparison" in report:
        from rescore.metrics import format_comparison

        lines += ["", "first pass (rank 1 of the N-best) against rescored:", format_comparison(report["comparison"])]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Tuning


def split_half(nbest: NbestSet) -> tuple:
    """(first, second): the first half of the conversations (carry order) and the rest; tune on
    one, report on the other, so no figure is tuned on the utterances it reports."""
    n = len(nbest.conversations)
    if n < 2:
        raise RescoreError("at least 2 conversations to split in halves", path=nbest.path, got=f"{n}")
    ids = [c.id for c in nbest.conversations]
    return nbest.subset(ids[: n // 2]), nbest.subset(ids[n // 2 :])


def sweep(arrays: CostArrays, weights: Sequence[float], inv_acwts: Sequence[float],
          wips: Sequence[float]) -> List[dict]:
    """WER (percent) of every setting of the grid: [{weight, inv_acwt, wip, wer}] in grid order."""
    from rescore.progress import progress  # a bar on a terminal, log lines in a log

    rows = []
    for w in progress(weights, desc="tune", unit="weight", leave=False):
        for a in inv_acwts:
            for p in wips:
                rows.append({"weight": w, "inv_acwt": a, "wip": p, "wer": arrays.wer(Params(w, a, p))})
    return rows


def tune(dev: NbestSet, *, weights: Sequence[float], inv_acwts: Sequence[float], wips: Sequence[float],
         nn_costs: Union[None, NnCosts, Callable[[float], NnCosts]] = None, nn_source: Optional[PathLike] = None,
         held_out: Optional[NbestSet] = None) -> dict:
    """Pick the grid setting with the lowest WER on dev (ties: first in grid order, i.e. the
    smallest weight, inv_acwt, wip) and, when held_out is given, report its WER there too.

    nn_costs: fixed costs (a lmwt.nn), or a function weight -> costs for a model whose costs
    depend on the weight (state carried along the best hypotheses by the final cost); the
    function may return costs for more keys than the set holds.

    Returns {"best": {weight, inv_acwt, wip}, "dev_wer", "dev_utts", "held_out_wer",
    "held_out_utts", "grid": [rows of sweep]}.
    """
    if dev.refs is None:
        raise RescoreError("references for the tuning set (a data dir with 'text')", path=dev.path)
    if nn_costs is None and any(w != 0.0 for w in weights):
        log.info("no NN LM costs: sweeping weight 0 only")
        weights = [0.0]
    if any(a <= 0 for a in inv_acwts):
        raise RescoreError("inv_acwt values > 0", got=str(list(inv_acwts)))
    costs_for = nn_costs if callable(nn_costs) else (lambda w: nn_costs)
    rows = []
    if callable(nn_costs):
        for w in weights:
            rows += sweep(CostArrays(dev, costs_for(w), nn_source), [w], inv_acwts, wips)
    else:
        rows = sweep(CostArrays(dev, nn_costs, nn_source), weights, inv_acwts, wips)
    best = min(range(len(rows)), key=lambda i: rows[i]["wer"])
    params = Params(rows[best]["weight"], rows[best]["inv_acwt"], rows[best]["wip"])
    out = {"best": asdict(params), "dev_wer": rows[best]["wer"], "dev_utts": dev.num_utts,
           "dev_conversations": len(dev.conversations), "grid": rows}
    for name, grid, v in (("inv_acwt", inv_acwts, params.inv_acwt), ("wip", wips, params.wip)):
        if len(grid) > 1 and v in (min(grid), max(grid)):
            log.warning("best %s %g is at the edge of its grid %s: widen the grid", name, v, list(grid))
    log.info("best on %d utterances: weight %g inv_acwt %g wip %g -> WER %.2f %%", dev.num_utts,
             params.weight, params.inv_acwt, params.wip, rows[best]["wer"])
    if held_out is not None:
        if held_out.refs is None:
            raise RescoreError("references for the held-out set", path=held_out.path)
        ho = CostArrays(held_out, costs_for(params.weight), nn_source)
        out.update(held_out_wer=ho.wer(params), held_out_utts=held_out.num_utts,
                   held_out_conversations=len(held_out.conversations),
                   held_out_first_pass_wer=100.0 * float(ho.errors[ho.starts].sum()) / max(ho.ref_words, 1))
        log.info("held out (%d utterances): WER %.2f %% (rank 1: %.2f %%)", held_out.num_utts,
                 out["held_out_wer"], out["held_out_first_pass_wer"])
    return out
