"""rescore-nbest on an N-best interchange file (rescore.io.interchange) or a decode dir of another
recognizer (rescore.io.ecosystems: ``--format espnet|icefall|nemo``).

The total cost of hypothesis h, from its score columns s_c (costs), the NN LM cost l_nn (the
models' mix, as for a Kaldi dir) and its |h| words::

    total(h) = sum_c lambda_c * s_c(h)  +  w * l_nn(h)  +  wip * |h|

lambda_c is ``--score-weight c=X``; a column without one has weight 1, except in a table whose
columns are Kaldi's (``ac``, ``graph``, ``nolm``: rescore.io.ecosystems.kaldi_to_table), where
those default to Kaldi's interpolation: ``ac`` 1/inv_acwt, ``graph`` 1 - w, ``nolm`` w, so that

    total(h) = ac/inv_acwt + (1 - w) * graph + w * nolm + w * l_nn + wip * |h|
             = acwt * ac + g_0 + (1 - w) * l_ng + w * l_nn + wip * |h|   (g_0 = nolm, l_ng = graph - nolm)

is rescore.interp's formula; with those defaults the costs are computed by rescore.interp itself,
so a Kaldi-derived file gives the same floats, 1-best and NN LM costs as the Kaldi dir.

Outputs (OUT_DIR, written as one set like rescore-nbest's on a Kaldi dir): ``text`` (the 1-best,
``utt words``), ``scores.tsv`` (the input's table with two columns added: ``nn``, the NN LM cost
l_nn (0 without one), and ``total``), ``lmwt.nn`` with ``--model`` (per-token costs, keys
``<utt>-<rank>``, reusable with ``--nn-costs``; each model's own in lmwt.nn.k with several), and
``report.json``/``report.txt`` with references (a data dir's ``text``, or the input's own: a NeMo
manifest, an icefall dump's ``ref``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from rescore.errors import OptionError, RescoreError
from rescore.interp import Params, equal_mix
from rescore.io.ecosystems import FORMATS, KALDI_COLUMNS
from rescore.io.outdir import MANIFEST_NAME
from rescore.pipeline import MAX_MODELS, NBEST_OUTPUTS, ScoringOptions, as_paths, one_or_many

log = logging.getLogger(__name__)

ADDED = ("nn", "total")  # the columns scores.tsv adds
OUTPUTS = (*NBEST_OUTPUTS, "scores.tsv")


def parse_score_weights(specs: Sequence[str], option: str = "--score-weight") -> Dict[str, float]:
    """['ac=0.1', 'ctc=0.3'] -> {'ac': 0.1, 'ctc': 0.3} (finite numbers, each column once)."""
    out: Dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            x = float(value) if sep and name else math.nan
        except ValueError:
            x = math.nan
        if not math.isfinite(x):
            raise OptionError("NAME=NUMBER (a score column and its finite weight), e.g. ctc=0.3", option=option,
                              got=spec)
        if name in out:
            raise OptionError("each score column once", option=option, got=spec)
        out[name] = x
    return out


def is_kaldi_default(columns: Sequence[str], given: Mapping[str, float]) -> bool:
    """Kaldi's columns alone, none of them weighted by hand: rescore.interp's formula applies."""
    return set(columns) == set(KALDI_COLUMNS) and not set(given) & set(KALDI_COLUMNS)


def column_weights(columns: Sequence[str], given: Mapping[str, float], params: Params) -> Dict[str, float]:
    """lambda_c of every column (module doc)."""
    kaldi = set(KALDI_COLUMNS) <= set(columns)
    defaults = {"ac": 1.0 / params.inv_acwt, "graph": 1.0 - params.weight, "nolm": params.weight}
    return {c: given.get(c, defaults[c] if kaldi and c in defaults else 1.0) for c in columns}


def to_nbest_set(table, weights: Mapping[str, float], kaldi: bool, data_dir=None, allow_missing=False):
    """The table as a rescore.nbest.NbestSet for the engine and rescore.combine: hypothesis keys
    ``<utt>-<rank>``; with Kaldi's defaults ac, withlm, nolm are the columns ac, graph, nolm;
    else ac = 0 and withlm = nolm = sum_c lambda_c s_c, so that rescore.interp.fixed_cost is
    exactly that sum + wip * |h| (0/inv_acwt and (1 - w) * 0 add nothing)."""
    from rescore import nbest as nb

    idx = {c: table.columns.index(c) for c in table.columns}
    utts = []
    for u in table.utterances:
        hyps = []
        for h in u.hyps:
            key = f"{u.id}-{h.rank}"
            if kaldi:
                s = h.scores
                hyps.append(nb.Hypothesis(key, h.words, s[idx["ac"]], s[idx["graph"]], s[idx["nolm"]]))
            else:
                f = 0.0
                for c, i in idx.items():
                    f += weights[c] * h.scores[i]
                hyps.append(nb.Hypothesis(key, h.words, 0.0, f, f))
        utts.append(nb.Utterance(u.id, hyps))
    return nb.assemble_set(table.path, utts, data_dir, refs=table.refs, allow_missing=allow_missing)


@dataclass(frozen=True)
class InterchangeJob:
    """rescore-nbest on INPUT in ``fmt`` (rescore.io.ecosystems.FORMATS but kaldi); checked when
    built (OptionError, exit 2) like rescore.pipeline.NbestJob."""

    input: str
    out_dir: str
    fmt: str = "interchange"
    params: Params = field(default_factory=Params)
    score_weights: Mapping[str, float] = field(default_factory=dict)
    data_dir: Optional[str] = None
    manifest: Optional[str] = None  # NeMo's
    nn_costs: Tuple[str, ...] = ()
    scoring: ScoringOptions = field(default_factory=ScoringOptions)
    train_text: Optional[str] = None
    num_buckets: int = 10
    allow_missing: bool = False
    split: Optional[Tuple[int, int]] = None
    params_file: Optional[str] = None
    plot: bool = True

    def __post_init__(self):
        if self.fmt not in FORMATS or self.fmt == "kaldi":
            raise OptionError(f"one of {', '.join(f for f in FORMATS if f != 'kaldi')}", option="--format",
                              got=self.fmt)
        object.__setattr__(self, "nn_costs", as_paths(self.nn_costs))
        if len(self.nn_costs) > MAX_MODELS:
            raise OptionError(f"at most {MAX_MODELS} files", option="--nn-costs", got=str(len(self.nn_costs)))
        if self.manifest is not None and self.fmt != "nemo":
            raise OptionError("--format nemo (the manifest is NeMo's)", option="--manifest", got=self.manifest)
        if self.fmt == "nemo" and self.manifest is None:
            raise OptionError("--manifest (NeMo's manifest of the decoded set) with --format nemo",
                              option="--manifest")
        k = self.num_models
        if k > 1 and self.params.num_models == 1:
            object.__setattr__(self, "params", self.params.replace(mix=equal_mix(k)))
        if self.params.num_models != max(k, 1):
            raise OptionError(f"one share per model ({k} given by --model or --nn-costs)", option="--mix",
                              got=",".join(f"{m:g}" for m in self.params.mix))
        if self.scoring.model is not None and self.nn_costs:
            raise OptionError("one source of NN LM costs: --model and --nn-costs exclude each other",
                              option="--nn-costs", got=",".join(self.nn_costs))
        if self.params.weight != 0.0 and not k:
            raise OptionError("NN LM costs (--nn-costs or --model) for an NN LM weight other than 0",
                              option="--weight", got=f"{self.params.weight:g}")
        if self.scoring.oov_penalty == "auto" and self.train_text is None:
            raise OptionError("--train-text (the LM training text) for --oov-penalty auto",
                              option="--oov-penalty", got="auto")
        if isinstance(self.num_buckets, bool) or not isinstance(self.num_buckets, int) or self.num_buckets < 1:
            raise OptionError("an integer >= 1", option="--buckets", got=str(self.num_buckets))
        self.output_set(True).check()

    @property
    def num_models(self) -> int:
        return len(self.scoring.models) or len(self.nn_costs)

    def inputs(self) -> List[Path]:
        p = Path(self.input)
        files = [p]
        if p.is_dir():  # a decode dir: its files, but not those of an earlier run's OUT_DIR inside it
            out = Path(self.out_dir).resolve()
            earlier = (out / MANIFEST_NAME).is_file()
            files = [f for f in p.rglob("*") if f.is_file() and not (earlier and out in f.resolve().parents)]
        extra = (self.manifest, self.train_text, self.params_file, *self.nn_costs, *self.scoring.models)
        files += [Path(x) for x in extra if x is not None]
        if self.data_dir is not None:
            files += [Path(self.data_dir) / n for n in ("text", "utt2spk", "spk2utt", "segments")]
        return files

    def outputs(self, with_refs: bool) -> List[str]:
        names = ["text", "scores.tsv"]
        if self.scoring.models or len(self.nn_costs) > 1:
            names.append("lmwt.nn")
        if len(self.scoring.models) > 1:
            names += [f"lmwt.nn.{k}" for k in range(1, len(self.scoring.models) + 1)]
        if with_refs:
            names += ["report.json", "report.txt"]
            if self.train_text is not None and self.plot:
                names.append("buckets.png")
        return names

    def settings(self) -> dict:
        return {"command": "rescore-nbest", "input": self.input, "format": self.fmt, "data_dir": self.data_dir,
                "manifest": self.manifest, "params": self.params.as_dict(), "score_weights": dict(self.score_weights),
                "nn_costs": one_or_many(self.nn_costs), "model": self.scoring.model,
                "split": list(self.split) if self.split else None, "train_text": self.train_text}

    def output_set(self, with_refs: bool):
        from rescore.io.outdir import OutputSet

        return OutputSet(self.out_dir, self.outputs(with_refs), self.inputs(), known=OUTPUTS,
                         settings=self.settings(), split=self.split)


def _nn_costs(job: InterchangeJob, nbest, out, train_counts) -> Tuple[list, list]:
    """(costs, sources): each model's NN LM costs (key -> per-token costs), scored or read."""
    from rescore.combine import check_nn_costs, mix_costs
    from rescore.io.kaldi import read_nn_costs, write_nn_costs

    models, params = job.scoring.models, job.params
    costs: list = []
    sources: list = []
    if models:
        lexicon = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
        loaded = [job.scoring.load_model(train_counts, m, lexicon) for m in models]
        if job.scoring.lockstep:
            costs = job.scoring.score_mixed(nbest, params, loaded)
        else:
            costs = [job.scoring.score(nbest, params, loaded=lm) for lm in loaded]
        for k, c in enumerate(costs, 1):
            name = "lmwt.nn" if len(models) == 1 else f"lmwt.nn.{k}"
            sources.append(str(out.path(name)))
            write_nn_costs(out.path(name), c)
    else:
        sources = list(job.nn_costs)
        costs = [read_nn_costs(p) for p in sources]
    check_nn_costs(nbest, costs, sources)
    if len(costs) > 1:
        write_nn_costs(out.path("lmwt.nn"), mix_costs(nbest, costs, params.mix, sources))
    return costs, sources


