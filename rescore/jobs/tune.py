"""The job of rescore-tune: sweep (weight, inv_acwt, wip) and the models' shares by WER on an
N-best dir (rescore.nbest.combine.tune), report it honestly (a held-out part, or cross-validation),
and apply the best setting to another N-best dir (rescore.jobs.nbest.NbestJob).

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) before any work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import OptionError, RescoreError, check
from rescore.formats.kaldi import kaldi_dir
from rescore.io.files import atomic_output, write_json
from rescore.io.kaldi import read_text_table
from rescore.io.outdir import check_not_input
from rescore.nbest.cascade import Cascade, CascadeRanks
from rescore.nbest.combine import NnCosts, cross_validate, mix_grid, split_half, tune
from rescore.nbest.interp import Params, check_inv_acwt, check_mix, check_weight, check_wip
from rescore.jobs.nbest import NbestJob, check_paths, lexicon_of, rescore_nbest_dir
from rescore.metrics import format_report
from rescore.metrics.refnorm import normalize_refs
from rescore.nbest import checks as sanity
from rescore.nbest.checks import tuned_on_warning
from rescore.nbest.sets import load_nbest_dir
from rescore.nbest.step_output import default_cost_names, load_step_output, step_input_files, step_jobs

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

MAX_TUNE_SETTINGS = 100_000  # product of the grid axes of rescore-tune


@dataclass(frozen=True)
class TuneJob:
    """rescore-tune: sweep (weight, inv_acwt, wip) by WER on NBEST_DIR; report on a held-out part
    (split_half, or eval_utts), or cross-validate (tune on each half of the conversations,
    report on the other, pool), and apply the best setting to another N-best dir (``apply``, an
    NbestJob whose params are replaced by the best ones). With K > 1 cost files (one per model,
    the same hypotheses) the models' shares are swept too (``mixes``, an outer loop; default:
    combine.mix_grid of 0:1:0.1). Checked when built."""

    nbest_dir: str
    data_dir: str
    weights: Sequence[float]
    inv_acwts: Sequence[float]
    wips: Sequence[float]
    words_txt: Optional[str] = None
    nn_costs: Tuple[str, ...] = ()  # lmwt.nn files, one per model
    split_half: bool = False
    dev_utts: Optional[str] = None
    eval_utts: Optional[str] = None
    params_out: Optional[str] = None
    report: Optional[str] = None
    apply: Optional[NbestJob] = None
    allow_missing: bool = False
    cross_validate: bool = False  # two folds by conversation (combine.cross_validate)
    hyp_out: Optional[str] = None  # 1-best text of the reported set (pooled under cross_validate)
    mixes: Optional[Sequence[Tuple[float, ...]]] = None  # shares swept with several cost files
    normalize_refs: bool = False  # lower-case the references, strip punctuation (rescore.metrics.refnorm)
    # a cascade's ranking (rescore-nbest's lmwt.cascade) and the limits swept under it (rescore.nbest.cascade)
    cascade_ranks: Optional[str] = None
    cascade_tops: Tuple[int, ...] = ()  # K values (0: no limit by rank); none: the scored hypotheses
    cascade_margins: Tuple[float, ...] = ()  # M values in nats; none: no limit by cost
    # NBEST_DIR as a step's output dir: its archives.JOB dirs (rescore.nbest.step_output); None for an N-best dir
    step_jobs: Optional[List[Path]] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        self._step_dir()
        self._check_mixes()
        self._check_cascade()
        if self.split_half and (self.dev_utts or self.eval_utts):
            raise OptionError("one way of holding out: --split-half and --dev-utts/--eval-utts exclude each other",
                              option="--split-half")
        if self.cross_validate:
            for option, v in (("--split-half", self.split_half), ("--dev-utts", self.dev_utts),
                              ("--eval-utts", self.eval_utts)):
                if v:
                    raise OptionError("one way of holding out: --cross-validate holds out each half in turn",
                                      option=option)
            if self.params_out is not None:
                raise OptionError("one setting; --cross-validate tunes two (one per half: both are in "
                                  "--report's 'folds'); tune without it for a setting to apply",
                                  option="--params-out", got=self.params_out)
            if self.apply is not None:
                raise OptionError("one setting to apply; --cross-validate tunes two (tune without it for "
                                  "--apply-to)", option="--apply-to")
        for name, values, check_value in (("--weights", self.weights, check_weight),
                                          ("--inv-acwts", self.inv_acwts, check_inv_acwt),
                                          ("--wips", self.wips, check_wip)):
            check(bool(values), "at least one value", name, "none")
            for v in values:
                check_value(v, name)
        n = len(self.weights if self.nn_costs else [0.0]) * len(self.inv_acwts) * len(self.wips) * len(self.mixes)
        check(n <= MAX_TUNE_SETTINGS, f"a grid of at most {MAX_TUNE_SETTINGS} settings (coarser steps, or tune "
              f"one axis at a time)", "--weights/--inv-acwts/--wips", f"{n} settings")
        if self.apply is not None and self.nn_costs and not self.apply.num_models \
                and any(w != 0 for w in self.weights):
            raise OptionError("--apply-nn-costs (the setting tuned with --nn-costs has an NN LM weight)",
                              option="--apply-to")
        if self.apply is not None and self.cascade_ranks is not None:
            raise OptionError("a setting without a cascade: --apply-to would apply the weights without the "
                              "cascade's limits, which need the test set's own ranking (write them with "
                              "--params-out, then rescore-nbest --params with the two --model on the test set)",
                              option="--apply-to", got=f"{self.apply.nbest_dir} with --cascade {self.cascade_ranks}")
        k = len(self.nn_costs)
        check(self.apply is None or k < 2 or self.apply.num_models in (0, k),
              f"{k} NN LM cost files for --apply-to, one per model as for tuning", "--apply-nn-costs",
              self.apply.num_models if self.apply is not None else 0)
        outputs = [("--params-out", self.params_out), ("--report", self.report), ("--hyp-out", self.hyp_out)]
        inputs = self.inputs()
        for option, p in outputs:
            if p is not None:
                check_not_input(Path(p), inputs, option)
        given = [(o, Path(p).resolve()) for o, p in outputs if p is not None]
        for i, (o, p) in enumerate(given):
            for o2, p2 in given[:i]:
                check(p != p2, f"different files for {o2} and {o}", o, p)

    def _step_dir(self) -> None:
        """A step's output dir (rescore.nbest.step_output): nn_costs are file names of its archives.JOB,
        by default the ones the step wrote."""
        jobs = step_jobs(self.nbest_dir)
        object.__setattr__(self, "step_jobs", jobs)
        if jobs is None:
            return
        if not self.nn_costs:
            object.__setattr__(self, "nn_costs", default_cost_names(jobs))
        for name in self.nn_costs:
            check(Path(name).name == str(name), f"file names in each {self.nbest_dir}/archives.JOB (e.g. lmwt.nn) "
                  "with a step's output dir", "--nn-costs", name)
        if self.apply is not None and step_jobs(self.apply.nbest_dir) is not None:
            raise OptionError("an N-best dir; for a step's output dir run the step on the test decode with "
                              "--params (what --params-out writes)", option="--apply-to", got=self.apply.nbest_dir)

    def _check_mixes(self) -> None:
        """nn_costs as a tuple; mixes: one share per cost file (default: the grid)."""
        object.__setattr__(self, "nn_costs", check_paths(self.nn_costs, "--nn-costs"))
        k = len(self.nn_costs)
        if self.mixes is None:
            object.__setattr__(self, "mixes", mix_grid([round(0.1 * i, 10) for i in range(11)], k or 1))
            return
        check(k >= 2, "two or more --nn-costs files (one per model) to sweep shares", "--mixes", f"{k} files")
        mixes = [check_mix(m, "--mixes") for m in self.mixes]
        check(bool(mixes) and all(len(m) == k for m in mixes), f"mixes of {k} shares, one per --nn-costs file",
              "--mixes", f"{sorted({len(m) for m in mixes})} shares")
        object.__setattr__(self, "mixes", mixes)

    def _check_cascade(self) -> None:
        """The cascade's limits need its ranking, and are checked as rescore-nbest's."""
        object.__setattr__(self, "cascade_tops", tuple(sorted(set(self.cascade_tops))))
        object.__setattr__(self, "cascade_margins", tuple(sorted(set(self.cascade_margins))))
        for option, values in (("--cascade-tops", self.cascade_tops), ("--cascade-margins", self.cascade_margins)):
            check(not values or self.cascade_ranks is not None, "--cascade (the lmwt.cascade of the scoring run) "
                  "to sweep a cascade's limits", option, ",".join(f"{v:g}" for v in values))
        for k in self.cascade_tops:
            Cascade(top=k)
        for m in self.cascade_margins:
            Cascade(margin=m)
        if self.cascade_ranks is not None:
            if self.step_jobs is not None:
                check(Path(self.cascade_ranks).name == str(self.cascade_ranks), f"a file name in each "
                      f"{self.nbest_dir}/archives.JOB (lmwt.cascade) with a step's output dir", "--cascade",
                      self.cascade_ranks)
            check(bool(self.nn_costs), "--nn-costs (the cascade's lmwt.nn.1 and lmwt.nn.2)", "--cascade",
                  self.cascade_ranks)
            n = len(self.cascade_tops or [0]) * len(self.cascade_margins or [0])
            check(n * len(self.weights) * len(self.inv_acwts) * len(self.wips) * len(self.mixes) <= MAX_TUNE_SETTINGS,
                  f"a grid of at most {MAX_TUNE_SETTINGS} settings", "--cascade-tops/--cascade-margins",
                  f"{n} cascade settings")

    def cascades(self) -> List[Cascade]:
        """The cascade settings swept (every K with every M), none without --cascade."""
        if self.cascade_ranks is None:
            return []
        return [Cascade(k, m) for k in (self.cascade_tops or (0,)) for m in (self.cascade_margins or (None,))]

    def inputs(self) -> List[Path]:
        files = kaldi_dir(self.nbest_dir, self.words_txt).files(self.data_dir)
        if self.step_jobs is not None:
            files += step_input_files(self.nbest_dir, self.nn_costs)
        else:
            files += [Path(p) for p in self.nn_costs]
        if self.cascade_ranks is not None:
            files += [j / self.cascade_ranks for j in self.step_jobs] if self.step_jobs is not None else \
                [Path(self.cascade_ranks)]
        files += [Path(p) for p in (self.dev_utts, self.eval_utts) if p is not None]
        if self.apply is not None:
            files += self.apply.inputs()
        return files


def step_cost_names(nbest_dir: PathLike) -> Optional[Tuple[str, ...]]:
    """NBEST_DIR as a step's output dir (rescore.nbest.step_output): the NN LM cost files its step
    wrote in each archives.JOB (lmwt.nn, or lmwt.nn.1 ... lmwt.nn.K of K models); None for an
    N-best dir."""
    jobs = step_jobs(nbest_dir)
    return None if jobs is None else default_cost_names(jobs)


def read_utt_list(path: PathLike) -> List[str]:
    """First field of each line: a plain list, or a data/text, utt2spk, segments file."""
    keys = read_text_table(path, "tokens").keys
    if not keys:
        raise RescoreError("at least one utterance id", path=path, got="an empty file")
    return keys


def _select(nbest, path: PathLike, what: str):
    """The utterances of nbest listed in path; an error when the list selects none of them."""
    utts = read_utt_list(path)
    part = nbest.subset_utts(utts)
    if part.num_utts == 0:
        raise RescoreError(f"{what} utterances of {nbest.path} (none of the {len(utts)} listed is in it, "
                           f"e.g. '{utts[0]}')", path=path)
    if part.num_utts < len(set(utts)):
        log.warning("%s: %d of the %d listed utterances are not in %s", path, len(set(utts)) - part.num_utts,
                    len(set(utts)), nbest.path)
    return part


def write_one_best(path: PathLike, nbest, choice: Dict[str, int]) -> None:
    """Kaldi text (``utt w1 w2 ...``, no trailing space) of each utterance's chosen hypothesis
    (choice: utt -> 0-based rank), in the set's order; written atomically."""
    with atomic_output(path) as f:
        for u in nbest.utterances():
            f.write(" ".join([u.id, *u.hyps[choice[u.id]].words]) + "\n")
    log.info("wrote %s (%d utterances)", path, nbest.num_utts)


