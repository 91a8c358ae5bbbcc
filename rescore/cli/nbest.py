"""rescore-nbest: interpolate an N-best dir's costs (with NN LM costs when given), pick the
1-best per utterance, write Kaldi archives and a WER report."""

from __future__ import annotations

import logging

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.engine_options import MODEL_NEEDED, engine_needs, engine_options, engine_settings
from rescore.cli.formats import NBEST_GROUP, NBEST_NEEDS, format_options, other_format, pop_format_options
from rescore.cli.options import MAX_BATCH, MAX_BUCKETS, Conflict, Count, Need, Real, Shares, given
from rescore.nbest.checks import OOV_ERROR_RATE, OOV_WARN_RATE

log = logging.getLogger("rescore-nbest")


def resolve_params(params_file, weight, inv_acwt, wip, mix=None, *, has_nn_costs: bool):
    """The setting: options given on the command line, else the --params file's values, else
    the defaults; the NN LM weight defaults to Kaldi's 0.8 when there are NN LM costs, the mix
    to equal shares of the models (rescore.jobs.nbest.NbestJob)."""
    from rescore.nbest.interp import KALDI_DEFAULT_WEIGHT, Params

    base = Params.from_json(params_file) if params_file else None
    if weight is None:
        weight = base.weight if base else (KALDI_DEFAULT_WEIGHT if has_nn_costs else 0.0)
    if inv_acwt is None:
        inv_acwt = base.inv_acwt if base else Params.inv_acwt
    if wip is None:
        wip = base.wip if base else Params.wip
    if mix is None:
        mix = base.mix if base else Params.mix
    return Params(weight=weight, inv_acwt=inv_acwt, wip=wip, mix=mix)


def resolve_cascade(params_file, top: int, margin, num_models: int):
    """(the cascade, rescore.nbest.cascade.Cascade; the option it comes from, for errors):
    --cascade-top / --cascade-margin where either is given on the command line, else the one a
    --params file records (rescore-tune --params-out after a cascade sweep) where the run has
    the cascade's two --model; with other models the file's cascade is not applied (a warning
    says why)."""
    from rescore.nbest.cascade import Cascade

    given_option = "--cascade-top" if top else "--cascade-margin"
    ctx = click.get_current_context()
    if not params_file or any(given(ctx, p) for p in ctx.command.params if p.name in ("cascade_top", "cascade_margin")):
        return Cascade(top, margin), given_option
    recorded = Cascade.from_params(params_file)
    if recorded is None:
        return Cascade(top, margin), given_option
    limits = ", ".join(f"{k} {v:g}" for k, v in recorded.as_dict().items() if v is not None)
    if num_models != 2:
        log.warning("--params %s records a cascade (%s); not applied: a cascade needs two --model, the cheap one "
                    "first", params_file, limits)
        return Cascade(top, margin), given_option
    log.info("cascade from --params %s: %s", params_file, limits)
    return recorded, "--params"


def _has_refs(p) -> bool:
    """Whether a run has references to read: a data dir's text, or an input of another format
    (which may hold its own)."""
    return p["data_dir"] is not None or other_format(p)


REFS_NEEDED = "--data-dir, or an input of another format with references (the references it acts on)"
# What each option needs to act (rescore.cli.options.Need): the engine's settings a model
# (rescore.cli.engine_options), the readers' options their format (rescore.cli.formats).
NEEDS = {
    **engine_needs(),
    **NBEST_NEEDS,
    "--allow-oov-rate": Need(lambda p: bool(p["model"]),
                             MODEL_NEEDED.replace("it sets how the NN LM scores", "the vocabulary is the LM's")),
    "--mix": Need(lambda p: max(len(p["model"]), len(p["nn_costs"])) >= 2,
                  "two or more --model or --nn-costs (one share per model)"),
    "--buckets": Need(lambda p: p["train_text"] is not None, "--train-text (the word counts of the buckets)"),
    "--allow-missing": Need(_has_refs, REFS_NEEDED),
    "--normalize-refs": Need(_has_refs, REFS_NEEDED),
    **{name: Need(lambda p: len(p["model"]) == 2, "exactly two --model, the cheap one first (the cascade's two "
                                                    "models)") for name in ("--cascade-top", "--cascade-margin")},
}
CONFLICTS = [Conflict("--jobs", "--split", "--jobs runs several jobs in one process, --split a share of one "
                                          "N-best dir")]