def rescore_table(job: InterchangeJob) -> Optional[dict]:
    """Run the job (module doc). Returns the report, or None without references."""
    from rescore import metrics
    from rescore.combine import best_hypotheses, cost_sets, fixed_cost, mixed_nn_cost
    from rescore.interp import total_cost
    from rescore.io.ecosystems import load_table
    from rescore.io.files import write_json
    from rescore.io.interchange import with_columns, write_nbest_table
    from rescore.pipeline import split_share, write_one_best
    from rescore.vocab import count_words, read_sentences

    table = load_table(job.input, job.fmt, job.manifest)
    for c in ADDED:
        if c in table.columns:
            raise RescoreError(f"no score column '{c}' (rescore-nbest adds {' and '.join(ADDED)} to scores.tsv)",
                               path=table.path, line=table.header_line, got=c)
    for c in job.score_weights:
        table.column(c)  # a weight for a column the input lacks
    kaldi = is_kaldi_default(table.columns, job.score_weights)
    weights = column_weights(table.columns, job.score_weights, job.params)
    log.info("total = %s%s + wip * |h|", " + ".join(f"{weights[c]:g} * {c}" for c in table.columns),
             f" + {job.params.weight:g} * nn" if job.num_models else "")
    nbest = to_nbest_set(table, weights, kaldi, job.data_dir, job.allow_missing)
    if job.split is not None:
        k, n = job.split
        nbest = nbest.subset(split_share([c.id for c in nbest.conversations], k, n, job.scoring.conv_batch))
    train_counts = count_words(read_sentences(job.train_text)) if job.train_text else None
    params = job.params
    with job.output_set(nbest.refs is not None) as out:
        costs, sources = _nn_costs(job, nbest, out, train_counts) if job.num_models else ([], [])
        sets = cost_sets(costs or None, sources)
        added: Dict[Tuple[str, int], Tuple[float, float]] = {}
        for u in nbest.utterances():
            for rank, h in enumerate(u.hyps, 1):
                nn = mixed_nn_cost(h, sets, params.mix)
                added[(u.id, rank)] = (nn, total_cost(fixed_cost(h, params.weight, params.inv_acwt, params.wip),
                                                      nn, params.weight))
        best = best_hypotheses(nbest, params, costs or None, sources)
        write_one_best(out.path("text"), nbest, best)
        keep = {u.id for u in nbest.utterances()}
        table.utterances = [u for u in table.utterances if u.id in keep]
        write_nbest_table(out.path("scores.tsv"), with_columns(table, ADDED, added, str(out.path("scores.tsv"))))
        if nbest.refs is None:
            log.info("no references (a data dir with 'text', or the input's own): no WER report")
            return None
        extra = {"input": job.input, "format": job.fmt, "score_weights": weights}
        report = metrics.nbest_report(nbest, best, params=params.as_dict(), train_counts=train_counts,
                                      num_buckets=job.num_buckets, extra=extra)
        if train_counts is not None and job.plot:
            metrics.plot_comparison(report["comparison"], out.path("buckets.png"), metrics.nbest_chart_title(nbest))
        write_json(out.path("report.json"), report)
        with out.open("report.txt") as f:
            f.write(metrics.format_report(report) + "\n")
        return report