def format_setting(best: Mapping[str, float]) -> str:
    """'weight 0.3  inv_acwt 10  wip 0' (every field of a tuned setting; a mix as 'mix 0.6,0.4')."""
    return "  ".join(f"{k} {','.join(f'{x:g}' for x in v)}" if isinstance(v, (list, tuple)) else f"{k} {v:g}"
                     for k, v in best.items())


def params_cascade(result: Mapping[str, object]) -> dict:
    """What --params-out records of a tune() result's cascade: {"cascade": {top, margin}} where
    the best has a limit (rescore-nbest --params applies it), else nothing; the best being every
    hypothesis the scoring run scored is that run's own limits, which are not known here (a
    warning says so)."""
    c = result.get("cascade")
    if not c:
        return {}
    if all(v is None for v in c.values()):
        log.warning("the best cascade setting is every hypothesis the scoring run's cascade scored: --params-out "
                    "records no cascade (give rescore-nbest that run's --cascade-top / --cascade-margin)")
        return {}
    return {"cascade": dict(c)}


def format_cascade(result: Mapping[str, object]) -> str:
    """'  cascade-top 5  cascade-margin 8' of a tune() result with a cascade ('' without)."""
    c = result.get("cascade")
    if not c:
        return ""
    return "".join(f"  cascade-{k} {v:g}" for k, v in c.items() if v is not None) or "  cascade: every scored"