# --help's sections (rescore.cli.options.GROUPS), core first
GROUPS = {
    "Input": ["--data-dir", "--words-txt", "--nn-costs", "--train-text", "--allow-missing", "--normalize-refs"],
    "Model": ["--model", "--cascade-top", "--cascade-margin", "--oov-penalty", "--allow-oov-rate", "--normalize",
              "--hf-context"],
    "Weights": ["--params", "--weight", "--inv-acwt", "--wip", "--mix"],
    "Carry and pointer": ["--state-carry", "--mix-carry", "--history-min-posterior", "--cache-window",
                          "--cache-theta", "--cache-lambda"],
    "Output": ["--buckets", "--plot"],
    "Other formats": NBEST_GROUP,
    "Performance": ["--device", "--engine", "--schedule", "--precision", "--max-tokens", "--conv-batch", "--jobs",
                    "--split"],
}


@command(groups=GROUPS, needs=NEEDS, conflicts=CONFLICTS)
@click.argument("nbest_dir", type=click.Path())
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Kaldi data dir: text (references), segments/utt2spk (conversations).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table for 'words' ids; when not given, NBEST_DIR/words.txt, NBEST_DIR/lang/words.txt and "
                   "NBEST_DIR/../lang/words.txt are tried.")
@click.option("--nn-costs", type=click.Path(dir_okay=False), multiple=True,
              help="NN LM costs per hypothesis, lmwt.nn format (key c1 ... c_{n+1}, or key total). Repeat it (one "
                   "file per model, e.g. an earlier run's lmwt.nn.1 and lmwt.nn.2) to interpolate them with --mix; "
                   "OUT_DIR/lmwt.nn then gets the mixed costs.")
@click.option("--params", "params_file", type=click.Path(dir_okay=False),
              help="JSON with weight, inv_acwt, wip and, for several models, mix (as rescore-tune writes), and "
                   "a tuned cascade's limits (applied with two --model); options given on the command line win.")
@click.option("--weight",
              type=Real(0.0, 1.0), default=None,
              show_default="0.8 with --model or --nn-costs (Kaldi's default), else 0",
              help="NN LM weight w in [0, 1]: cost = ac/inv_acwt + nolm + (1-w)(withlm-nolm) + w*nn + wip*|h|.")
@click.option("--mix", "mix", type=Shares(), metavar="S1,S2,...", default=None, show_default="equal shares",
              help="With several --model (or --nn-costs): each model's share of the NN term, >= 0 and summing to 1, "
                   "in the order given: nn = S1*nn_1 + S2*nn_2 + ... (log-linear interpolation; w stays the total NN "
                   "weight).")
@click.option("--inv-acwt", type=Real(0.0, low_open=True), default=None, show_default="10",
              help="Inverse acoustic scale (Kaldi's LMWT), > 0.")
@click.option("--wip", type=Real(), default=None, show_default="0", help="Word insertion penalty (cost per word).")
@click.option("--train-text", type=click.Path(dir_okay=False),
              help="LM training text: adds the per rare-word bucket table and buckets.png.")
@click.option("--buckets", "num_buckets", type=Count(1, MAX_BUCKETS), default=10, help="Number of rare-word buckets.")
@click.option("--plot/--no-plot", default=True, show_default=True,
              help="With --train-text and references, draw buckets.png (about a CPU-second: the Kaldi "
                   "step's per-job runs leave it out).")
@click.option("--allow-missing", is_flag=True,
              help="References without an N-best are dropped with a warning instead of an error.")
@click.option("--allow-oov-rate", is_flag=True,
              help=f"Score with an LM whose vocabulary lacks more than {OOV_ERROR_RATE:g} % of the hypothesis tokens "
                   f"(otherwise an error, exit 1; above {OOV_WARN_RATE:g} % a warning, as for hypotheses in another "
                   "letter case or Unicode normalisation than the LM's words).")
@click.option("--normalize-refs", is_flag=True,
              help="Normalise the references before scoring as a recipe's scoring filter does: typographic quotes "
                   "as ASCII, lower case, punctuation stripped (apostrophes and hyphens between letters kept, and an "
                   "apostrophe at a word's edge where the recognizer's words have that form: 'cause, rangers'), for "
                   "raw transcripts against a recognizer's normalised words (a warning suggests it).")
@click.option("--cascade-top", type=Count(0, MAX_BATCH), default=0, metavar="K", show_default="0: no limit by rank",
              help="Cascade of two --model (the cheap one first): the second scores only the top K hypotheses of "
                   "each utterance by the first's interpolated total; the others keep the first's cost and cannot "
                   "win (docs/hf.md#a-cascade). OUT_DIR/lmwt.cascade records the ranking for rescore-tune.")
@click.option("--cascade-margin", type=Real(0.0), default=None, metavar="NATS", show_default="none: no limit by cost",
              help="Cascade (as --cascade-top; both: both limits): the second --model scores only the hypotheses "
                   "whose total under the first is within M nats of the utterance's best.")
