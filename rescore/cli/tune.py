"""rescore-tune: sweep the NN LM weight, the LM weight (inv-acwt) and the word insertion
penalty on a dev N-best dir; report the best setting and, where asked, apply it elsewhere."""

from __future__ import annotations

import logging

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.options import MAX_BATCH, Count, Grid, Need
from rescore.cli.examples import attach
from rescore.cli.engine_options import engine_option
from rescore.jobs.nbest import NbestJob
from rescore.jobs.refine import format_refine, refine_job, run_refine, warn_carried_costs
from rescore.jobs.tune import TuneJob, format_cross_validation, format_tuned, step_cost_names, tune_nbest_dir
from rescore.nbest.combine import mix_grid
from rescore.settings import MAX_REFINE_ROUNDS, REFINE_ROUNDS

log = logging.getLogger("rescore-tune")


def _models(p) -> int:
    """How many models' costs a run tunes: --nn-costs, else a step's output dir's own."""
    return len(p["nn_costs"] or step_cost_names(p["nbest_dir"]) or ())


APPLY = Need(lambda p: p["apply_to"] is not None, "--apply-to (the test dir the tuned setting is applied to)")
REFINE = Need(lambda p: p["refine_model"] is not None, "--refine-model (the LM a refining tune scores with)")
# What each option needs to act (rescore.cli.options.Need) and --help's sections
NEEDS = {
    "--mixes": Need(lambda p: _models(p) >= 2, "two or more --nn-costs (one per model)"),
    "--cascade": Need(lambda p: bool(p["nn_costs"]), "--nn-costs (the cascade's lmwt.nn.1 and lmwt.nn.2)"),
    **{name: Need(lambda p: p["cascade_ranks"] is not None, "--cascade (the ranking the limits cut)")
       for name in ("--cascade-tops", "--cascade-margins")},
    **{name: APPLY for name in ("--apply-data-dir", "--apply-nn-costs", "--apply-words-txt")},
    **{name: REFINE for name in ("--refine-rounds", "--refine-start", "--state-carry", "--oov-penalty",
                                 "--train-text", "--allow-oov-rate", "--device")},
}
GROUPS = {
    "Input": ["--data-dir", "--words-txt", "--nn-costs", "--cascade", "--allow-missing", "--normalize-refs"],
    "Weights": ["--weights", "--inv-acwts", "--wips", "--mixes", "--cascade-tops", "--cascade-margins"],
    "Output": ["--split-half", "--dev-utts", "--eval-utts", "--cross-validate", "--params-out", "--report",
               "--hyp-out", "--apply-to", "--apply-data-dir", "--apply-nn-costs", "--apply-words-txt"],
    "Model": ["--refine-model", "--refine-rounds", "--refine-start", "--state-carry", "--oov-penalty",
              "--train-text", "--allow-oov-rate"],
    "Performance": ["--device"],
}


@command(groups=GROUPS, needs=NEEDS)
@click.argument("nbest_dir", type=click.Path(file_okay=False), metavar="NBEST_DIR|STEP_OUTPUT_DIR")
@click.option("--data-dir", type=click.Path(file_okay=False), required=True,
              help="Data dir of NBEST_DIR (text = references).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table for 'words' ids (found beside NBEST_DIR when not given).")
@click.option("--nn-costs", type=click.Path(dir_okay=False), multiple=True,
              help="NN LM costs of NBEST_DIR (lmwt.nn); without them only weight 0 is swept. Repeat it (one file per "
                   "model, e.g. rescore-nbest's lmwt.nn.1 and lmwt.nn.2) to tune the models' shares (--mixes) too. "
                   "With a step's output dir: file names in each archives.JOB (default: the step's lmwt.nn, or "
                   "lmwt.nn.1 ... lmwt.nn.K of K models).")
@click.option("--weights", type=Grid(0.0, 1.0), default="0:1:0.1", help="NN LM weights: 'a,b,c' or 'start:stop:step'.")
@click.option("--inv-acwts", type=Grid(0.0, low_open=True), default="6:16:0.5",
              help="Inverse acoustic scales (LMWT): 'a,b,c' or 'start:stop:step'.")
@click.option("--wips", type=Grid(), default="-1:1:0.5", help="Word insertion penalties: 'a,b,c' or 'start:stop:step'.")
@click.option("--mixes", type=Grid(0.0, 1.0), default="0:1:0.1", show_default=True,
              help="With several --nn-costs: the first model's share for two models ('a,b,c' or 'start:stop:step'; "
                   "the second gets the rest); for K > 2, every mix whose K shares all lie in this grid.")