def format_cross_validation(result: dict) -> str:
    """The readable result of combine.cross_validate: per fold the setting and the WER on the
    half it was tuned on and on the other, then the pooled figure."""
    lines = []
    for f in result["folds"]:
        convs = f"{f['dev_conversations']} conversation{'s' if f['dev_conversations'] != 1 else ''}"
        lines.append(f"tuned on half {f['tuned_on']} ({f['dev_utts']} utterances, {convs}): "
                     f"{format_setting(f['best'])}{format_cascade(f)}  (WER {f['dev_wer']:.2f} % there)")
        lines.append(f"  half {f['reported_on']} ({f['held_out_utts']} utterances) under it: WER "
                     f"{f['held_out_wer']:.2f} %  (rank 1: {f['held_out_first_pass_wer']:.2f} %)")
    lines.append(f"pooled ({result['pooled_utts']} utterances, each under the setting tuned on the other half): "
                 f"WER {result['pooled_wer']:.2f} % [ {result['pooled_errors']} / {result['pooled_ref_words']} ]  "
                 f"(rank 1: {result['pooled_first_pass_wer']:.2f} %)")
    return "\n".join(lines)


def format_tuned(result: dict) -> str:
    """The readable result of tune_nbest_dir without cross-validation: the best setting, its WER on
    the set tuned on and on the held-out part (if any), and the report of the set it was applied
    to (if any)."""
    lines = [f"best setting: {format_setting(result['best'])}{format_cascade(result)}",
             f"tuned on {result['dev_utts']} utterances: WER {result['dev_wer']:.2f} %"]
    if "held_out_wer" in result:
        lines.append(f"held out {result['held_out_utts']} utterances: WER {result['held_out_wer']:.2f} % "
                     f"(rank 1: {result['held_out_first_pass_wer']:.2f} %)")
    if result.get("applied") is not None:
        lines.append(format_report(result["applied"]))
    return "\n".join(lines)


