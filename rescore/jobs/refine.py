"""Refining tune: rescore-tune for an NN LM whose costs depend on the setting they were scored at.

rescore-tune sweeps a grid over fixed NN LM costs (a lmwt.nn). With ``--state-carry rescored``
the engine starts each utterance from the LM state after the previous utterance's best
hypothesis by the final interpolated cost, so the costs depend on the weight (and inv-acwt and
wip) used when scoring: a setting tuned on costs scored at another setting predicts a WER that
``rescore-nbest --model --params`` does not give (a dev example: predicted 19.12 %, rescored
19.02 %). The cache history of ``--cache-window`` follows the decoded best hypotheses too.

The refining tune closes the loop with the model itself:

1. score the tuning set with the model at a starting setting;
2. tune on those costs;
3. score again at the tuned setting and retune, until the tuned setting is the one the costs
   were scored at (stable: its WER is then exactly what rescore-nbest gives), comes back to a
   setting already scored (a cycle), or after ``rounds`` scorings (default 3).

Each round logs the setting scored at, the WER it really has there (costs scored at that very
setting) and the setting tuned on them with its predicted WER. The result is the scored setting
with the lowest real WER (the stable one, when the loop converged).

:func:`refine_cross_validate` is the honest form: two folds by conversation, each refined on
its half and reported on the other half scored (with carry) at that fold's setting; it also
gives plain cross-validated tuning on the same costs of round 1 (its WER as predicted from the
fixed costs and as rescored at its setting) and a paired bootstrap of refined against plain.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from rescore.errors import OptionError, RescoreError
from rescore.io.files import write_json
from rescore.io.outdir import check_not_input
from rescore.jobs.nbest import lexicon_of, model_oov_penalty
from rescore.jobs.scoring import load_model, score_nbest_set
from rescore.jobs.tune import TuneJob, format_setting, write_one_best
from rescore.metrics import compare_systems, describe_bootstrap
from rescore.metrics.refnorm import normalize_refs
from rescore.nbest import checks as sanity
from rescore.nbest.combine import CostArrays, NnCosts, cross_validate, split_half, tune
from rescore.nbest.interp import KALDI_DEFAULT_WEIGHT, Params
from rescore.nbest.sets import load_nbest_dir
from rescore.settings import MAX_REFINE_ROUNDS, OOV_AUTO, REFINE_ROUNDS, EngineSettings
from rescore.vocab import count_words, read_sentences

log = logging.getLogger(__name__)
# rescore-nbest's setting with --model and no --params: where a refining tune starts by default
DEFAULT_START = Params(weight=KALDI_DEFAULT_WEIGHT, inv_acwt=10.0, wip=0.0)

Scorer = Callable[[object, Params], NnCosts]  # (NbestSet, setting) -> its NN costs (combine.NnCosts)


class ModelScorer:
    """NN costs (combine.NnCosts) of (parts of) one N-best set by one checkpoint, at a setting,
    with carry; the checkpoint is loaded once (scoring.load_model).

    Results are kept: a part asked for again at the same setting, or a part of a set already
    scored at it (the carry never crosses a conversation, so a conversation's costs do not
    depend on which others were scored beside it), is not scored again. Where the costs cannot
    depend on the setting (no rescored carry, no cache) every setting shares one scoring.
    """

    def __init__(self, model: str, settings: EngineSettings, train_counts=None, lexicon=()):
        self.model, self.settings = model, settings
        self.loaded = load_model(model, settings, train_counts, lexicon)  # (model, device, OOV penalty)
        self.depends = settings.state_carry == "rescored" or settings.cache_window > 0
        self._done: List[tuple] = []  # (conversation ids, setting or None, costs)
        self.scorings = 0

    def __call__(self, nbest, params: Params) -> NnCosts:
        key = params if self.depends else None
        ids = {c.id for c in nbest.conversations}
        for done_ids, done_key, costs in self._done:
            if done_key == key and ids <= done_ids:
                return costs
        self.scorings += 1
        log.info("scoring %d conversations at weight %g inv_acwt %g wip %g", len(ids), params.weight,
                 params.inv_acwt, params.wip)
        lm, device, penalty = self.loaded
        scored = score_nbest_set(lm, nbest, params, self.settings, device=device, oov_penalty=penalty)
        costs = NnCosts(list(scored), [list(scored.values())], [self.model])  # an error names the checkpoint
        self._done.append((ids, key, costs))
        return costs


def _setting(best: dict) -> Params:
    return Params(best["weight"], best["inv_acwt"], best["wip"])


def refine(nbest, scorer: Scorer, *, weights: Sequence[float], inv_acwts: Sequence[float],
           wips: Sequence[float], start: Params = DEFAULT_START, rounds: int = REFINE_ROUNDS) -> dict:
    """Refining tune of one model on nbest (with references): score at ``start``, tune, score at
    the tuned setting, ... (module docstring). scorer(nbest, setting) -> its NN costs (NnCosts).

    Returns {"best": setting (dict), "dev_wer" (its WER with costs scored at it: what
    rescore-nbest --params gives), "converged" (the last tuned setting is the one scored at),
    "stop": "stable" | "cycle" | "rounds", "rounds": [{"round", "scored_at", "scored_wer",
    "tuned", "predicted_wer"}], "dev_utts", "dev_conversations", "dev_choice", "scorings"}.
    """
    if nbest.refs is None:
        raise RescoreError("references for the tuning set (a data dir with 'text')", path=nbest.path)
    setting, log_rows, scored = start, [], {}
    stop = "rounds"
    for r in range(1, rounds + 1):
        costs = scorer(nbest, setting)
        arrays = CostArrays(nbest, costs)
        scored[setting] = (arrays.wer(setting), arrays.choice(setting))
        t = tune(nbest, weights=weights, inv_acwts=inv_acwts, wips=wips, nn_costs=costs)
        tuned = _setting(t["best"])
        log_rows.append({"round": r, "scored_at": setting.as_dict(), "scored_wer": scored[setting][0],
                         "tuned": tuned.as_dict(), "predicted_wer": t["dev_wer"]})
        log.info("round %d: scored at weight %g inv_acwt %g wip %g: WER %.2f %%; tuned on it: weight %g "
                 "inv_acwt %g wip %g, predicted WER %.2f %%", r, setting.weight, setting.inv_acwt, setting.wip,
                 scored[setting][0], tuned.weight, tuned.inv_acwt, tuned.wip, t["dev_wer"])
        if tuned == setting:
            stop = "stable"
            break
        if tuned in scored:
            stop = "cycle"
            log.warning("round %d: the tuned setting was scored in an earlier round (a cycle): keeping the "
                        "scored setting with the lowest WER", r)
            break
        setting = tuned
    if stop == "rounds":
        log.warning("the tuned setting is not stable after %d rounds (more with a larger --refine-rounds): "
                    "keeping the scored setting with the lowest WER", rounds)
    best = setting if stop == "stable" else min(scored, key=lambda s: scored[s][0])  # ties: first scored
    return {"best": best.as_dict(), "dev_wer": scored[best][0], "converged": stop == "stable", "stop": stop,
            "rounds": log_rows, "dev_utts": nbest.num_utts, "dev_conversations": len(nbest.conversations),
            "dev_choice": scored[best][1], "scorings": len(scored)}


def _held_out(part, costs: NnCosts, setting: Params) -> dict:
    """WER, errors, ref words and choice of part under setting with these costs."""
    arrays = CostArrays(part, costs)
    return {"wer": arrays.wer(setting), "errors": arrays.errors_of(setting), "ref_words": arrays.ref_words,
            "choice": arrays.choice(setting)}


def refine_cross_validate(nbest, scorer: Scorer, *, weights: Sequence[float], inv_acwts: Sequence[float],
                          wips: Sequence[float], start: Params = DEFAULT_START, rounds: int = REFINE_ROUNDS,
                          bootstrap: int = 1000) -> dict:
    """Two folds by conversation (combine.split_half): refine on each half, report it on the
    other half scored at the fold's setting; pooled over both. The same run gives plain
    cross-validated tuning (combine.cross_validate on round 1's costs, scored at ``start``),
    reported both as tuned (its WER predicted from those fixed costs) and rescored at its setting
    (what rescore-nbest --params gives), and a paired bootstrap (over conversations) of the
    refined 1-best against the plain rescored one.

    Returns {"folds": [{"tuned_on", "reported_on", **refine(), "held_out_wer", "held_out_utts",
    "plain": {"best", "predicted_wer", "held_out_wer"}}], "pooled_wer", "pooled_errors",
    "pooled_ref_words", "pooled_utts", "pooled_first_pass_wer", "plain_predicted_wer",
    "plain_wer", "comparison" (rescore.metrics.compare_systems, as JSON), "pooled_choice",
    "plain_choice"}.
    """
    grids = dict(weights=weights, inv_acwts=inv_acwts, wips=wips)
    first = scorer(nbest, start)  # round 1 of both folds and the plain tune's costs, one scoring
    plain_cv = cross_validate(nbest, nn_costs=first, **grids)
    halves = split_half(nbest)
    folds, pooled = [], {"refined": {}, "plain": {}, "refined_errors": 0, "plain_errors": 0}
    for k, (tuned, reported) in enumerate((halves, halves[::-1])):
        log.info("fold %d: refine on half %d (%d conversations), report on half %d", k + 1, k + 1,
                 len(tuned.conversations), 2 - k)
        fold = {"tuned_on": k + 1, "reported_on": 2 - k, **refine(tuned, scorer, start=start, rounds=rounds,
                                                                    **grids)}
        setting, p = Params(**fold["best"]), plain_cv["folds"][k]
        plain = Params(**p["best"])
        ho = _held_out(reported, scorer(reported, setting), setting)
        rescored = _held_out(reported, scorer(reported, plain), plain)
        fold.update(held_out_wer=ho["wer"], held_out_errors=ho["errors"], held_out_ref_words=ho["ref_words"],
                    held_out_utts=reported.num_utts,
                    plain={"best": plain.as_dict(), "predicted_wer": p["held_out_wer"],
                           "held_out_wer": rescored["wer"]})
        for name, part in (("refined", ho), ("plain", rescored)):
            pooled[name].update(part["choice"])
            pooled[name + "_errors"] += part["errors"]
        folds.append(fold)
        log.info("fold %d: half %d under the refined setting WER %.2f %%, under plain tuning %.2f %% (predicted "
                 "%.2f %%)", k + 1, 2 - k, ho["wer"], rescored["wer"], p["held_out_wer"])
    ref_words = plain_cv["pooled_ref_words"]
    order = [u.id for u in nbest.utterances()]
    out = {"folds": folds, "pooled_utts": nbest.num_utts, "pooled_ref_words": ref_words,
           "pooled_errors": pooled["refined_errors"],
           "pooled_wer": 100.0 * pooled["refined_errors"] / ref_words,
           "plain_wer": 100.0 * pooled["plain_errors"] / ref_words,
           "plain_predicted_wer": plain_cv["pooled_wer"],
           "pooled_first_pass_wer": plain_cv["pooled_first_pass_wer"],
           "pooled_choice": {u: pooled["refined"][u] for u in order},
           "plain_choice": {u: pooled["plain"][u] for u in order}}
    out["comparison"] = compare_choices(nbest, {"plain": out["plain_choice"], "refined": out["pooled_choice"]},
                                        draws=bootstrap).as_dict()
    return out


def compare_choices(nbest, choices: Dict[str, Dict[str, int]], draws: int = 1000):
    """rescore.metrics.compare_systems of the 1-bests of nbest (name -> utt -> rank; the first
    is the baseline), the bootstrap resampling whole conversations (recordings or speakers)."""
    utts = {u.id: u for u in nbest.utterances()}
    systems = {name: {u: utts[u].hyps[r].words for u, r in c.items()} for name, c in choices.items()}
    groups = {u.id: c.id for c in nbest.conversations for u in c.utterances}
    return compare_systems(nbest.refs, systems, groups=groups, grouping=nbest.grouping, draws=draws)


# --------------------------------------------------------------------------------------------
# rescore-tune --refine-model


@dataclass(frozen=True)
class RefineJob:
    """rescore-tune --refine-model: the refining tune of ``tune``'s N-best dir and grids with
    the checkpoint ``model``, scored with the engine ``scoring``; with ``tune.cross_validate`` its
    two-fold form. ``tune``'s params_out (not with cross_validate), report and hyp_out are
    written; it has no --nn-costs (the model gives the costs), no other way of holding out and no
    --apply-to (apply the setting with rescore-nbest --model --params). Checked when built; the
    OOV penalty's default is rescore-nbest's (pipeline.model_oov_penalty)."""

    tune: TuneJob
    model: str
    scoring: EngineSettings = field(default_factory=EngineSettings)
    start: Params = DEFAULT_START
    rounds: int = REFINE_ROUNDS
    train_text: Optional[str] = None  # LM training text, for --oov-penalty auto
    allow_oov_rate: bool = False  # score an LM that lacks most of the words (rescore.nbest.checks)

    def __post_init__(self):
        t = self.tune
        for option, v in (("--nn-costs", t.nn_costs), ("--split-half", t.split_half), ("--dev-utts", t.dev_utts),
                          ("--eval-utts", t.eval_utts), ("--apply-to", t.apply)):
            if v:
                raise OptionError("not with --refine-model (the model gives the NN LM costs; hold out with "
                                  "--cross-validate, apply the setting with rescore-nbest --model --params)",
                                  option=option)
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) \
                or not 1 <= self.rounds <= MAX_REFINE_ROUNDS:
            raise OptionError(f"an integer in [1, {MAX_REFINE_ROUNDS}]", option="--refine-rounds",
                              got=str(self.rounds))
        if self.start.num_models != 1:
            raise OptionError("a one-model setting (weight, inv_acwt, wip)", option="--refine-start")
        object.__setattr__(self, "scoring", model_oov_penalty(self.scoring, t.nbest_dir, t.words_txt,
                                                              self.train_text))
        if self.scoring.state_carry != "rescored" and self.scoring.cache_window == 0:
            log.warning("--state-carry %s: the NN LM costs do not depend on the setting, so refining cannot "
                        "change the result (one scoring serves every round)", self.scoring.state_carry)
        inputs = t.inputs() + [Path(p) for p in (self.model, self.train_text) if p is not None]
        for option, p in (("--params-out", t.params_out), ("--report", t.report), ("--hyp-out", t.hyp_out)):
            if p is not None:
                check_not_input(Path(p), inputs, option)


def _strip(result: dict) -> dict:
    """The result without per-utterance choices (the report is a summary; --hyp-out has them)."""
    out = {k: v for k, v in result.items() if not k.endswith("_choice")}
    if "folds" in out:
        out["folds"] = [{k: v for k, v in f.items() if not k.endswith("_choice")} for f in out["folds"]]
    return out


def run_refine(job: RefineJob) -> dict:
    """Run a refining tune job: refine() or refine_cross_validate()'s result; the outputs of
    job.tune written (atomically) at the end."""
    t = job.tune
    nbest = load_nbest_dir(t.nbest_dir, t.data_dir, t.words_txt, allow_missing=t.allow_missing)
    if nbest.refs is None:
        raise RescoreError("references for the tuning set ('text' in the data dir)", path=t.data_dir)
    if t.normalize_refs:
        words = {w for u in nbest.utterances() for h in u.hyps for w in h.words}
        nbest.refs = normalize_refs(nbest.refs, words.union(lexicon_of(t.nbest_dir, t.words_txt)))
    sentences = read_sentences(job.train_text) if job.train_text else None
    sanity.check_nbest_input(nbest, (job.model,), t.words_txt, job.allow_oov_rate, train_sentences=sentences,
                             train_text=job.train_text)  # as rescore-nbest's
    train_counts = count_words(sentences) if sentences is not None else None
    del sentences
    lexicon = lexicon_of(t.nbest_dir, t.words_txt) if job.scoring.oov_penalty == OOV_AUTO else ()
    scorer = ModelScorer(job.model, job.scoring, train_counts, lexicon)
    grids = dict(weights=t.weights, inv_acwts=t.inv_acwts, wips=t.wips, start=job.start, rounds=job.rounds)
    if t.cross_validate:
        result = refine_cross_validate(nbest, scorer, **grids)
        choice = result["pooled_choice"]
    else:
        result = refine(nbest, scorer, **grids)
        choice = result["dev_choice"]
        if t.params_out:
            Params(**result["best"]).to_json(t.params_out, tuned_on=t.nbest_dir, dev_wer=result["dev_wer"],
                                             refined_with=job.model, state_carry=job.scoring.state_carry)
    result["scorings"] = scorer.scorings
    if t.hyp_out:
        write_one_best(t.hyp_out, nbest, choice)
    if t.report:
        write_json(t.report, _strip(result))
    return result


def _fmt(s: dict) -> str:
    return format_setting(s)


def format_rounds(result: dict, indent: str = "") -> List[str]:
    """One line per round of refine()'s result, then the outcome."""
    lines = [f"{indent}round {r['round']}: scored at {_fmt(r['scored_at'])}: WER {r['scored_wer']:.2f} %; tuned "
             f"on it: {_fmt(r['tuned'])} (predicted {r['predicted_wer']:.2f} %)" for r in result["rounds"]]
    how = {"stable": "stable", "cycle": "a cycle: the best scored setting kept",
           "rounds": "not stable after the last round: the best scored setting kept"}[result["stop"]]
    lines.append(f"{indent}refined ({how}): {_fmt(result['best'])}  WER {result['dev_wer']:.2f} % on "
                 f"{result['dev_utts']} utterances, costs scored at this setting")
    return lines


def format_refine(result: dict) -> str:
    """The readable result of run_refine."""
    if "folds" not in result:
        return "\n".join(format_rounds(result))
    lines = []
    for f in result["folds"]:
        lines.append(f"fold {f['tuned_on']}: refined on half {f['tuned_on']} ({f['dev_utts']} utterances, "
                     f"{f['dev_conversations']} conversation{'s' if f['dev_conversations'] != 1 else ''})")
        lines += format_rounds(f, "  ")
        p = f["plain"]
        lines.append(f"  half {f['reported_on']} ({f['held_out_utts']} utterances): refined WER "
                     f"{f['held_out_wer']:.2f} %; plain tuning ({_fmt(p['best'])}): {p['held_out_wer']:.2f} % "
                     f"rescored at it (predicted {p['predicted_wer']:.2f} %)")
    lines.append(f"pooled ({result['pooled_utts']} utterances, each under the setting tuned on the other half, "
                 f"scored at it): refined WER {result['pooled_wer']:.2f} % [ {result['pooled_errors']} / "
                 f"{result['pooled_ref_words']} ]; plain tuning {result['plain_wer']:.2f} % (predicted "
                 f"{result['plain_predicted_wer']:.2f} %); rank 1 {result['pooled_first_pass_wer']:.2f} %")
    cmp = result["comparison"]
    d = cmp["differences"][0]
    ci = "no CI" if d["ci"] is None else f"[{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
    p = "" if d["p_value"] is None else f", p {d['p_value']:.3f}"
    lines.append(f"refined - plain: {d['wer_diff']:+.2f} points {ci}{p}; "
                 f"{describe_bootstrap(cmp['bootstrap'], 'plain')}")
    if cmp["bootstrap"] and cmp["bootstrap"].get("note"):
        lines.append(f"note: {cmp['bootstrap']['note']}")
    return "\n".join(lines)


def refine_job(tune: TuneJob, *, refine_model: Optional[str], refine_rounds: int = REFINE_ROUNDS,
               refine_start: Optional[str] = None, train_text: Optional[str] = None, allow_oov_rate: bool = False,
               **settings):
    """rescore-tune's --refine-* options (and the engine settings they pass on, by field name:
    state_carry, oov_penalty, device) as a RefineJob; None without --refine-model (the command
    refuses the others without it: rescore.cli.tune.NEEDS)."""
    if refine_model is None:
        return None
    start = Params.from_json(refine_start) if refine_start else DEFAULT_START
    return RefineJob(tune=tune, model=refine_model, scoring=EngineSettings(**settings), start=start,
                     rounds=refine_rounds, train_text=train_text, allow_oov_rate=allow_oov_rate)


def warn_carried_costs(nn_cost_files: Sequence[str]) -> List[str]:
    """A note (logged at INFO: plain tuning on such costs is a sound choice, and on a small dev
    set the refining tune did worse on test) for each NN LM cost file that rescore-nbest scored
    with a model and rescored
    carry (or a cache), as its OUT_DIR's manifest.json records: those costs hold only at the
    setting they were scored at, so a sweep over them predicts WERs that rescore-nbest --params
    does not give. Returns the warnings (none for a file without such a record)."""
    out = []
    for f in nn_cost_files:
        manifest = Path(f).parent / "manifest.json"
        try:
            s = json.loads(manifest.read_text(encoding="utf-8"))["settings"]
            scoring, p = s.get("scoring") or {}, s["params"]
            carried = s.get("command") == "rescore-nbest" and s.get("model") and (
                scoring.get("state_carry") == "rescored" or scoring.get("cache_window", 0) > 0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # no record of how the costs were scored: nothing to say
        if carried:
            out.append(f"{f} was scored by rescore-nbest with --state-carry {scoring.get('state_carry')} at weight "
                       f"{p.get('weight')} inv_acwt {p.get('inv_acwt')} wip {p.get('wip')} ({manifest}): the carried "
                       f"state depends on that setting, so the WER predicted for another setting can differ from "
                       f"what rescore-nbest --params gives (--refine-model rescores at the tuned setting)")
            log.info("%s", out[-1])
    return out