@click.option("--cascade", "cascade_ranks", type=click.Path(dir_okay=False),
              help="A cascade's ranking (the lmwt.cascade of rescore-nbest --cascade-top/--cascade-margin, with its "
                   "lmwt.nn.1 and lmwt.nn.2 as --nn-costs): only the hypotheses its second model scored can win; "
                   "with --cascade-tops/--cascade-margins, only those within each swept limit.")
@click.option("--cascade-tops", type=Grid(1, MAX_BATCH, integer=True), default=None, show_default="the scoring run's",
              help="--cascade: the K values to sweep ('a,b,c' or 'start:stop:step'): a K below the scoring run's "
                   "keeps a subset of the scored hypotheses, so nothing is scored again; above it, only the "
                   "scored hypotheses can still win.")
@click.option("--cascade-margins", type=Grid(0.0), default=None, show_default="the scoring run's",
              help="--cascade: the margins M (nats) to sweep, as --cascade-tops.")
@click.option("--split-half", is_flag=True,
              help="Tune on the first half of the conversations, report on the second half.")
@click.option("--dev-utts", type=click.Path(dir_okay=False),
              help="Tune on these utterances only (first field per line).")
@click.option("--eval-utts", type=click.Path(dir_okay=False),
              help="Report the tuned setting on these utterances (first field per line).")
@click.option("--cross-validate", is_flag=True,
              help="Two folds by conversation (the halves of --split-half): tune on each half, report it on the "
                   "other, and the pooled WER of all utterances, each under the setting tuned on the other half.")
@click.option("--params-out", type=click.Path(dir_okay=False),
              help="Write the best setting as JSON (rescore-nbest --params reads it). Not with --cross-validate (two "
                   "settings: see --report).")
@click.option("--report", type=click.Path(dir_okay=False),
              help="Write the whole sweep and the result as JSON (with --cross-validate: both folds' sweeps and "
                   "settings).")
@click.option("--hyp-out", type=click.Path(dir_okay=False),
              help="Write the 1-best text (utt-id w1 w2 ...) of the reported set: pooled under --cross-validate, the "
                   "held-out set with --split-half/--eval-utts, else the tuned-on set; rescore-wer compares such "
                   "files.")
@click.option("--apply-to", nargs=2, type=click.Path(file_okay=False), metavar="TEST_NBEST_DIR OUT_DIR",
              help="Rescore another N-best dir with the best setting (as rescore-nbest does).")
@click.option("--apply-data-dir", type=click.Path(file_okay=False), help="Data dir of TEST_NBEST_DIR.")
@click.option("--apply-nn-costs", type=click.Path(dir_okay=False), multiple=True,
              help="NN LM costs of TEST_NBEST_DIR (repeated: one per model, in the order of --nn-costs).")
@click.option("--apply-words-txt", type=click.Path(dir_okay=False), help="Symbol table of TEST_NBEST_DIR.")
@click.option("--allow-missing", is_flag=True,
              help="References without an N-best are dropped with a warning instead of an error.")
@click.option("--normalize-refs", is_flag=True,
              help="Normalise the references before tuning (and those of --apply-to) as a recipe's scoring filter "
                   "does: typographic quotes as ASCII, lower case, punctuation stripped (apostrophes and hyphens "
                   "between letters kept, and an apostrophe at a word's edge where the recognizer's words have that "
                   "form: 'cause, rangers'), for raw transcripts against a recognizer's normalised words (a warning "
                   "suggests it).")
@click.option("--refine-model", type=click.Path(dir_okay=False),
              help="LM checkpoint: a refining tune instead of --nn-costs. With --state-carry rescored the NN LM "
                   "costs depend on the setting they were scored at, so a setting tuned on costs scored at another "
                   "predicts a WER that rescore-nbest --model --params does not give. This scores NBEST_DIR with "
                   "the model, tunes, scores again at the tuned setting and retunes until the setting is stable "
                   "(its WER is then rescore-nbest's), each round logged; with --cross-validate each fold is "
                   "refined on its half and reported on the other half scored at its setting, beside plain "
                   "tuning and a paired bootstrap of the two.")