def _without_choices(result: dict) -> dict:
    """The result without its per-utterance choices (the report stays a summary; --hyp-out has them)."""
    def strip(d):
        return {k: v for k, v in d.items() if not k.endswith("_choice")}

    out = strip(result)
    if "folds" in out:
        out["folds"] = [strip(f) for f in out["folds"]]
    return out


def warn_unusual(job: TuneJob) -> None:
    """Warn of settings that are legal but usually a mistake: a grid of acoustic scales given
    where their inverses are asked for, and a setting applied to the set it was tuned on."""
    if all(0 < a < 1 for a in job.inv_acwts):
        log.warning("--inv-acwts %s are the size of Kaldi's acoustic scale (acwt, e.g. 0.1); --inv-acwts are "
                    "its inverses (LMWT, usually 6 to 20)", ",".join(f"{a:g}" for a in job.inv_acwts))
    said = job.apply is not None and tuned_on_warning(job.apply.nbest_dir, job.nbest_dir)
    if said:
        log.warning("%s", said)


def load_tuning_set(job: TuneJob, cost_names: Sequence[str] = ()):
    """(the tuning set with its references, the NN costs of ``cost_names`` of a step's output dir
    or None): loaded, its references normalised with --normalize-refs, and checked as
    rescore-nbest checks its input (rescore.nbest.checks.check_nbest_input)."""
    costs = None
    if job.step_jobs is not None:  # every job of a step's output dir, and their costs
        nbest, costs = load_step_output(job.nbest_dir, job.data_dir, job.words_txt,
                                        allow_missing=job.allow_missing, cost_names=cost_names)
    else:
        nbest = load_nbest_dir(job.nbest_dir, job.data_dir, job.words_txt, allow_missing=job.allow_missing)
    if nbest.refs is None:
        raise RescoreError("references for the tuning set ('text' in the data dir)", path=job.data_dir)
    if job.normalize_refs:
        words = {w for u in nbest.utterances() for h in u.hyps for w in h.words}
        nbest.refs = normalize_refs(nbest.refs, words.union(lexicon_of(job.nbest_dir, job.words_txt)))
        log.info("references normalised (--normalize-refs): typographic quotes as ASCII, lower case, punctuation "
                 "stripped")
    sanity.check_nbest_input(nbest, (), job.words_txt)
    return nbest, costs


