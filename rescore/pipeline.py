"""The jobs of the commands: rescore an N-best dir, tune a setting; the job split and the OOV
penalty that they use.

A command parses its options into a job (:class:`NbestJob`, :class:`TuneJob`) and calls
:func:`rescore_nbest_dir` or :func:`tune_nbest_dir`. A job is checked when it is built, before
any work: every value finite and in range, the options a sensible combination (an
:class:`~rescore.errors.OptionError`, exit 2), no output path that is an input. Bad data found
while working is a :class:`~rescore.errors.RescoreError` (exit 1).

An output dir is written as one set (:class:`rescore.io.outdir.OutputSet`): one writer at a time
(a lock), the outputs of an older run removed first, ``manifest.json`` marked complete only at
the end, temporary files of killed runs cleaned up.

The flow of rescore-nbest (design §3 and §6)::

    load NBEST_DIR (+ data dir)  [--split K/N: only job K's conversations are parsed]
      -> NN LM costs: --model (engine, writes lmwt.nn) | --nn-costs | none
         (K models or cost files: each scored on its own, lmwt.nn.1..K, mixed into lmwt.nn)
      -> interpolation (rescore.interp) -> 1-best per utterance
      -> OUT_DIR/{lmwt.interp, text} + report.{json,txt} (rescore.metrics) with references
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import OptionError, RescoreError
from rescore.interp import Params, check_inv_acwt, check_mix, check_weight, check_wip, equal_mix
from rescore.io.outdir import OutputSet

log = logging.getLogger(__name__)
PathLike = Union[str, Path]

# The engine's names (rescore.engine has the same; kept here so that building a job, and a
# command's --help, does not import torch; a test checks that they agree).
ENGINES = ("fast", "padded", "naive")
STATE_CARRY = ("none", "first-pass", "rescored")
MIX_CARRY = ("mixed", "own")  # several models, carry rescored: from the mixed best, or each its own
SCHEDULES = ("auto", "levels", "segments", "tree")
PRECISIONS = ("auto", "fp32", "bf16")
NORMALIZE = ("exact", "none", "auto")

# The most NN LMs (or cost files) one rescore-nbest run interpolates.
MAX_MODELS = 8

# Every file rescore-nbest may write into OUT_DIR: an older run's are removed before a new run
# writes (unless one is an input of the new run), so a set never mixes two runs. lmwt.nn.k is
# model k's own cost when several are interpolated.
NBEST_OUTPUTS = ("lmwt.nn", "lmwt.interp", "text", "report.json", "report.txt", "buckets.png",
                 *(f"lmwt.nn.{k}" for k in range(1, MAX_MODELS + 1)))


def as_paths(v) -> Tuple[str, ...]:
    """None, one path or several -> a tuple of paths (str)."""
    if v is None:
        return ()
    if isinstance(v, (str, Path)):
        return (str(v),)
    return tuple(str(p) for p in v)


def one_or_many(paths: Sequence[str]):
    """The inverse of as_paths for options and records: None, one path (str), or a tuple."""
    paths = tuple(paths)
    return None if not paths else paths[0] if len(paths) == 1 else paths

MAX_TUNE_SETTINGS = 100_000  # product of the grid axes of rescore-tune


# --------------------------------------------------------------------------------------------
# Job splitting (Kaldi's $cmd JOB=1:$nj)


def parse_split(spec: str) -> Tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N (Kaldi's JOB numbering starts at 1)."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise OptionError("K/N with integers, e.g. 2/8", option="--split", got=spec) from None
    if not 1 <= k <= n:
        raise OptionError("K/N with 1 <= K <= N", option="--split", got=spec)
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
    ``select`` of rescore.nbest.load_nbest_dir, which then parses only their entries."""
    part = list(conversation_ids[split_slice(len(conversation_ids), k, n, block)])
    log.info("job %d of %d: %d of the %d conversations", k, n, len(part), len(conversation_ids))
    if not part:
        log.warning("job %d of %d has no conversations (fewer blocks of --conv-batch %d than jobs)",
                    k, n, block)
    return part