@click.option("--jobs", "jobs_spec", metavar="A:B",
              help="Do the work of Kaldi's jobs A to B (what `$cmd JOB=A:B ... rescore-nbest` runs as B-A+1 processes) "
                   "in one process: every JOB in NBEST_DIR, OUT_DIR, --data-dir, --words-txt and --nn-costs is "
                   "replaced by the job's number (NBEST_DIR and OUT_DIR need it: archives.JOB), and each job's OUT_DIR "
                   "gets what a run of its own writes. The model is loaded once and the conversations of all jobs "
                   "are scored in one engine run, so that forward calls batch across jobs (costs equal to float "
                   "rounding). One bad job fails the run (exit 1): no job's outputs are written, older ones are left "
                   "as they were. Uses OMP_NUM_THREADS torch threads (else torch's default). Not with --split, nor "
                   "with inputs other than Kaldi dirs (--format).")
@engine_options
@format_options
@verbose_option
def main(nbest_dir, out_dir, data_dir, words_txt, nn_costs, params_file, weight, mix, inv_acwt, wip, train_text,
         num_buckets, plot, allow_missing, allow_oov_rate, normalize_refs, cascade_top, cascade_margin, jobs_spec,
         verbose, model, split_spec, **settings):
    """Rescore NBEST_DIR (Kaldi layout: words/words_text, acwt, lmwt.withlm, lmwt.nolm) into
    OUT_DIR: lmwt.interp (new graph costs, Kaldi text archive for linear-to-nbest), text
    (1-best words), lmwt.nn with --model (the mixed costs with several --model, each model's own
    in lmwt.nn.1 ... lmwt.nn.K) and, with references, report.json and report.txt
    (printed). OUT_DIR is written as one set: one run at a time, the outputs of an older run
    removed first, and manifest.json marked complete at the end. No output may replace an input
    (OUT_DIR may be NBEST_DIR, as in Kaldi's archives.JOB, but not the data dir). NBEST_DIR may
    also be an N-best TSV file or another recognizer's output (--format): OUT_DIR then
    gets text and scores.tsv (docs/ecosystems.md). With --jobs A:B, one process does the work of
    Kaldi's jobs A..B (NBEST_DIR and OUT_DIR with JOB, e.g. archives.JOB)."""
    setup_logging(verbose)
    from rescore.errors import check
    from rescore.metrics import format_report
    from rescore.jobs.nbest import (NbestJob, job_numbers, job_path, nbest_jobs, parse_split, rescore_nbest_dir,
                                  rescore_nbest_jobs)

    numbers = None
    if jobs_spec is not None:  # (checked before --params is read)
        numbers = job_numbers(jobs_spec, nbest_dir=nbest_dir, out_dir=out_dir, split=split_spec, models=model,
                              params_file=params_file, train_text=train_text)
    # the input's format and its options (with --jobs: the first job's input)
    formats = pop_format_options(nbest_dir if numbers is None else job_path(nbest_dir, numbers[0]), settings)
    other = formats["fmt"] != "kaldi"
    check(numbers is None or not other, "Kaldi N-best dirs (one per job): other recognizers' inputs "
          "(--format) are rescored one per run", "--jobs", f"{jobs_spec} with {nbest_dir}")
    cascade, cascade_option = resolve_cascade(params_file, cascade_top, cascade_margin, len(model))
    check(not other or not cascade.on, "a Kaldi N-best dir for a cascade (its ranking is written as "
          "lmwt.cascade beside lmwt.nn)", cascade_option, nbest_dir)
    scoring = engine_settings(settings)
    k = len(model) or len(nn_costs)
    # (one share alone would read as "no mix" in the job)
    check(mix is None or len(mix) == k, f"one share per model ({k} given by --model or --nn-costs)", "--mix",
          ",".join(f"{x:g}" for x in mix or ()))
    params = resolve_params(params_file, weight, inv_acwt, wip, mix,
                            has_nn_costs=bool(model or nn_costs))
    job = dict(nbest_dir=nbest_dir, out_dir=out_dir, params=params, data_dir=data_dir, words_txt=words_txt,
               nn_costs=tuple(nn_costs), models=tuple(model), scoring=scoring, train_text=train_text,
               num_buckets=num_buckets, plot=plot, allow_missing=allow_missing,
               split=parse_split(split_spec) if split_spec else None, params_file=params_file,
               allow_oov_rate=allow_oov_rate, normalize_refs=normalize_refs, cascade=cascade, **formats)
    if numbers is not None:  # Kaldi's jobs in one process
        for k, report in rescore_nbest_jobs(nbest_jobs(jobs_spec, **job)).items():
            if report is not None:
                click.echo(f"job {k} ({job_path(out_dir, k)}):\n{format_report(report)}")
        log.info("outputs in %s for jobs %s", out_dir, jobs_spec)
        return
    report = rescore_nbest_dir(NbestJob(**job))  # (any format: rescore.jobs.nbest)
    if report is not None:
        click.echo(format_report(report))
    log.info("outputs in %s", out_dir)


attach(main, "rescore-nbest")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