def tune_nbest_dir(job: TuneJob) -> dict:
    """Run a rescore-tune job. Returns tune()'s result (with ``cross_validate``:
    combine.cross_validate's); with ``apply``, result['applied'] holds the report of the applied
    set (or None without its references)."""
    if job.apply is not None:
        job.apply.output_set().check()
    warn_unusual(job)
    nbest, costs = load_tuning_set(job, job.nn_costs)
    if job.step_jobs is None:
        costs = NnCosts.read(nbest, job.nn_costs) if job.nn_costs else None  # other hypotheses fail here
    cascades = None
    if job.cascade_ranks is not None:
        ranks = CascadeRanks.read_all([job.cascade_ranks] if job.step_jobs is None else
                                      [j / job.cascade_ranks for j in job.step_jobs])
        ranks.mask(costs.keys, Cascade())  # (every hypothesis of the set has its rank: checked here)
        cascades = (ranks, job.cascades())
        log.info("cascade: %d of %d hypotheses were scored by the last model; sweeping %d cascade settings",
                 int(ranks.scored.sum()), len(ranks.scored), len(cascades[1]))
    if job.cross_validate:
        result = cross_validate(nbest, weights=job.weights, inv_acwts=job.inv_acwts, wips=job.wips,
                                nn_costs=costs, mixes=job.mixes, cascades=cascades)
        if job.hyp_out:
            write_one_best(job.hyp_out, nbest, result["pooled_choice"])
        if job.report:
            write_json(job.report, _without_choices(result))
        return result
    held_out = None
    if job.split_half:
        nbest, held_out = split_half(nbest)
    else:
        if job.eval_utts:
            held_out = _select(nbest, job.eval_utts, "evaluation")
        if job.dev_utts:
            nbest = _select(nbest, job.dev_utts, "tuning")
        if held_out is not None and {u.id for u in held_out.utterances()} & {u.id for u in nbest.utterances()}:
            log.warning("the tuning and evaluation utterances overlap: the held-out WER is not held out")
    result = tune(nbest, weights=job.weights, inv_acwts=job.inv_acwts, wips=job.wips, nn_costs=costs,
                  held_out=held_out, mixes=job.mixes, cascades=cascades)
    best = Params(**result["best"])
    if job.params_out:
        best.to_json(job.params_out, tuned_on=job.nbest_dir, dev_wer=result["dev_wer"], **params_cascade(result))
    if job.hyp_out:  # the set the figure printed last is of: held out if any, else tuned on
        if held_out is not None:
            write_one_best(job.hyp_out, held_out, result["held_out_choice"])
        else:
            write_one_best(job.hyp_out, nbest, result["dev_choice"])
    if job.report:
        write_json(job.report, _without_choices(result))
    if job.apply is not None:
        # a test dir scored without NN costs (only weight 0 was swept) takes no mix
        applied = replace(job.apply, params=best if job.apply.num_models else best.replace(mix=(1.0,)),
                          extra_report={"tuned_on": job.nbest_dir, "tuned_dev_wer": result["dev_wer"]})
        result = {**result, "applied": rescore_nbest_dir(applied)}
    return result
