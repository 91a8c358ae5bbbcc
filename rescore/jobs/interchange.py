"""rescore-nbest on an N-best interchange file (rescore.io.interchange) or a decode dir of another
recognizer (rescore.io.ecosystems: ``--format espnet|icefall|nemo``).

The total cost of hypothesis h is rescore.nbest.tables' ranking rule (its module doc: the score
columns weighted by ``--score-weight``, Kaldi's columns ``ac``, ``graph``, ``nolm`` by Kaldi's
interpolation, plus w * l_nn + wip * |h|); with Kaldi's columns alone the costs are computed by
rescore.nbest.interp itself, so a Kaldi-derived file gives the same floats, 1-best and NN LM costs
as the Kaldi dir, and every writer of a recognizer's files ranks as rescore-nbest does.

The job is a rescore.jobs.nbest.NbestJob (its checks, its engine settings, its NN LM costs and
their checks, its report) on another input: the table becomes an N-best set (:func:`to_nbest_set`)
and rescore.jobs.nbest.write_rescored runs on it, writing ``scores.tsv`` where a Kaldi dir gets
``lmwt.interp``. Outputs (OUT_DIR, written as one set): ``text`` (the 1-best, ``utt words``),
``scores.tsv`` (the input's table with two columns added: ``nn``, the NN LM cost l_nn (0 without
one), and ``total``), ``lmwt.nn`` with ``--model`` (per-token costs, keys ``<utt>-<rank>``,
reusable with ``--nn-costs``; each model's own in lmwt.nn.k with several), and
``report.json``/``report.txt`` with references (a data dir's ``text``, or the input's own: a NeMo
manifest, an icefall dump's ``ref``); with ``--write-format espnet|nemo|icefall`` also the
result in that recognizer's own files (rescore.io.results). The recognizer's words (``--oov-penalty auto``, the
vocabulary check) are those of ``--words-txt``, or of a words.txt beside the input as for a Kaldi
dir.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from rescore.errors import OptionError, RescoreError, check
from rescore.nbest.interp import Params
from rescore.io.ecosystems import FORMATS, NEMO_COUNTS_SUFFIX, ReadOptions
from rescore.io.files import atomic_output
from rescore.io.interchange import with_columns, write_nbest_table
from rescore.io.outdir import MANIFEST_NAME, OutputSet
from rescore.io.results import files_for, icefall_test_set, names_for
from rescore.jobs.nbest import NBEST_OUTPUTS, NbestJob, split_share, write_rescored
from rescore.nbest import sets as nb
from rescore.nbest.tables import ADDED, column_weights, interp_inputs, is_kaldi_default, load_table

log = logging.getLogger(__name__)

OUTPUTS = (*NBEST_OUTPUTS, "scores.tsv")
# --write-format's files of an earlier run (icefall's depend on the input's name: not listed)
KNOWN_FORMAT_FILES = ("score", "1best_recog/text", "1best_recog/score", "preds_rescored.tsv",
                      "manifest_rescored.json")  # (a speaker's text_spk<k>... are not listed either)


def parse_score_weights(specs: Sequence[str], option: str = "--score-weight") -> Dict[str, float]:
    """['ac=0.1', 'ctc=0.3'] -> {'ac': 0.1, 'ctc': 0.3} (finite numbers, each column once)."""
    out: Dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            x = float(value) if sep and name else math.nan
        except ValueError:
            x = math.nan
        check(math.isfinite(x), "NAME=NUMBER (a score column and its finite weight), e.g. ctc=0.3", option, spec)
        check(name not in out, "each score column once", option, spec)
        out[name] = x
    return out


def to_nbest_set(table, weights: Mapping[str, float], kaldi: bool, data_dir=None, allow_missing=False):
    """The table as a rescore.nbest.sets.NbestSet for the engine and rescore.nbest.combine: hypothesis keys
    ``<utt>-<rank>``; with Kaldi's defaults ac, withlm, nolm are the columns ac, graph, nolm;
    else ac = 0 and withlm = nolm = sum_c lambda_c s_c, so that rescore.nbest.interp.fixed_cost is
    exactly that sum + wip * |h| (0/inv_acwt and (1 - w) * 0 add nothing)."""
    idx = {c: table.columns.index(c) for c in table.columns}
    utts = []
    lines: Dict[str, int] = {}
    for u in table.utterances:
        hyps = []
        for h in u.hyps:
            key = f"{u.id}-{h.rank}"
            lines[key] = h.line
            ac, withlm, nolm = interp_inputs(h.scores, table.columns, weights, kaldi)
            if not math.isfinite(withlm):
                _overflow(table, h, key, weights, idx)
            hyps.append(nb.Hypothesis(key, h.words, ac, withlm, nolm))
        utts.append(nb.Utterance(u.id, hyps))
    nbest = nb.assemble_set(table.path, utts, data_dir, refs=table.refs, allow_missing=allow_missing)
    # where an overflow of the interpolation finds each cost (rescore.nbest.combine.CostArrays): the
    # table's file and line, its columns for Kaldi's archives
    columns = ({"acwt": "ac", "lmwt.withlm": "graph", "lmwt.nolm": "nolm"} if kaldi else
               dict.fromkeys(("acwt", "lmwt.withlm", "lmwt.nolm"), "the weighted sum of the score columns"))
    nbest.source_table = (table.path, lines, columns)
    return nbest


def _overflow(table, h, key: str, weights: Mapping[str, float], idx: Mapping[str, int]):
    """The RescoreError of a hypothesis whose weighted sum of scores overflows: its file, line
    and the column of the largest term."""
    terms = {c: weights[c] * h.scores[i] for c, i in idx.items()}
    c = max(terms, key=lambda c: abs(terms[c]) if math.isfinite(terms[c]) else math.inf)
    text = h.texts[idx[c]] if h.texts else repr(h.scores[idx[c]])
    raise RescoreError(f"scores whose weighted sum stays finite: {weights[c]:g} * {c} overflows the total of "
                       f"hypothesis '{key}'", path=table.path, line=h.line or None, got=f"{c} {text}")


@dataclass(frozen=True)
class InterchangeJob(NbestJob):
    """rescore-nbest on ``nbest_dir`` in ``fmt`` (rescore.io.ecosystems.FORMATS but kaldi): an
    interchange file or another recognizer's output. Checked when built, as an NbestJob."""

    fmt: str = "interchange"
    score_weights: Mapping[str, float] = field(default_factory=dict)
    manifest: Optional[str] = None  # NeMo's
    read_options: ReadOptions = ReadOptions()
    write_format: Optional[str] = None  # rescore.io.results.WRITE_FORMATS: the result in that format too
    icefall_suffix: Optional[str] = None  # icefall's params.suffix in the names of --write-format icefall's files

    def __post_init__(self):
        others = [f for f in FORMATS if f != "kaldi"]
        check(self.fmt in others, f"one of {', '.join(others)}", "--format", self.fmt)
        check(self.manifest is None or self.fmt == "nemo", "--format nemo (the manifest is NeMo's)", "--manifest",
              self.manifest)
        if self.fmt == "nemo" and self.manifest is None:
            raise OptionError("--manifest (NeMo's manifest of the decoded set) with --format nemo",
                              option="--manifest")
        check(self.write_format != "nemo" or self.fmt == "nemo", "--format nemo (NeMo's files follow its manifest)",
              "--write-format", self.write_format)
        check(self.icefall_suffix is None or self.write_format == "icefall", "--write-format icefall",
              "--icefall-suffix", self.icefall_suffix)
        check(self.icefall_suffix is None or (self.icefall_suffix and "/" not in self.icefall_suffix),
              "a file name part (not empty, no '/')", "--icefall-suffix", self.icefall_suffix)
        super().__post_init__()

    def written_format_names(self) -> List[str]:
        """The files of --write-format (rescore.io.results); ESPnet's 'text' is OUT_DIR/text."""
        if self.write_format is None:
            return []
        names = names_for(self.write_format, icefall_test_set(self.nbest_dir), self.read_options.speaker,
                          self.icefall_suffix)
        return [n for n in names if n != "text"]

    def inputs(self) -> List[Path]:
        p = Path(self.nbest_dir)
        files = [p]
        if p.is_dir():  # a decode dir: its files, but not those of an earlier run's OUT_DIR inside it
            out = Path(self.out_dir).resolve()
            earlier = (out / MANIFEST_NAME).is_file()
            files = [f for f in p.rglob("*") if f.is_file() and not (earlier and out in f.resolve().parents)]
        if self.fmt == "nemo":  # NeMo's candidate counts beside its predictions (rescore.io.ecosystems)
            files.append(p.with_name(p.name + NEMO_COUNTS_SUFFIX))
        return files + [Path(m) for m in (self.manifest,) if m is not None] + super().inputs()

    def outputs(self, with_refs: bool = True) -> List[str]:
        names = ["text", "scores.tsv", *self.written_format_names()]
        if self.models or len(self.nn_costs) > 1:
            names.append("lmwt.nn")
        if len(self.models) > 1:
            names += [f"lmwt.nn.{k}" for k in range(1, len(self.models) + 1)]
        if with_refs:
            names += ["report.json", "report.txt"]
            if self.train_text is not None and self.plot:
                names.append("buckets.png")
        return names

    def settings(self) -> dict:
        return dict(super().settings(), format=self.fmt, manifest=self.manifest,
                    score_weights=dict(self.score_weights), read_options=asdict(self.read_options),
                    write_format=self.write_format, icefall_suffix=self.icefall_suffix)

    def output_set(self, with_refs: bool = True) -> OutputSet:
        return OutputSet(self.out_dir, self.outputs(with_refs), self.inputs(), known=[*OUTPUTS, *KNOWN_FORMAT_FILES],
                         settings=self.settings(), split=self.split)


