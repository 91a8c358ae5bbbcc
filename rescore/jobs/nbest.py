"""The job of rescore-nbest (rescore an N-best list in any format: rescore.formats.registry) and
the job split it uses; rescore-tune's job
is in rescore.jobs.tune, the NN LM scoring in rescore.jobs.scoring.

A command parses its options into a job (:class:`NbestJob`, :class:`rescore.jobs.tune.TuneJob`)
and calls :func:`rescore_nbest_dir` or :func:`rescore.jobs.tune.tune_nbest_dir`. A job is
checked when it is built, before any work: every value finite and in range, the options a
sensible combination (an :class:`~rescore.errors.OptionError`, exit 2), no output path that is
an input. Bad data found
while working is a :class:`~rescore.errors.RescoreError` (exit 1).

An output dir is written as one set (:class:`rescore.io.outdir.OutputSet`): one writer at a time
(a lock), the outputs of an older run removed first, ``manifest.json`` marked complete only at
the end, temporary files of killed runs cleaned up.

The flow of rescore-nbest::

    load NBEST_DIR (+ data dir)  [--split K/N: only job K's conversations are parsed]
         a Kaldi dir as an N-best set (rescore.nbest.sets); any other format as a table by its reader
         (rescore.formats), its columns weighted (rescore.nbest.tables), made an N-best set
      -> NN LM costs: --model (engine, writes lmwt.nn) | --nn-costs | none
         (K models or cost files: each scored on its own, lmwt.nn.1..K, mixed into lmwt.nn)
      -> the costs checked once (rescore.nbest.combine.NnCosts; an overflow names its file and line)
      -> interpolation (rescore.nbest.interp) -> 1-best per utterance
      -> OUT_DIR/{lmwt.interp, text} + report.{json,txt} (rescore.metrics) with references
         (another format: scores.tsv instead of lmwt.interp, and --write-format's result files)

``rescore-nbest --jobs A:B`` (:func:`nbest_jobs`, :func:`rescore_nbest_jobs`) runs Kaldi's jobs
A..B in one process: JOB in the paths is each job's number, every job is loaded and checked
as above, the NN LM scores all jobs' conversations in one engine run, and each job's OUT_DIR
gets what a run of its own writes; nothing is written unless every job gets that far.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore import metrics
from rescore.bulk import gc_frozen
from rescore.errors import OptionError, RescoreError, check
from rescore.formats.base import ReadOptions, WriteArgs
from rescore.formats.registry import (FORMATS, KNOWN_RESULT_FILES, RESULT_FORMATS, canonical, result_files,
                                      result_names, side_files)
from rescore.formats.tsv import write_nbest_table
from rescore.formats.icefall import icefall_test_set
from rescore.formats.kaldi import KaldiDir, kaldi_dir, words_txt_of
from rescore.formats.table import with_columns
from rescore.io.files import atomic_output, write_json
from rescore.io.kaldi import write_nn_costs, write_table
from rescore.io.outdir import MANIFEST_NAME, OutputSet
from rescore.io.symbols import read_vocabulary
from rescore.jobs.scoring import score_models, score_sets
# (their home is rescore.jobs.scoring; imported from here by tools and tests)
from rescore.jobs.scoring import auto_oov_penalty, score_nbest_set  # noqa: F401
from rescore.metrics.refnorm import normalize_refs
from rescore.nbest import checks as sanity
from rescore.nbest.cascade import CASCADE_FILE, Cascade, CascadeRanks, write_ranks
from rescore.nbest.combine import CostArrays, NnCosts
from rescore.nbest.interp import Params, equal_mix
from rescore.nbest.sets import load_nbest_dir
from rescore.nbest.tables import ADDED, column_weights, is_kaldi_default, load_table, to_nbest_set
from rescore.settings import OOV_AUTO, OOV_NONE, EngineSettings, is_hf_spec
from rescore.vocab import count_words, read_sentences

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

# The most NN LMs (or cost files) one rescore-nbest run interpolates.
MAX_MODELS = 8

# Every file rescore-nbest may write into OUT_DIR: an older run's are removed before a new run
# writes (unless one is an input of the new run), so a set never mixes two runs. lmwt.nn.k is
# model k's own cost when several are interpolated.
NBEST_OUTPUTS = ("lmwt.nn", "lmwt.interp", "text", "report.json", "report.txt", "buckets.png", CASCADE_FILE,
                 *(f"lmwt.nn.{k}" for k in range(1, MAX_MODELS + 1)))
# ... and of an input in another format than Kaldi's: scores.tsv, the result files of --write-format
# (icefall's depend on the input's name, a speaker's text_spk<k>... on the speaker: not listed)
TABLE_OUTPUTS = (*NBEST_OUTPUTS, "scores.tsv", *KNOWN_RESULT_FILES)


def check_paths(paths: Sequence[str], option: str, what: str = "files") -> Tuple[str, ...]:
    """A job's list of paths (one per model) as a tuple of str, at most MAX_MODELS of them."""
    if not isinstance(paths, (list, tuple)):
        raise TypeError(f"{option}: a tuple of paths (one per model, () for none), got {paths!r}")
    paths = tuple(str(p) for p in paths)
    check(len(paths) <= MAX_MODELS, f"at most {MAX_MODELS} {what}", option, len(paths))
    return paths