# --------------------------------------------------------------------------------------------
# NN LM scoring of an N-best set (rescore.engine), Kaldi lmwt.nn costs out


def auto_oov_penalty(vocab, train_counts, lexicon=()) -> float:
    """ln(number of word types that ``<unk>`` stands for): the training word types outside
    ``vocab``, with the recognizer's words outside it (``lexicon``: the N-best set's words.txt
    words, where there is one). It spreads the ``<unk>`` probability evenly over them, so that the
    NN LM does not favour hypotheses with words it never saw (found on the mini recipe and the
    dev benchmark: docs/benchmarks.md). The lexicon matters for a model with every training word:
    there no training type is outside, yet the recognizer still has words the model never saw.

    vocab: a Vocabulary (``.words``); train_counts: Counter of the LM training text's words;
    lexicon: the recognizer's words (NbestJob.lexicon).
    """
    known = set(vocab.words)
    unseen = {w for w in train_counts if w not in known and w != "<unk>"}
    unseen.update(w for w in lexicon if w not in known)
    return math.log(max(1, len(unseen)))


def _engine_inputs(nbest, params: Params):
    """The engine's conversations (rescore.engine.UttInput: words and fixed costs) of a set."""
    from rescore.combine import fixed_cost
    from rescore.engine import UttInput

    return [[UttInput([h.words for h in u.hyps],
                      [fixed_cost(h, params.weight, params.inv_acwt, params.wip) for h in u.hyps])
             for u in c.utterances] for c in nbest.conversations]


def _by_key(nbest, costs) -> Dict[str, List[float]]:
    """The engine's result[c][u][h] as key -> costs, in the set's order."""
    out: Dict[str, List[float]] = {}
    for conv, conv_costs in zip(nbest.conversations, costs):
        for utt, utt_costs in zip(conv.utterances, conv_costs):
            for hyp, c in zip(utt.hyps, utt_costs):
                out[hyp.key] = c
    return out


def score_nbest_set(model, nbest, params: Params, **options) -> Dict[str, List[float]]:
    """Per-token NN costs of every hypothesis of a loaded N-best set (``rescore.nbest.NbestSet``),
    keyed by hypothesis key, in the set's order (conversations, utterances, ranks): the lines of
    ``lmwt.nn``. ``params`` gives the fixed costs and the weight that pick the carried best
    hypothesis; ``options`` go to ``rescore.engine.score_nbest``."""
    from rescore.engine import score_nbest

    return _by_key(nbest, score_nbest(model, _engine_inputs(nbest, params), weight=params.weight, **options))


def score_nbest_set_mixed(models, nbest, params: Params, **options) -> List[Dict[str, List[float]]]:
    """score_nbest_set of each of K models scored in lockstep (rescore.engine.score_nbest_mixed):
    with state carry rescored every model carries from the best hypothesis by the mixed cost
    under ``params`` (its weight and mix). ``options`` go to score_nbest_mixed (oov_penalties:
    one per model)."""
    from rescore.engine import score_nbest_mixed

    costs = score_nbest_mixed(models, _engine_inputs(nbest, params), weight=params.weight, mix=params.mix,
                              **options)
    return [_by_key(nbest, c) for c in costs]