def write_scores(out: OutputSet, arrays, params: Params, table, job: Optional[InterchangeJob] = None,
                 refs=None) -> Path:
    """OUT_DIR/scores.tsv: the input's table (the utterances of the set, e.g. a --split job's)
    with the NN LM cost and the total of each hypothesis (arrays: rescore.nbest.combine.CostArrays);
    with the job's --write-format, that format's files too (rescore.io.results)."""
    ranks = [tuple(k.rsplit("-", 1)) for k in arrays.keys]
    added = {(u, int(r)): v for (u, r), v in zip(ranks, zip(arrays.lnn(params.mix), arrays.total(params)))}
    kept = replace(table, utterances=[u for u in table.utterances if (u.id, 1) in added])
    path = out.path("scores.tsv")
    write_nbest_table(path, with_columns(kept, ADDED, added, str(path)))
    if job is not None and job.write_format is not None:
        costs = {k: v[1] for k, v in added.items()}
        files = files_for(job.write_format, kept, costs, manifest=job.manifest, refs=refs,
                          speaker=job.read_options.speaker, suffix=job.icefall_suffix)
        for name in job.written_format_names():
            with atomic_output(out.path(name), "w") as f:
                f.write(files[name])
        log.info("wrote %s (%s)", ", ".join(job.written_format_names()), job.write_format)
    return path