def recorded(paths: Sequence[str]):
    """Paths as the manifest records them: null, one path, or a list."""
    return None if not paths else paths[0] if len(paths) == 1 else list(paths)


# --------------------------------------------------------------------------------------------
# Job splitting (Kaldi's $cmd JOB=1:$nj)


def parse_split(spec: str) -> Tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N (Kaldi's JOB numbering starts at 1)."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise OptionError("K/N with integers, e.g. 2/8", option="--split", got=spec) from None
    check(1 <= k <= n, "K/N with 1 <= K <= N", "--split", spec)
    return k, n


def split_slice(n_items: int, k: int, n_jobs: int, block: int = 1) -> slice:
    """Job k of n_jobs (1-based): a contiguous run of whole blocks of ``block`` items, block
    counts differing by at most one, earlier jobs first. Concatenating the outputs of jobs
    1..N in order (``cat``) gives the lines of one process in the same order; with
    ``block = conv_batch`` the fast engine's batches, hence its floats, are the same too."""
    n_blocks = -(-n_items // block)
    base, extra = divmod(n_blocks, n_jobs)
    start = (k - 1) * base + min(k - 1, extra)
    stop = start + base + (1 if k <= extra else 0)
    return slice(min(n_items, start * block), min(n_items, stop * block))


def split_share(conversation_ids: Sequence[str], k: int, n: int, block: int) -> List[str]:
    """The conversations (ids, of all of a set's in carry order) that job k of n scores: the
    ``select`` of rescore.nbest.sets.load_nbest_dir, which then parses only their entries."""
    part = list(conversation_ids[split_slice(len(conversation_ids), k, n, block)])
    log.info("job %d of %d: %d of the %d conversations", k, n, len(part), len(conversation_ids))
    if not part:
        log.warning("job %d of %d has no conversations (fewer blocks of --conv-batch %d than jobs)",
                    k, n, block)
    return part


# --------------------------------------------------------------------------------------------
# rescore-nbest


def lexicon_of(nbest_dir: PathLike, words_txt: Optional[PathLike]) -> List[str]:
    """The recognizer's words: those of the N-best set's words.txt (words_txt_of), none where
    there is none."""
    return lexicon_in(words_txt_of(nbest_dir, words_txt))


def lexicon_in(words_txt: Optional[Path]) -> List[str]:
    """The words of a words.txt (its first two, <eps> and the like, aside), none without one."""
    return read_vocabulary(words_txt).words[2:] if words_txt is not None else []


def model_oov_penalty(s: EngineSettings, nbest_dir: PathLike, words_txt: Optional[PathLike],
                      train_text: Optional[PathLike]) -> EngineSettings:
    """The settings of a job that scores with a model, its OOV penalty's default resolved: None
    (not given) becomes 'auto' where a training text or a words.txt is known (train_text,
    words_txt, or the words.txt beside NBEST_DIR), else OOV_NONE; 'auto' needs one of them."""
    counted = train_text is not None or words_txt_of(nbest_dir, words_txt) is not None
    if s.oov_penalty is None:
        return s.replace(oov_penalty=OOV_AUTO if counted else OOV_NONE)
    check(s.oov_penalty != OOV_AUTO or counted, f"--train-text (the LM training text) or a words.txt for "
          f"--oov-penalty {OOV_AUTO}", "--oov-penalty", OOV_AUTO)
    return s


@dataclass(frozen=True)
class NbestJob:
    """rescore-nbest: interpolate NBEST_DIR's costs (with NN LM costs: computed by the
    checkpoints ``models`` with the engine ``scoring``, or read from ``nn_costs``), pick each
    utterance's 1-best and write OUT_DIR. Checked when built (OptionError for a bad value or
    combination, before any work).

    ``scoring.oov_penalty`` None (not given) becomes 'auto' where a training text or a
    words.txt is known (train_text, words_txt, or the words.txt beside NBEST_DIR) and a model
    scores, else OOV_NONE."""

    nbest_dir: str
    out_dir: str
    params: Params = field(default_factory=Params)
    data_dir: Optional[str] = None
    words_txt: Optional[str] = None
    nn_costs: Tuple[str, ...] = ()  # lmwt.nn files to read, one per model (excludes models)
    models: Tuple[str, ...] = ()  # LM checkpoints to score with, one per model
    scoring: EngineSettings = field(default_factory=EngineSettings)
    train_text: Optional[str] = None  # LM training text: rare-word buckets, --oov-penalty auto
    num_buckets: int = 10
    allow_missing: bool = False
    split: Optional[Tuple[int, int]] = None  # (K, N): job K of N
    plot: bool = True
    params_file: Optional[str] = None  # where params came from (an input, for the checks)
    extra_report: Dict[str, object] = field(default_factory=dict)
    allow_oov_rate: bool = False  # score an LM that lacks most of the words (rescore.nbest.checks)
    normalize_refs: bool = False  # lower-case the references, strip punctuation (rescore.metrics.refnorm)
    # two models as a cascade: the last scores only the first's survivors (rescore.nbest.cascade)
    cascade: Cascade = field(default_factory=Cascade)
    # the input's format (rescore.formats.registry.FORMATS): a Kaldi N-best dir is loaded as a set
    # (rescore.nbest.sets) and gets lmwt.interp; any other is read as a table (rescore.nbest.tables)
    # and gets scores.tsv, its columns weighted by score_weights
    fmt: str = "kaldi"
    score_weights: Mapping[str, float] = field(default_factory=dict)  # --score-weight: column -> weight
    manifest: Optional[str] = None  # NeMo's manifest of the decoded set
    read_options: ReadOptions = ReadOptions()  # the readers' own options (rescore.formats.base)
    write_format: Optional[str] = None  # rescore.formats.registry.RESULT_FORMATS: the result in that format too
    icefall_suffix: Optional[str] = None  # icefall's params.suffix in the names of its result files

    def __post_init__(self):
        if not isinstance(self.params, Params):
            raise TypeError("params must be a rescore.nbest.interp.Params")
        object.__setattr__(self, "fmt", canonical(self.fmt))
        check(self.fmt in FORMATS, f"one of {', '.join(FORMATS)}", "--format", self.fmt)
        self._check_format()
        object.__setattr__(self, "nn_costs", check_paths(self.nn_costs, "--nn-costs"))
        object.__setattr__(self, "models", check_paths(self.models, "--model", "models"))
        k = self.num_models
        if k > 1 and self.params.num_models == 1:  # no mix (one share, the default): equal shares
            object.__setattr__(self, "params", self.params.replace(mix=equal_mix(k)))
        where = f"; the mix may come from --params {self.params_file}" if self.params_file else ""
        check(self.params.num_models == max(k, 1), f"one share per model ({k} given by --model or --nn-costs{where})",
              "--mix", ",".join(f"{m:g}" for m in self.params.mix))
        check(not isinstance(self.num_buckets, bool) and isinstance(self.num_buckets, int) and self.num_buckets >= 1,
              "an integer >= 1", "--buckets", self.num_buckets)
        check(not (self.models and self.nn_costs), "one source of NN LM costs: --model and --nn-costs exclude each "
              "other", "--nn-costs", ",".join(self.nn_costs))
        check(self.params.weight == 0.0 or k > 0, "NN LM costs (--nn-costs or --model) for an NN LM weight other "
              "than 0", "--weight", f"{self.params.weight:g}")
        self._check_scoring()
        if self.cascade.on:
            option = "--cascade-top" if self.cascade.top else "--cascade-margin"
            got = self.cascade.top or self.cascade.margin
            check(len(self.models) == 2, "two --model for a cascade (the cheap one first, the expensive one "
                  "second)", option, f"{got} with {len(self.models)} --model")
        if self.split is not None:
            k, n = self.split
            check(1 <= k <= n, "K/N with 1 <= K <= N", "--split", f"{k}/{n}")
        self.output_set().check()  # no output is an input, OUT_DIR can be a directory

    def _check_format(self) -> None:
        """The options of an input in another format than Kaldi's (they act on a table)."""
        table = self.fmt != "kaldi"
        check(table or not self.score_weights, "an input other than a Kaldi dir (--format)", "--score-weight",
              ",".join(self.score_weights))
        check(self.manifest is None or FORMATS[self.fmt].manifest, "--format nemo (the manifest is NeMo's)",
              "--manifest", self.manifest)
        if FORMATS[self.fmt].manifest and self.manifest is None:
            raise OptionError(f"--manifest (NeMo's manifest of the decoded set) with --format {self.fmt}",
                              option="--manifest")
        check(self.write_format is None or (table and self.write_format in RESULT_FORMATS),
              f"one of {', '.join(RESULT_FORMATS)}, for an input other than a Kaldi dir (--format)",
              "--write-format", self.write_format)
        check(self.write_format is None or not FORMATS[self.write_format].manifest or self.fmt == self.write_format,
              f"--format {self.write_format} ({self.write_format}'s files follow its manifest)", "--write-format",
              self.write_format)
        check(self.icefall_suffix is None or self.write_format == "icefall", "--write-format icefall",
              "--icefall-suffix", self.icefall_suffix)
        check(self.icefall_suffix is None or (self.icefall_suffix and "/" not in self.icefall_suffix),
              "a file name part (not empty, no '/')", "--icefall-suffix", self.icefall_suffix)

    def _check_scoring(self) -> None:
        """The engine settings that need a model, and the OOV penalty's default (class doc)."""
        s = self.scoring
        if self.models:
            object.__setattr__(self, "scoring", model_oov_penalty(s, self.nbest_dir, self.words_txt,
                                                                  self.train_text))
        elif s.oov_penalty is None:
            object.__setattr__(self, "scoring", s.replace(oov_penalty=OOV_NONE))
        else:
            # Without a model these settings would do nothing: say so rather than ignore them.
            check(s.oov_penalty in (0, 0.0), "--model for an OOV penalty (it applies to the NN LM's <unk>)",
                  "--oov-penalty", s.oov_penalty)
        check(self.models or s.cache_window == 0, "--model for the neural cache", "--cache-window", s.cache_window)
        if any(map(is_hf_spec, self.models)):  # a Hugging Face LM among them (rescore.models.hf)
            from rescore.models.hf import check_settings  # (lazy: keeps torch out of the job's checks)

            # (a cascade scores its models one after the other, whatever --mix-carry says)
            check_settings(s, 1 if self.cascade.on else len(self.models))

    # -- what it reads and writes

    def lexicon(self) -> List[str]:
        """The recognizer's words: those of the N-best set's words.txt (--words-txt, or the one
        beside NBEST_DIR), none where there is none."""
        return lexicon_in(self.nbest_files.words_txt)

    @cached_property
    def nbest_files(self) -> KaldiDir:
        """NBEST_DIR's files as a Kaldi N-best dir (its archives, the words.txt given or beside
        it), found once, on first use: what the output set guards, the set is loaded from and
        its checks read. (For an input in another format: no archives; its words.txt.)"""
        return kaldi_dir(self.nbest_dir, self.words_txt)

    @property
    def num_models(self) -> int:
        """How many NN LMs (models or cost files) are interpolated (0: none)."""
        return len(self.models) or len(self.nn_costs)

    def inputs(self) -> List[Path]:
        files = [] if self.fmt == "kaldi" else self._table_inputs()
        files += self.nbest_files.files(self.data_dir)
        files += [Path(p) for p in (*self.nn_costs, self.train_text, *self.models, self.params_file)
                  if p is not None]
        return files

    def _table_inputs(self) -> List[Path]:
        """The files an input in another format is read from: the file, or a decode dir's files
        (not those of an earlier run's OUT_DIR inside it), those beside it, the manifest."""
        p = Path(self.nbest_dir)
        files = [p]
        if p.is_dir():
            out = Path(self.out_dir).resolve()
            earlier = (out / MANIFEST_NAME).is_file()
            files = [f for f in p.rglob("*") if f.is_file() and not (earlier and out in f.resolve().parents)]
        files += [Path(f) for f in side_files(p, self.fmt)]
        return files + [Path(m) for m in (self.manifest,) if m is not None]

    def result_names(self) -> List[str]:
        """The files of --write-format (rescore.formats.registry); ESPnet's 'text' is OUT_DIR/text."""
        if self.write_format is None:
            return []
        names = result_names(self.write_format, WriteArgs(test_set=icefall_test_set(self.nbest_dir),
                                                          speaker=self.read_options.speaker,
                                                          suffix=self.icefall_suffix))
        return [n for n in names if n != "text"]

    def outputs(self, with_refs: Optional[bool] = None) -> List[str]:
        """The files this job will write (reports only with references; ``with_refs`` None: a
        data dir with a 'text'): lmwt.nn with models (the mixed costs with several, and lmwt.nn.k
        each model's own) or with several cost files (mixed); lmwt.interp for a Kaldi dir,
        scores.tsv and the result files of --write-format for another input."""
        if with_refs is None:
            with_refs = self.data_dir is not None and (Path(self.data_dir) / "text").exists()
        if self.fmt != "kaldi":
            names = ["text", "scores.tsv", *self.result_names()]
            if self.models or len(self.nn_costs) > 1:
                names.append("lmwt.nn")
            if len(self.models) > 1:
                names += [f"lmwt.nn.{k}" for k in range(1, len(self.models) + 1)]
            if with_refs:
                names += ["report.json", "report.txt"]
                if self.train_text is not None and self.plot:
                    names.append("buckets.png")
            return names
        names = ["lmwt.interp", "text"]
        if self.models or len(self.nn_costs) > 1:
            names.insert(0, "lmwt.nn")
        if len(self.models) > 1:
            names[1:1] = [f"lmwt.nn.{k}" for k in range(1, len(self.models) + 1)]
        if self.cascade.on:
            names.append(CASCADE_FILE)
        if with_refs:
            names += ["report.json", "report.txt"]
            if self.train_text is not None and self.plot:
                names.append("buckets.png")
        return names

    def settings(self) -> dict:
        return {"command": "rescore-nbest", "nbest_dir": self.nbest_dir, "data_dir": self.data_dir,
                "params": self.params.as_dict(), "nn_costs": recorded(self.nn_costs),
                "model": recorded(self.models), "split": list(self.split) if self.split else None,
                "scoring": {f.name: getattr(self.scoring, f.name) for f in fields(self.scoring)}
                if self.models else None,
                "train_text": self.train_text, "num_buckets": self.num_buckets,
                "normalize_refs": self.normalize_refs,
                "cascade": self.cascade.as_dict() if self.cascade.on else None,
                **({} if self.fmt == "kaldi" else
                   {"format": self.fmt, "manifest": self.manifest, "score_weights": dict(self.score_weights),
                    "read_options": asdict(self.read_options), "write_format": self.write_format,
                    "icefall_suffix": self.icefall_suffix})}

    def output_set(self, with_refs: Optional[bool] = None) -> OutputSet:
        return OutputSet(self.out_dir, self.outputs(with_refs), self.inputs(),
                         known=NBEST_OUTPUTS if self.fmt == "kaldi" else TABLE_OUTPUTS, settings=self.settings(),
                         split=self.split)


def rescore_nbest_dir(job: NbestJob) -> Optional[dict]:
    """Run a rescore-nbest job: OUT_DIR/{lmwt.nn (with a model), lmwt.interp, text} and, with
    references, report.json / report.txt (+ buckets.png with train_text); an input in another
    format than Kaldi's gets scores.tsv instead of lmwt.interp (:func:`rescore_table`). Returns
    the report, or None without references."""
    if job.fmt != "kaldi":
        return rescore_table(job)
    with job.output_set() as out:
        select = None
        if job.split is not None:  # read only the job's share
            select = partial(split_share, k=job.split[0], n=job.split[1], block=job.scoring.conv_batch)
        nbest = load_nbest_dir(job.nbest_files, job.data_dir, allow_missing=job.allow_missing, select=select)
        with gc_frozen():  # (the loaded set is not walked by the cyclic GC again: rescore.bulk)
            return write_rescored(out, job, nbest)


@dataclass
class Rescored:
    """A job's N-best set with its NN costs and 1-best computed and checked; nothing written yet
    (so that an error in one of several jobs leaves every job's old outputs as they were).

    checks: rescore.nbest.checks.InputChecks; nn: rescore.nbest.combine.NnCosts (None without); arrays:
    rescore.nbest.combine.CostArrays; best: utt -> rank of its 1-best; nn_names: the lmwt.nn files of
    the models (lmwt.nn, or lmwt.nn.1..K with several), none without models; train_counts: the
    words of the LM training text (train_counts_of)."""

    nbest: object
    checks: object
    nn: object
    arrays: object
    best: Dict[str, int]
    graph: Optional[Dict[str, float]]  # key -> new graph cost (lmwt.interp); None: not written
    nn_names: List[str]
    train_counts: object
    cascade: Optional[CascadeRanks] = None  # a cascade's ranking (lmwt.cascade); None without one


def train_sentences_of(job: NbestJob):
    """The sentences of the job's LM training text (rescore.vocab.read_sentences), None without
    one: read once for the rare-word counts and the check of the references against it."""
    return read_sentences(job.train_text) if job.train_text else None


def train_counts_of(job: NbestJob, sentences=None):
    """Counter of the words of the job's LM training text (its ``sentences`` where read
    already), None without one."""
    if sentences is None:
        sentences = train_sentences_of(job)
    return count_words(sentences) if sentences is not None else None


def check_input(job: NbestJob, nbest, train_sentences=None):
    """(rescore.nbest.checks.InputChecks, the set's CostArrays without NN costs, their fixed
    costs) of a loaded set: its checks before any scoring (rescore.nbest.checks.check_nbest_input,
    with its ``train_sentences``), an overflow of the fixed costs included. With --normalize-refs
    the set's references are normalised first (the edge apostrophes of the hypotheses' and
    words.txt's words kept)."""
    if job.normalize_refs and nbest.refs is not None:
        words = {w for u in nbest.utterances() for h in u.hyps for w in h.words}
        nbest.refs = normalize_refs(nbest.refs, words.union(job.lexicon()))
        log.info("references normalised (--normalize-refs): typographic quotes as ASCII, lower case, punctuation "
                 "stripped")
    checks = sanity.check_nbest_input(nbest, job.models, job.words_txt, job.allow_oov_rate,
                                      fmt=job.fmt, train_sentences=train_sentences,
                                      train_text=job.train_text, params_file=job.params_file)
    arrays = CostArrays(nbest)
    return checks, arrays, arrays.fixed(job.params)


def rescore_loaded(out_dir: PathLike, job: NbestJob, nbest, arrays: CostArrays, checks, results, train_counts,
                   graph: bool = True) -> Rescored:
    """The job's NN costs (the engine's ``results``, rescore.jobs.scoring.score_models, with models;
    else read from its cost files), interpolated into the 1-best and, with ``graph``, the new
    graph costs: checked, nothing written. arrays: the set's CostArrays without NN costs
    (check_input)."""
    names = []
    ranks = None
    if job.models:
        names = ["lmwt.nn"] if len(job.models) == 1 else [f"lmwt.nn.{k}" for k in range(1, len(job.models) + 1)]
        nn = NnCosts.of_engine(nbest, results, [str(Path(out_dir) / n) for n in names])
        if job.cascade.on:
            ranks = CascadeRanks(nn.keys, results.rank, results.gap, results.scored,
                                 str(Path(out_dir) / CASCADE_FILE))
    else:
        nn = NnCosts.read(nbest, job.nn_costs, share=job.split is not None) if job.nn_costs else None
    arrays = arrays.with_nn(nn, eligible=ranks.scored if ranks is not None else None)
    best = arrays.choice(job.params)
    graph_costs = arrays.graph_costs(job.params) if graph else None
    return Rescored(nbest, checks, nn, arrays, best, graph_costs, names, train_counts, ranks)


def write_rescored(out: OutputSet, job: NbestJob, nbest, write_costs=None) -> Optional[dict]:
    """Score (with a model), interpolate and write a loaded N-best set into an open output set:
    the costs (lmwt.interp, or what ``write_costs(out, arrays)`` writes from the set's
    rescore.nbest.combine.CostArrays, returning its path: write_scores' scores.tsv), the
    1-best and the report."""
    sentences = train_sentences_of(job)
    train_counts = train_counts_of(job, sentences)
    checks, arrays, fixed = check_input(job, nbest, sentences)
    del sentences  # (the training text as lists of words, tens of MB: not held while scoring)
    warn_unusual(job, nbest)
    results = None
    if job.models:
        lexicon = job.lexicon() if job.scoring.oov_penalty == OOV_AUTO else ()
        results = score_models(nbest, job.params, job.models, job.scoring, fixed, train_counts, lexicon,
                               job.cascade)
    done = rescore_loaded(out.dir, job, nbest, arrays, checks, results, train_counts, graph=write_costs is None)
    return write_outputs(out, job, done, write_costs)


def warn_unusual(job: NbestJob, nbest) -> None:
    """Warn of settings that are legal but usually a mistake: an acoustic scale given as the
    inverse one, and a state carry over a set with no conversations to carry along."""
    if 0 < job.params.inv_acwt < 1:
        log.warning("--inv-acwt %g is the size of Kaldi's acoustic scale (acwt, e.g. 0.1); --inv-acwt "
                    "is its inverse (LMWT, usually 6 to 20): the acoustics now weigh more than the LM",
                    job.params.inv_acwt)
    if job.models and job.scoring.state_carry != "none" and nbest.grouping == "utterance":
        log.warning("--state-carry %s: no segments or utt2spk were read (--data-dir), so every utterance is its "
                    "own conversation and the carry carries nothing", job.scoring.state_carry)


def write_outputs(out: OutputSet, job: NbestJob, r: Rescored, write_costs=None) -> Optional[dict]:
    """Write a rescored set into its open output set (write_rescored): each model's lmwt.nn, the
    mixed one, the costs, the 1-best (text) and, with references, the report."""
    params, nbest = job.params, r.nbest
    for k, name in enumerate(r.nn_names):
        write_nn_costs(out.path(name), r.nn.model(k))
        log.info("wrote %s (%d hypotheses)", out.path(name), len(r.nn.keys))
    if r.cascade is not None:
        write_ranks(out.path(CASCADE_FILE), r.cascade, r.nn.keys)
        log.info("wrote %s: the cascade's ranking (%d of %d hypotheses scored by model 2)", out.path(CASCADE_FILE),
                 int(r.cascade.scored.sum()), len(r.nn.keys))
    if r.nn is not None and r.nn.num_models > 1:
        write_nn_costs(out.path("lmwt.nn"), r.nn.mixed_rows(params.mix))
        log.info("wrote %s: the mixed costs (shares %s)", out.path("lmwt.nn"),
                 ",".join(f"{m:g}" for m in params.mix))
    if write_costs is None:
        costs_path = out.path("lmwt.interp")
        write_table(costs_path, "float", r.graph)
    else:
        costs_path = write_costs(out, r.arrays)
    with out.open("text") as f:  # Kaldi's data/text: 'utt w1 w2 ...', no trailing space
        for u in nbest.utterances():
            f.write(" ".join([u.id, *u.hyps[r.best[u.id]].words]) + "\n")
    log.info("wrote %s and %s", costs_path, out.path("text"))
    if nbest.refs is None:
        log.info("no references (no --data-dir with 'text'): no WER report")
        return None
    extra = dict(job.extra_report, input_checks=r.checks.as_dict())
    if job.num_models > 1:  # name what was interpolated
        extra["models"] = list(job.models or job.nn_costs)
    if r.cascade is not None:
        extra["cascade"] = {**job.cascade.as_dict(), "hypotheses": len(r.nn.keys),
                            "scored_by_model_2": int(r.cascade.scored.sum())}
    words = nbest.words()
    report = metrics.nbest_report(words, r.best, params=params.as_dict(), train_counts=r.train_counts,
                                  num_buckets=job.num_buckets, extra=extra).as_dict()
    if r.train_counts is not None and job.plot:
        metrics.plot_comparison(report["comparison"], out.path("buckets.png"), metrics.nbest_chart_title(words))
    write_json(out.path("report.json"), report)
    with out.open("report.txt") as f:
        f.write(metrics.format_report(report) + "\n")
    return report


# --------------------------------------------------------------------------------------------
# An input in another format than Kaldi's (a table: rescore.nbest.tables)


def write_scores(out: OutputSet, arrays, params: Params, table, job: Optional[NbestJob] = None,
                 refs=None) -> Path:
    """OUT_DIR/scores.tsv: the input's table (the utterances of the set, e.g. a --split job's)
    with the NN LM cost and the total of each hypothesis (arrays: rescore.nbest.combine.CostArrays);
    with the job's --write-format, that format's files too (rescore.formats.registry)."""
    ranks = [tuple(k.rsplit("-", 1)) for k in arrays.keys]
    added = {(u, int(r)): v for (u, r), v in zip(ranks, zip(arrays.lnn(params.mix), arrays.total(params)))}
    kept = replace(table, utterances=[u for u in table.utterances if (u.id, 1) in added])
    path = out.path("scores.tsv")
    write_nbest_table(path, with_columns(kept, ADDED, added, str(path)))
    if job is not None and job.write_format is not None:
        costs = {k: v[1] for k, v in added.items()}
        files = result_files(job.write_format, kept, costs, WriteArgs(manifest=job.manifest, refs=refs,
                                                                      speaker=job.read_options.speaker,
                                                                      suffix=job.icefall_suffix))
        for name in job.result_names():
            with atomic_output(out.path(name), "w") as f:
                f.write(files[name])
        log.info("wrote %s (%s)", ", ".join(job.result_names()), job.write_format)
    return path


def rescore_table(job: NbestJob) -> Optional[dict]:
    """Run a job on an input in another format than Kaldi's: read as a table (rescore.nbest.tables),
    its columns weighted (its ranking rule), made an N-best set and rescored as a Kaldi dir's, the
    table with the NN LM cost and the total of each hypothesis written as OUT_DIR/scores.tsv
    (:func:`write_scores`). Returns the report, or None without references."""
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
    if job.write_format is not None and FORMATS[job.write_format].refs and nbest.refs is None:
        raise OptionError(f"references (the input's own, or --data-dir with a 'text') for {job.write_format}'s "
                          "result files", option="--write-format", got=job.write_format)
    if job.split is not None:
        k, n = job.split
        nbest = nbest.subset(split_share([c.id for c in nbest.conversations], k, n, job.scoring.conv_batch))
    job = replace(job, extra_report=dict(job.extra_report, input=job.nbest_dir, format=job.fmt,
                                         score_weights=weights))
    with job.output_set(nbest.refs is not None) as out:
        return write_rescored(out, job, nbest, lambda out, arrays: write_scores(out, arrays, job.params, table, job,
                                                                                nbest.refs))


# --------------------------------------------------------------------------------------------
# Several Kaldi jobs in one process (rescore-nbest --jobs A:B)

JOB = "JOB"  # a job's number in its paths, as in Kaldi's $cmd JOB=1:N ... archives.JOB
# The NbestJob fields that may name a job's own files (every JOB replaced by its number, as
# run.pl replaces it), with their options; NBEST_DIR and OUT_DIR must.
JOB_PATHS = {"nbest_dir": "NBEST_DIR", "out_dir": "OUT_DIR", "data_dir": "--data-dir",
             "words_txt": "--words-txt", "nn_costs": "--nn-costs"}
# The files every job shares: one engine run has one model, one setting (the weight picks the
# carried hypothesis) and one training text.
SHARED_PATHS = {"models": "--model", "params_file": "--params", "train_text": "--train-text"}


def parse_jobs(spec: str) -> range:
    """``"A:B"`` -> range(A, B + 1) with 1 <= A <= B (Kaldi's JOB=A:B; jobs count from 1)."""
    try:
        a, b = (int(x) for x in spec.split(":"))
    except ValueError:
        raise OptionError("A:B with integers, e.g. 1:4 for jobs 1 to 4", option="--jobs", got=spec) from None
    check(1 <= a <= b, "A:B with 1 <= A <= B (Kaldi numbers its jobs from 1)", "--jobs", spec)
    return range(a, b + 1)


def job_path(path: Optional[PathLike], k: int) -> Optional[str]:
    """``path`` with every JOB replaced by the job number k; None stays None."""
    return None if path is None else str(path).replace(JOB, str(k))


def _paths(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def job_numbers(spec: str, **job) -> range:
    """The job numbers of ``--jobs spec`` for a job of these NbestJob fields (those given),
    checked before any file is read: an OptionError (naming the option) where NBEST_DIR or
    OUT_DIR lacks JOB, where a file of SHARED_PATHS has it, and with a split."""
    numbers = parse_jobs(spec)
    check(job.get("split") is None, "either --jobs (several jobs in one process) or --split (a share of one "
          "N-best dir), not both", "--jobs", f"{spec} with --split")
    for name in ("nbest_dir", "out_dir"):
        check(JOB in str(job[name]), f"{JOB} in {JOB_PATHS[name]} (each job has its own, e.g. archives.{JOB})",
              "--jobs", f"{spec} with {JOB_PATHS[name]} {job[name]}")
    for name, option in SHARED_PATHS.items():
        for p in _paths(job.get(name)):
            check(p is None or JOB not in str(p), f"one {option} for every job of --jobs (they are scored in "
                  f"one engine run); {JOB} is replaced only in {', '.join(JOB_PATHS.values())}", option, p)
    return numbers


def nbest_jobs(spec: str, **job) -> Dict[int, NbestJob]:
    """The jobs of ``rescore-nbest --jobs A:B``: job k is ``NbestJob(**job)`` with JOB replaced by k
    in the paths of JOB_PATHS, each checked as it is built (after job_numbers' checks)."""
    numbers = job_numbers(spec, **job)
    jobs = {}
    for k in numbers:
        kw = dict(job)
        for name in JOB_PATHS:
            v = kw.get(name)
            kw[name] = tuple(job_path(p, k) for p in v) if isinstance(v, (list, tuple)) else job_path(v, k)
        jobs[k] = NbestJob(**kw)
    return jobs


def check_jobs(jobs: Mapping[int, NbestJob]) -> NbestJob:
    """Checks of several jobs run together, before any work (OptionError): one model and one
    setting for all (the OOV penalty's default resolves per job), the same recognizer words
    where the OOV penalty is counted from them, and no job's output over another's input.
    Returns the first job."""
    first = next(iter(jobs.values()))
    for k, j in jobs.items():
        if (j.models, j.params, j.train_text, j.cascade) != (first.models, first.params, first.train_text,
                                                             first.cascade):
            raise ValueError(f"job {k}: the jobs of one run share their models, params and training text")
        check(j.scoring == first.scoring, "one OOV penalty for every job (give --oov-penalty, or --words-txt: "
              "a job's default depends on the words.txt found beside its NBEST_DIR)", "--oov-penalty",
              f"{j.scoring.oov_penalty} for job {k}, {first.scoring.oov_penalty} for the first")
    if first.models and first.scoring.oov_penalty == OOV_AUTO:
        words = {k: words_txt_of(j.nbest_dir, j.words_txt) for k, j in jobs.items()}
        if len({str(p) for p in words.values()}) > 1:
            lexicon = first.lexicon()
            for k, j in jobs.items():
                check(j.lexicon() == lexicon, "the same words.txt for every job with --oov-penalty auto (one "
                      "model, one penalty)", "--words-txt", f"{words[k]} (job {k}), {words[next(iter(jobs))]}")
    inputs = [p for j in jobs.values() for p in j.inputs()]
    for j in jobs.values():
        OutputSet(j.out_dir, j.outputs(), inputs).check()
    return first


def rescore_nbest_jobs(jobs: Mapping[int, NbestJob]) -> Dict[int, Optional[dict]]:
    """Run several rescore-nbest jobs (``nbest_jobs``: job number -> job) in one process: each
    job's OUT_DIR gets what rescore_nbest_dir of that job writes. The models are loaded once and
    the conversations of all jobs are scored in one engine run (rescore.jobs.scoring.score_sets), so
    that the forward calls batch across jobs; the costs equal those of one run per job up to
    float rounding.

    All or nothing, as Kaldi's run.pl fails a step when one of its jobs fails: every OUT_DIR is
    locked first, and every job is read, checked, scored and interpolated before the first file
    is written, so a bad input in one job (a RescoreError naming its file and line) fails the
    run with every job's older outputs as they were. Returns job -> its report (None without
    references)."""
    first = check_jobs(jobs)
    with contextlib.ExitStack() as stack:
        outs = {k: stack.enter_context(j.output_set()) for k, j in jobs.items()}
        sentences = train_sentences_of(first)
        train_counts = train_counts_of(first, sentences)
        loaded = {}
        for k, job in jobs.items():
            log.info("job %d: reading %s", k, job.nbest_dir)
            nbest = load_nbest_dir(job.nbest_files, job.data_dir, allow_missing=job.allow_missing)
            loaded[k] = (nbest, *check_input(job, nbest, sentences))
            log.info("job %d: %d conversations, %d utterances, %d hypotheses", k, len(nbest.conversations),
                     nbest.num_utts, nbest.num_hyps)
        del sentences  # (the training text as lists of words, tens of MB: not held while scoring)
        results = dict.fromkeys(jobs)
        if first.models:
            lexicon = first.lexicon() if first.scoring.oov_penalty == OOV_AUTO else ()
            log.info("jobs %d-%d: %d conversations in one engine run", min(jobs), max(jobs),
                     sum(len(n.conversations) for n, _, _, _ in loaded.values()))
            scored = score_sets([(n, fixed) for n, _, _, fixed in loaded.values()], first.params, first.models,
                                first.scoring, train_counts, lexicon, first.cascade)
            results = dict(zip(loaded, scored))
        done = {k: rescore_loaded(j.out_dir, j, loaded[k][0], loaded[k][2], loaded[k][1], results[k], train_counts)
                for k, j in jobs.items()}
        return {k: write_outputs(outs[k], j, done[k]) for k, j in jobs.items()}