@dataclass(frozen=True)
class ScoringOptions:
    """How rescore-nbest scores with an NN LM (``--model`` and the engine's settings; see
    ``rescore-nbest --help`` and rescore.engine.score_nbest). Checked when built."""

    model: Union[None, str, Tuple[str, ...]] = None  # LM checkpoint(s); None: no NN LM scoring
    state_carry: str = "rescored"
    device: str = "auto"
    max_tokens: int = 2048
    engine: str = "fast"
    oov_penalty: Union[float, str] = 0.0  # nats per OOV word, or "auto" (needs train counts)
    conv_batch: int = 16
    schedule: str = "auto"
    precision: str = "auto"
    normalize: str = "exact"  # exact | none | auto (rescore.engine.resolve_normalize)
    cache_window: int = 0  # neural cache (rescore.models.cache); 0: none
    cache_theta: float = 0.3
    cache_lambda: float = 0.1
    mix_carry: str = "mixed"  # several models: carry from the mixed best (lockstep) or each its own
    hf_context: int = 512  # hf: models: tokens of carried context (rescore.models.hf)

    def __post_init__(self):
        object.__setattr__(self, "model", one_or_many(as_paths(self.model)))
        if len(self.models) > MAX_MODELS:
            raise OptionError(f"at most {MAX_MODELS} models", option="--model", got=f"{len(self.models)}")
        if not (self.device in ("auto", "cpu", "cuda") or (self.device.startswith("cuda:")
                                                           and self.device[5:].isdigit())):
            raise OptionError("auto, cpu, cuda or cuda:N", option="--device", got=str(self.device))
        for name, value, allowed in (("--state-carry", self.state_carry, STATE_CARRY),
                                     ("--engine", self.engine, ENGINES),
                                     ("--schedule", self.schedule, SCHEDULES),
                                     ("--precision", self.precision, PRECISIONS),
                                     ("--normalize", self.normalize, NORMALIZE),
                                     ("--mix-carry", self.mix_carry, MIX_CARRY)):
            if value not in allowed:
                raise OptionError(f"one of {', '.join(allowed)}", option=name, got=str(value))
        for name, value, low in (("--max-tokens", self.max_tokens, 1), ("--conv-batch", self.conv_batch, 1),
                                 ("--cache-window", self.cache_window, 0), ("--hf-context", self.hf_context, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise OptionError(f"an integer >= {low}", option=name, got=str(value))
        if self.oov_penalty != "auto":
            if isinstance(self.oov_penalty, str) or not math.isfinite(self.oov_penalty) or self.oov_penalty < 0:
                raise OptionError("a finite number of nats >= 0, or 'auto'", option="--oov-penalty",
                                  got=str(self.oov_penalty))
        if not (math.isfinite(self.cache_theta) and self.cache_theta > 0):
            raise OptionError("a finite number > 0", option="--cache-theta", got=str(self.cache_theta))
        if not (math.isfinite(self.cache_lambda) and 0.0 <= self.cache_lambda < 1.0):
            raise OptionError("a number in [0, 1)", option="--cache-lambda", got=str(self.cache_lambda))
        if self.model is None:
            # Without a model these settings would do nothing: say so rather than ignore them.
            if self.cache_window > 0:
                raise OptionError("--model for the neural cache", option="--cache-window",
                                  got=str(self.cache_window))
            if self.oov_penalty not in (0, 0.0):
                raise OptionError("--model for an OOV penalty (it applies to the NN LM's <unk>)",
                                  option="--oov-penalty", got=str(self.oov_penalty))

    @property
    def models(self) -> Tuple[str, ...]:
        """The checkpoints to score with (none, one, or several to interpolate)."""
        return as_paths(self.model)

    def load_model(self, train_counts=None, path: Optional[str] = None, lexicon=()):
        """(model on its device, device, OOV penalty in nats) for scoring; path: one of
        ``models`` (default: the only one). The OOV penalty 'auto' is the model's own
        (auto_oov_penalty of train_counts and the recognizer's lexicon)."""
        from rescore.engine import resolve_device
        from rescore.models import load_checkpoint

        if path is None:
            if len(self.models) != 1:
                raise ValueError("load_model of several models needs the path of one")
            path = self.models[0]
        dev = resolve_device(self.device)
        if path.startswith("hf:"):  # a Hugging Face causal LM (rescore.models.hf)
            from rescore.models.hf import load_for_scoring
            return load_for_scoring(path, dev, self), dev, 0.0
        lm = load_checkpoint(path, dev)
        if self.cache_window > 0:
            from rescore.models.cache import with_cache

            lm = with_cache(lm, self.cache_window, self.cache_theta, self.cache_lambda)
            log.info("neural cache: window %d, theta %g, lambda %g", self.cache_window,
                     self.cache_theta, self.cache_lambda)
        penalty = self.oov_penalty
        if penalty == "auto":
            penalty = auto_oov_penalty(lm.vocab, train_counts, lexicon)
            log.info("OOV penalty (auto): %.3f nats per out-of-vocabulary word", penalty)
        return lm, dev, float(penalty)

    @property
    def lockstep(self) -> bool:
        """Several models scored together, carrying from the mixed best (rescore.engine)."""
        return len(self.models) > 1 and self.state_carry == "rescored" and self.mix_carry == "mixed"

    def score_mixed(self, nbest, params: Params, loaded) -> List[Dict[str, List[float]]]:
        """NN costs of every hypothesis by each model (loaded: load_model of each), scored in
        lockstep: every model carries from the best hypothesis by the mixed cost."""
        return score_nbest_set_mixed([lm for lm, _, _ in loaded], nbest, params, device=loaded[0][1],
                                     oov_penalties=[p for _, _, p in loaded], state_carry=self.state_carry,
                                     max_tokens=self.max_tokens, engine=self.engine,
                                     conv_batch=self.conv_batch, schedule=self.schedule,
                                     precision=self.precision, normalize=self.normalize)

    def score(self, nbest, params: Params, train_counts=None, path: Optional[str] = None,
              loaded=None) -> Dict[str, List[float]]:
        """NN costs of every hypothesis of nbest (lmwt.nn lines) by one model (path: one of
        ``models``, default the only one; or ``loaded``, what load_model returned). The carried
        best hypothesis is picked by the fixed cost + params.weight * this model's own cost (the
        engine scores one model at a time)."""
        lm, dev, penalty = loaded if loaded is not None else self.load_model(train_counts, path)
        return score_nbest_set(lm, nbest, params, state_carry=self.state_carry, device=dev,
                               max_tokens=self.max_tokens, engine=self.engine, oov_penalty=penalty,
                               conv_batch=self.conv_batch, schedule=self.schedule,
                               precision=self.precision, normalize=self.normalize)


# --------------------------------------------------------------------------------------------
# rescore-nbest


def nbest_input_files(nbest_dir: PathLike, data_dir: Optional[PathLike], words_txt: Optional[PathLike]) -> List[Path]:
    """The files loading this N-best dir (and data dir) reads; cheap (no file is opened)."""
    from rescore.nbest import ARCHIVES, default_words_txt, find_archive

    files = [p for p in (find_archive(nbest_dir, n) for n in ARCHIVES) if p is not None]
    if data_dir is not None:
        files += [Path(data_dir) / n for n in ("text", "utt2spk", "spk2utt", "segments")]
    w = Path(words_txt) if words_txt is not None else default_words_txt(Path(nbest_dir))
    if w is not None:
        files.append(w)
    return files


@dataclass(frozen=True)
class NbestJob:
    """rescore-nbest: interpolate NBEST_DIR's costs (with NN LM costs: computed by
    ``scoring.model`` or read from ``nn_costs``), pick each utterance's 1-best and write OUT_DIR.
    Checked when built (OptionError for a bad value or combination, before any work)."""

    nbest_dir: str
    out_dir: str
    params: Params = field(default_factory=Params)
    data_dir: Optional[str] = None
    words_txt: Optional[str] = None
    nn_costs: Union[None, str, Tuple[str, ...]] = None  # lmwt.nn file(s) to read (excludes scoring.model)
    scoring: ScoringOptions = field(default_factory=ScoringOptions)
    train_text: Optional[str] = None  # LM training text: rare-word buckets, --oov-penalty auto
    num_buckets: int = 10
    allow_missing: bool = False
    split: Optional[Tuple[int, int]] = None  # (K, N): job K of N
    plot: bool = True
    params_file: Optional[str] = None  # where params came from (an input, for the checks)
    extra_report: Dict[str, object] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.params, Params):
            raise TypeError("params must be a rescore.interp.Params")
        object.__setattr__(self, "nn_costs", one_or_many(as_paths(self.nn_costs)))
        if len(self.nn_cost_files) > MAX_MODELS:
            raise OptionError(f"at most {MAX_MODELS} files", option="--nn-costs", got=f"{len(self.nn_cost_files)}")
        k = len(self.scoring.models) or len(self.nn_cost_files)
        if k > 1 and self.params.num_models == 1:  # no mix (one share, the default): equal shares
            object.__setattr__(self, "params", self.params.replace(mix=equal_mix(k)))
        if self.params.num_models != max(k, 1):
            where = f"; the mix may come from --params {self.params_file}" if self.params_file else ""
            raise OptionError(f"one share per model ({k} given by --model or --nn-costs{where})", option="--mix",
                              got=",".join(f"{m:g}" for m in self.params.mix))
        if isinstance(self.num_buckets, bool) or not isinstance(self.num_buckets, int) or self.num_buckets < 1:
            raise OptionError("an integer >= 1", option="--buckets", got=str(self.num_buckets))
        if self.scoring.model is not None and self.nn_costs is not None:
            raise OptionError("one source of NN LM costs: --model and --nn-costs exclude each other",
                              option="--nn-costs", got=",".join(self.nn_cost_files))
        if self.params.weight != 0.0 and self.scoring.model is None and self.nn_costs is None:
            raise OptionError("NN LM costs (--nn-costs or --model) for an NN LM weight other than 0",
                              option="--weight", got=f"{self.params.weight:g}")
        if self.scoring.oov_penalty == "auto" and self.train_text is None:
            raise OptionError("--train-text (the LM training text) for --oov-penalty auto",
                              option="--oov-penalty", got="auto")
        if self.split is not None:
            k, n = self.split
            if not 1 <= k <= n:
                raise OptionError("K/N with 1 <= K <= N", option="--split", got=f"{k}/{n}")
        self.output_set().check()  # no output is an input, OUT_DIR can be a directory

    # -- what it reads and writes

    def lexicon(self) -> List[str]:
        """The recognizer's words: those of the N-best set's words.txt (--words-txt, or the one
        beside NBEST_DIR), none where there is none."""
        from rescore.nbest import default_words_txt
        from rescore.vocab import Vocabulary

        path = Path(self.words_txt) if self.words_txt is not None else default_words_txt(Path(self.nbest_dir))
        return Vocabulary.from_words_txt(path).words[2:] if path is not None else []

    @property
    def nn_cost_files(self) -> Tuple[str, ...]:
        return as_paths(self.nn_costs)

    @property
    def num_models(self) -> int:
        """How many NN LMs (models or cost files) are interpolated (0: none)."""
        return len(self.scoring.models) or len(self.nn_cost_files)

    def inputs(self) -> List[Path]:
        files = nbest_input_files(self.nbest_dir, self.data_dir, self.words_txt)
        files += [Path(p) for p in (*self.nn_cost_files, self.train_text, *self.scoring.models, self.params_file)
                  if p is not None]
        return files

    def outputs(self) -> List[str]:
        """The files of NBEST_OUTPUTS this job will write (reports only with references):
        lmwt.nn with models (the mixed costs with several, and lmwt.nn.k each model's own) or
        with several cost files (mixed)."""
        names = ["lmwt.interp", "text"]
        if self.scoring.models or len(self.nn_cost_files) > 1:
            names.insert(0, "lmwt.nn")
        if len(self.scoring.models) > 1:
            names[1:1] = [f"lmwt.nn.{k}" for k in range(1, len(self.scoring.models) + 1)]
        if self.data_dir is not None and (Path(self.data_dir) / "text").exists():
            names += ["report.json", "report.txt"]
            if self.train_text is not None and self.plot:
                names.append("buckets.png")
        return names

    def settings(self) -> dict:
        return {"command": "rescore-nbest", "nbest_dir": self.nbest_dir, "data_dir": self.data_dir,
                "params": self.params.as_dict(), "nn_costs": self.nn_costs,
                "model": self.scoring.model, "split": list(self.split) if self.split else None,
                "scoring": {k: v for k, v in vars(self.scoring).items() if k != "model"}
                if self.scoring.model else None,
                "train_text": self.train_text, "num_buckets": self.num_buckets}

    def output_set(self) -> OutputSet:
        return OutputSet(self.out_dir, self.outputs(), self.inputs(), known=NBEST_OUTPUTS,
                         settings=self.settings(), split=self.split)


def rescore_nbest_dir(job: NbestJob) -> Optional[dict]:
    """Run a rescore-nbest job: OUT_DIR/{lmwt.nn (with a model), lmwt.interp, text} and, with
    references, report.json / report.txt (+ buckets.png with train_text). Returns the report,
    or None without references."""
    from rescore.nbest import load_nbest_dir

    with job.output_set() as out:
        select = None
        if job.split is not None:  # read only the job's share
            select = partial(split_share, k=job.split[0], n=job.split[1], block=job.scoring.conv_batch)
        nbest = load_nbest_dir(job.nbest_dir, job.data_dir, job.words_txt, allow_missing=job.allow_missing,
                               select=select)
        return write_rescored(out, job, nbest)


def write_rescored(out: OutputSet, job: NbestJob, nbest) -> Optional[dict]:
    """Score (with a model), interpolate and write a loaded N-best set into an open output set."""
    from rescore import metrics
    from rescore.combine import best_hypotheses, check_nn_costs, graph_costs, mix_costs
    from rescore.io.files import write_json
    from rescore.io.kaldi import read_nn_costs, write_nn_costs, write_table
    from rescore.vocab import count_words, read_sentences

    train_counts = count_words(read_sentences(job.train_text)) if job.train_text else None
    models = job.scoring.models
    params = job.params
    costs: list = []
    sources: list = []
    if models:
        # every checkpoint is loaded (and checked) before any output is written
        lexicon = job.lexicon() if job.scoring.oov_penalty == "auto" else ()
        loaded = [job.scoring.load_model(train_counts, m, lexicon) for m in models]
        if job.scoring.lockstep:
            log.info("%d models in lockstep, each carrying from the best by the mixed cost", len(models))
            costs = job.scoring.score_mixed(nbest, params, loaded)
        for k, model in enumerate(models, 1):
            if not job.scoring.lockstep:
                if len(models) > 1:
                    log.info("model %d of %d: %s", k, len(models), model)
                costs.append(job.scoring.score(nbest, params, loaded=loaded[k - 1]))
                loaded[k - 1] = None  # free it
            name = "lmwt.nn" if len(models) == 1 else f"lmwt.nn.{k}"
            sources.append(str(out.path(name)))
            write_nn_costs(out.path(name), costs[k - 1])
            log.info("wrote %s (%d hypotheses)", sources[-1], len(costs[k - 1]))
    else:
        sources = list(job.nn_cost_files)
        costs = [read_nn_costs(p) for p in sources]
    check_nn_costs(nbest, costs, sources)
    if len(costs) > 1:
        mixed = mix_costs(nbest, costs, params.mix, sources)
        write_nn_costs(out.path("lmwt.nn"), mixed)
        log.info("wrote %s: the mixed costs (shares %s)", out.path("lmwt.nn"),
                 ",".join(f"{m:g}" for m in params.mix))

    best = best_hypotheses(nbest, params, costs or None, sources)
    write_table(out.path("lmwt.interp"), "float", graph_costs(nbest, params, costs or None, sources))
    with out.open("text") as f:  # Kaldi's data/text: 'utt w1 w2 ...', no trailing space
        for u in nbest.utterances():
            f.write(" ".join([u.id, *u.hyps[best[u.id]].words]) + "\n")
    log.info("wrote %s and %s", out.path("lmwt.interp"), out.path("text"))
    if nbest.refs is None:
        log.info("no references (no --data-dir with 'text'): no WER report")
        return None
    extra = dict(job.extra_report)
    if len(costs) > 1:  # name what was interpolated
        extra["models"] = list(models or sources)
    report = metrics.nbest_report(nbest, best, params=params.as_dict(), train_counts=train_counts,
                                  num_buckets=job.num_buckets, extra=extra)
    if train_counts is not None and job.plot:
        metrics.plot_comparison(report["comparison"], out.path("buckets.png"), metrics.nbest_chart_title(nbest))
    write_json(out.path("report.json"), report)
    with out.open("report.txt") as f:
        f.write(metrics.format_report(report) + "\n")
    return report


# --------------------------------------------------------------------------------------------
# rescore-tune


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
    nn_costs: Union[None, str, Tuple[str, ...]] = None  # one lmwt.nn, or one per model
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

    def __post_init__(self):
        self._check_mixes()
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
        for name, values, check in (("--weights", self.weights, check_weight),
                                    ("--inv-acwts", self.inv_acwts, check_inv_acwt),
                                    ("--wips", self.wips, check_wip)):
            if not values:
                raise OptionError("at least one value", option=name, got="none")
            for v in values:
                check(v, name)
        n = len(self.weights if self.nn_costs else [0.0]) * len(self.inv_acwts) * len(self.wips) * len(self.mixes)
        if n > MAX_TUNE_SETTINGS:
            raise OptionError(f"a grid of at most {MAX_TUNE_SETTINGS} settings (coarser steps, or tune "
                              f"one axis at a time)", option="--weights/--inv-acwts/--wips", got=f"{n} settings")
        if self.apply is not None and self.nn_costs is not None and self.apply.nn_costs is None \
                and self.apply.scoring.model is None and any(w != 0 for w in self.weights):
            raise OptionError("--apply-nn-costs (the setting tuned with --nn-costs has an NN LM weight)",
                              option="--apply-to")
        k = len(self.nn_cost_files)
        if self.apply is not None and k > 1 and self.apply.num_models not in (0, k):
            raise OptionError(f"{k} NN LM cost files for --apply-to, one per model as for tuning",
                              option="--apply-nn-costs", got=f"{self.apply.num_models}")
        outputs = [("--params-out", self.params_out), ("--report", self.report), ("--hyp-out", self.hyp_out)]
        inputs = self.inputs()
        from rescore.io.outdir import check_not_input

        for option, p in outputs:
            if p is not None:
                check_not_input(Path(p), inputs, option)
        given = [(o, Path(p).resolve()) for o, p in outputs if p is not None]
        for i, (o, p) in enumerate(given):
            for o2, p2 in given[:i]:
                if p == p2:
                    raise OptionError(f"different files for {o2} and {o}", option=o, got=str(p))

    @property
    def nn_cost_files(self) -> Tuple[str, ...]:
        return as_paths(self.nn_costs)

    def _check_mixes(self) -> None:
        """nn_costs as None/str/tuple; mixes: one share per cost file (default: the grid)."""
        from rescore.combine import mix_grid

        object.__setattr__(self, "nn_costs", one_or_many(as_paths(self.nn_costs)))
        k = len(self.nn_cost_files)
        if k > MAX_MODELS:
            raise OptionError(f"at most {MAX_MODELS} files", option="--nn-costs", got=f"{k}")
        if self.mixes is None:
            object.__setattr__(self, "mixes", mix_grid([round(0.1 * i, 10) for i in range(11)], k or 1))
            return
        if k < 2:
            raise OptionError("two or more --nn-costs files (one per model) to sweep shares", option="--mixes",
                              got=f"{k} files")
        mixes = [check_mix(m, "--mixes") for m in self.mixes]
        if not mixes or any(len(m) != k for m in mixes):
            raise OptionError(f"mixes of {k} shares, one per --nn-costs file", option="--mixes",
                              got=f"{sorted({len(m) for m in mixes})} shares")
        object.__setattr__(self, "mixes", mixes)

    def inputs(self) -> List[Path]:
        files = nbest_input_files(self.nbest_dir, self.data_dir, self.words_txt)
        files += [Path(p) for p in (*self.nn_cost_files, self.dev_utts, self.eval_utts) if p is not None]
        if self.apply is not None:
            files += self.apply.inputs()
        return files


def read_utt_list(path: PathLike) -> List[str]:
    """First field of each line: a plain list, or a data/text, utt2spk, segments file."""
    from rescore.io.kaldi import read_text_table

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
    from rescore.io.files import atomic_output

    with atomic_output(path) as f:
        for u in nbest.utterances():
            f.write(" ".join([u.id, *u.hyps[choice[u.id]].words]) + "\n")
    log.info("wrote %s (%d utterances)", path, nbest.num_utts)


def format_setting(best: Mapping[str, float]) -> str:
    """'weight 0.3  inv_acwt 10  wip 0' (every field of a tuned setting; a mix as 'mix 0.6,0.4')."""
    return "  ".join(f"{k} {','.join(f'{x:g}' for x in v)}" if isinstance(v, (list, tuple)) else f"{k} {v:g}"
                     for k, v in best.items())


def format_cross_validation(result: dict) -> str:
    """The readable result of combine.cross_validate: per fold the setting and the WER on the
    half it was tuned on and on the other, then the pooled figure."""
    lines = []
    for f in result["folds"]:
        convs = f"{f['dev_conversations']} conversation{'s' if f['dev_conversations'] != 1 else ''}"
        lines.append(f"tuned on half {f['tuned_on']} ({f['dev_utts']} utterances, {convs}): "
                     f"{format_setting(f['best'])}  (WER {f['dev_wer']:.2f} % there)")
        lines.append(f"  half {f['reported_on']} ({f['held_out_utts']} utterances) under it: WER "
                     f"{f['held_out_wer']:.2f} %  (rank 1: {f['held_out_first_pass_wer']:.2f} %)")
    lines.append(f"pooled ({result['pooled_utts']} utterances, each under the setting tuned on the other half): "
                 f"WER {result['pooled_wer']:.2f} % [ {result['pooled_errors']} / {result['pooled_ref_words']} ]  "
                 f"(rank 1: {result['pooled_first_pass_wer']:.2f} %)")
    return "\n".join(lines)


def _without_choices(result: dict) -> dict:
    """The result without its per-utterance choices (the report stays a summary; --hyp-out has them)."""
    def strip(d):
        return {k: v for k, v in d.items() if not k.endswith("_choice")}

    out = strip(result)
    if "folds" in out:
        out["folds"] = [strip(f) for f in out["folds"]]
    return out


def tune_nbest_dir(job: TuneJob) -> dict:
    """Run a rescore-tune job. Returns tune()'s result (with ``cross_validate``:
    combine.cross_validate's); with ``apply``, result['applied'] holds the report of the applied
    set (or None without its references)."""
    from rescore.combine import check_nn_costs, cross_validate, split_half, tune
    from rescore.io.files import write_json
    from rescore.io.kaldi import read_nn_costs
    from rescore.nbest import load_nbest_dir

    if job.apply is not None:
        job.apply.output_set().check()
    nbest = load_nbest_dir(job.nbest_dir, job.data_dir, job.words_txt, allow_missing=job.allow_missing)
    if nbest.refs is None:
        raise RescoreError("references for the tuning set ('text' in the data dir)", path=job.data_dir)
    files = list(job.nn_cost_files)
    costs = [read_nn_costs(p) for p in files] or None
    if costs is not None:
        check_nn_costs(nbest, costs, files)  # a lmwt.nn of other hypotheses fails here
        if len(costs) == 1:
            costs, files = costs[0], files[0]
    if job.cross_validate:
        result = cross_validate(nbest, weights=job.weights, inv_acwts=job.inv_acwts, wips=job.wips,
                                nn_costs=costs, nn_source=files or None, mixes=job.mixes)
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
                  nn_source=files or None, held_out=held_out, mixes=job.mixes)
    best = Params(**result["best"])
    if job.params_out:
        best.to_json(job.params_out, tuned_on=job.nbest_dir, dev_wer=result["dev_wer"])
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