def rescore_table(job: InterchangeJob) -> Optional[dict]:
    """Run the job (module doc). Returns the report, or None without references."""
    table = load_table(job.nbest_dir, job.fmt, job.manifest, options=job.read_options)
    for c in ADDED:
        if c in table.columns:
            raise RescoreError(f"no score column '{c}' (rescore-nbest adds {' and '.join(ADDED)} to scores.tsv)",
                               path=table.path, line=table.header_line, got=c)
    for c in job.score_weights:
        table.column(c)  # a weight for a column the input lacks
    weights = column_weights(table, job.score_weights, job.params)
    log.info("total = %s%s + wip * |h|", " + ".join(f"{weights[c]:g} * {c}" for c in table.columns),
             f" + {job.params.weight:g} * nn" if job.num_models else "")
    nbest = to_nbest_set(table, weights, is_kaldi_default(table.columns, job.score_weights), job.data_dir,
                         job.allow_missing)
    if job.write_format == "icefall" and nbest.refs is None:
        raise OptionError("references (the dump's 'ref', or --data-dir with a 'text') for icefall's recogs and errs "
                          "files", option="--write-format", got="icefall")
    if job.split is not None:
        k, n = job.split
        nbest = nbest.subset(split_share([c.id for c in nbest.conversations], k, n, job.scoring.conv_batch))
    job = replace(job, extra_report=dict(job.extra_report, input=job.nbest_dir, format=job.fmt,
                                         score_weights=weights))
    with job.output_set(nbest.refs is not None) as out:
        return write_rescored(out, job, nbest, lambda out, arrays: write_scores(out, arrays, job.params, table, job,
                                                                                nbest.refs))