@click.option("--refine-rounds", type=Count(1, MAX_REFINE_ROUNDS), default=REFINE_ROUNDS, show_default=True,
              help="--refine-model: most scorings per tuning set (the best scored setting is kept when the "
                   "tuned one is not yet stable).")
@click.option("--refine-start", type=click.Path(dir_okay=False),
              show_default="rescore-nbest's: weight 0.8, inv_acwt 10, wip 0",
              help="--refine-model: JSON setting (as --params-out writes) to score at first.")
@engine_option("state_carry", "--refine-model: as rescore-nbest's.")
@engine_option("oov_penalty", "--refine-model: as rescore-nbest's.")
@click.option("--train-text", type=click.Path(dir_okay=False),
              help="--refine-model: LM training text, for --oov-penalty auto.")
@click.option("--allow-oov-rate", is_flag=True, help="--refine-model: as rescore-nbest's.")
@engine_option("device", "--refine-model: as rescore-nbest's (auto: CUDA when present; cpu, cuda or cuda:N).")
@verbose_option
def main(nbest_dir, data_dir, words_txt, nn_costs, weights, inv_acwts, wips, mixes, cascade_ranks, cascade_tops,
         cascade_margins, split_half, dev_utts, eval_utts,
         cross_validate, params_out, report, hyp_out, apply_to, apply_data_dir, apply_nn_costs, apply_words_txt,
         allow_missing, normalize_refs, verbose, **refine_kw):
    """Tune weight, inv-acwt and wip (with several --nn-costs, the models' shares too) by WER on
    NBEST_DIR and print the best setting.

    NBEST_DIR may be the output dir of a Kaldi step (recipes/steps/lmrescore_nbest.sh): every
    job's archives.JOB and NN LM costs are tuned as one set, with the decode's whole data dir;
    give the step on the test decode the tuned setting with --params PARAMS.json (written by
    --params-out). Kaldi's
    score.sh reports the WER of the set it tuned on; to report honestly, tune on one part and
    report another (--split-half, --dev-utts/--eval-utts), cross-validate (--cross-validate:
    its pooled WER is the honest figure for all of NBEST_DIR) or apply the setting to a test
    dir.

    With --state-carry rescored the costs of a lmwt.nn depend on the setting they were scored
    at: --refine-model MODEL.pt tunes with the model itself (the tuned setting rescored until it
    is stable), e.g. rescore-tune NBEST --data-dir DATA --cross-validate --refine-model model.pt"""
    setup_logging(verbose)
    nn_costs, apply_nn_costs = tuple(nn_costs), tuple(apply_nn_costs)
    step_costs = step_cost_names(nbest_dir)  # a step's output dir: every archives.JOB (rescore.nbest.step_output)
    if step_costs is not None:
        if refine_kw.get("refine_model"):
            raise click.UsageError("--refine-model takes an N-best dir, not a step's output dir (tune on the "
                                   "step's costs, or refine on one N-best dir)")
        nn_costs = nn_costs or step_costs
    apply = None
    if apply_to:
        test_dir, out_dir = apply_to
        apply = NbestJob(nbest_dir=test_dir, out_dir=out_dir, data_dir=apply_data_dir, nn_costs=apply_nn_costs,
                         words_txt=apply_words_txt, allow_missing=allow_missing, normalize_refs=normalize_refs)
    job = TuneJob(nbest_dir=nbest_dir, data_dir=data_dir, words_txt=words_txt, nn_costs=nn_costs,
                  weights=weights, inv_acwts=inv_acwts, wips=wips, split_half=split_half, dev_utts=dev_utts,
                  eval_utts=eval_utts,
                  params_out=params_out, report=report, apply=apply, allow_missing=allow_missing,
                  cross_validate=cross_validate, hyp_out=hyp_out, normalize_refs=normalize_refs,
                  mixes=mix_grid(mixes, len(nn_costs)) if len(nn_costs) > 1 else None,
                  cascade_ranks=cascade_ranks, cascade_tops=tuple(int(v) for v in cascade_tops or ()),
                  cascade_margins=tuple(cascade_margins or ()))
    refine = refine_job(job, **refine_kw)
    if refine is not None:
        click.echo(format_refine(run_refine(refine)))
        return
    warn_carried_costs(nn_costs if job.step_jobs is None else [str(job.step_jobs[0] / n) for n in nn_costs])
    result = tune_nbest_dir(job)
    click.echo(format_cross_validation(result) if cross_validate else format_tuned(result))


attach(main, "rescore-tune")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
