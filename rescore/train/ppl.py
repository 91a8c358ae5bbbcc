"""Perplexity and per-rare-word-bucket cross-entropy of a trained LM on a text.

Boundary convention (the one of training and of rescore.models.base): the text is read as one
stream ``<eos> s1 <eos> s2 ... sN <eos>``; every word and every sentence end is predicted once
(a sentence of n words contributes n + 1 targets), the first ``<eos>`` is context only. An
out-of-vocabulary word scores as ``<unk>`` (plus, for pointer heads, the copy mass of the
history slots holding the same word), so perplexities compare only between equal vocabularies.
The text is cut into ``batch_size`` contiguous streams scored side by side (each starts from an
empty state); within a stream the state is carried across BPTT chunks.

Per-bucket cross-entropy (the rare-word buckets of docs/evaluation.md; Li et al. 2020 Figure 2):
word targets (not ``<eos>``) are grouped into rare-word buckets by training-text frequency,
0 = rarest.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from rescore.progress import progress as progress_bar

from rescore.train.data import Streams, encode_corpus, make_streams
from rescore.errors import OptionError, RescoreError
from rescore.settings import RNN_BODIES
from rescore.vocab import EOS, read_sentences
from rescore.models import load_checkpoint
from rescore.models.cache import with_cache
from rescore.nbest.checks import check_model_text, text_vocabulary_warning
from rescore.metrics import rare_word_buckets
from rescore.metrics import bucket_cross_entropy
from rescore.metrics import bucket_ce_difference
from rescore.metrics import bucket_ticks, plot_bucket_series
from rescore.models.cache import tune_cache
from rescore.train.data import load_streams

log = logging.getLogger(__name__)

PathLike = Union[str, Path]

CONVENTION = ("each sentence is '<eos> w1 .. wn' -> 'w1 .. wn <eos>' on the concatenated text: "
              "n+1 targets per sentence (words and sentence end); OOV words score as <unk>")


@torch.no_grad()
def token_costs(model, streams: Streams, bptt: int, device, progress: bool = False) -> Tensor:
    """Cost (-ln P) of every target: (B, n) float64, 0 where ``streams.mask`` is False."""
    was_training = model.training
    model.eval()
    state = model.initial_state(streams.ids.shape[0], device)
    costs = []
    for x, xi, y, yi, m in progress_bar(streams.chunks(bptt), total=streams.n_chunks(bptt),
                                        desc="scoring", unit="chunk", enabled=progress, leave=False):
        lp, state = model.score(x.to(device), xi.to(device), y.to(device), yi.to(device), state)
        costs.append(torch.where(m.to(device), -lp.double(), torch.zeros((), dtype=torch.float64,
                                                                          device=device)))
    model.train(was_training)
    return torch.cat(costs, dim=1).cpu()


def stream_loss(model, streams: Streams, bptt: int, device) -> Tuple[float, int]:
    """(sum of target costs, number of targets) over the masked streams."""
    c = token_costs(model, streams, bptt, device)
    return float(c.sum()), streams.n_targets


def score_text(model, sentences: List[List[str]], batch_size: int, bptt: int, device,
               progress: bool = True) -> List[float]:
    """Cost of each target of the text in order (see the module docstring), as a list of floats."""
    ids, ident = encode_corpus(sentences, model.vocab)
    streams = make_streams(ids, ident, batch_size, pad=True)
    costs = token_costs(model, streams, bptt, device, progress)
    return costs[streams.mask].tolist()  # row-major = text order


def target_words(sentences: List[List[str]]) -> List[str]:
    """The targets of the text in scoring order: each sentence's words, then ``<eos>``."""
    out = []
    for s in sentences:
        out.extend(s)
        out.append(EOS)
    return out


def model_name(model) -> str:
    """A short name of a model from its config, e.g. "LSTM 2x650, pointer + memory"."""
    c = model.config
    name = f"{c.arch.upper() if c.arch in RNN_BODIES else c.arch.capitalize()} {c.layers}x{c.hidden}, {c.head}"
    if c.memory_aug:
        name += " + memory"
    if c.output == "class":
        name += f", {c.classes} classes"
    return name


def perplexity_report(checkpoint: PathLike, text: PathLike, *, train_text: Optional[PathLike] = None,
                      compare: Optional[PathLike] = None, batch_size: int = 10, bptt: int = 100,
                      n_buckets: int = 10, device: str = "cpu", cache_window: int = 0,
                      cache_theta: float = 0.3, cache_lambda: float = 0.1, name: Optional[str] = None,
                      compare_name: Optional[str] = None) -> Dict[str, Any]:
    """Perplexity of ``checkpoint`` (and ``compare``) on ``text``; per-bucket cross-entropy when
    ``train_text`` gives the word frequencies. ``cache_window`` > 0 adds a neural cache
    (rescore.models.cache, Grave et al. 2017) to ``checkpoint`` (not to ``compare``).
    ``name``/``compare_name`` name the models in the table and chart (default: model_name).
    Returns the JSON-ready report:

    {"text", "convention", "targets", "ppl", "cross_entropy", "checkpoint", "name",
     "buckets": [{"bucket", "tokens", "ce"}...] or None,
     "compare": {"checkpoint", "ppl", "cross_entropy", "buckets", "difference": [{"bucket",
                 "tokens", "ce_diff"}...] (ce(checkpoint) - ce(compare); < 0: checkpoint better)}}
    """
    check_options(batch_size=batch_size, bptt=bptt, n_buckets=n_buckets, device=device,
                  cache_window=cache_window, cache_theta=cache_theta, cache_lambda=cache_lambda)
    sentences = read_sentences(text)
    if not sentences:
        raise RescoreError("a text with at least one sentence (one a line)", path=text,
                           got="no words")
    targets = target_words(sentences)
    buckets = None
    train_sentences = read_sentences(train_text) if train_text is not None else None
    # the text against the LM's training text and the models' fingerprints of theirs, as references are
    check_model_text(sentences, text, [m for m in (checkpoint, compare) if m is not None], train_sentences,
                     train_text)
    if train_sentences is not None:
        counts: Counter = Counter()
        for s in train_sentences:
            counts.update(s)
        buckets = rare_word_buckets(counts, [w for w in targets if w != EOS], n=n_buckets)
    del train_sentences

    def one(path: PathLike, cache_window: int = 0, name: Optional[str] = None) -> Dict[str, Any]:
        model = with_cache(load_checkpoint(path, device), cache_window, cache_theta, cache_lambda)
        warning = text_vocabulary_warning(str(path), model.vocab.words, (w for s in sentences for w in s), text)
        if warning:
            log.warning("%s", warning)
        name = name or model_name(model) + (" + neural cache" if cache_window > 0 else "")
        costs = score_text(model, sentences, batch_size, bptt, device)
        assert len(costs) == len(targets)
        ce = sum(costs) / len(costs)
        res: Dict[str, Any] = {"checkpoint": str(path), "name": name, "ppl": math.exp(ce),
                               "cross_entropy": ce, "buckets": None}
        if buckets is not None:
            words = [(w, c) for w, c in zip(targets, costs) if w != EOS]
            res["buckets"] = bucket_cross_entropy([w for w, _ in words], [c for _, c in words], buckets)
            for row, rng in zip(res["buckets"], buckets.ranges):
                row["train_count_range"] = list(rng) if rng else None
        return res

    main = one(checkpoint, cache_window, name)
    report = {"text": str(text), "convention": CONVENTION, "targets": len(targets),
              "batch_size": batch_size, **main, "compare": None,
              "cache": {"window": cache_window, "theta": cache_theta, "lambda": cache_lambda}
              if cache_window > 0 else None}
    if compare is not None:
        other = one(compare, name=compare_name)
        if other["name"] == main["name"]:  # same architecture: tell them apart by their files
            main["name"] += f" ({Path(checkpoint).parent.name or checkpoint})"
            other["name"] += f" ({Path(compare).parent.name or compare})"
        if buckets is not None:
            other["difference"] = bucket_ce_difference(main["buckets"], other["buckets"])
        report["compare"] = other
    return report


def check_options(*, batch_size: int, bptt: int, n_buckets: int, device: str,
                  cache_window: int = 0, cache_theta: float = 0.3,
                  cache_lambda: float = 0.1) -> None:
    """A RescoreError naming the option for a value out of range (before any work)."""
    def need(option, value, ok, expected):
        if not ok:
            raise OptionError(expected, option=option, got=str(value))

    def pos_int(x):
        return isinstance(x, int) and not isinstance(x, bool) and x >= 1

    need("--batch-size", batch_size, pos_int(batch_size), "an integer >= 1")
    need("--bptt", bptt, pos_int(bptt), "an integer >= 1")
    need("--buckets", n_buckets, pos_int(n_buckets), "an integer >= 1")
    need("--cache-window", cache_window, isinstance(cache_window, int) and cache_window >= 0,
         "an integer >= 0 (0: no cache)")
    need("--cache-theta", cache_theta, math.isfinite(cache_theta) and cache_theta > 0,
         "a finite flatness > 0")
    need("--cache-lambda", cache_lambda, math.isfinite(cache_lambda) and 0 <= cache_lambda < 1,
         "a weight in [0, 1)")
    need("--device", device, device in ("cpu", "cuda") or (device.startswith("cuda:")
                                                          and device[5:].isdigit()),
         "cpu, cuda or cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError("a CUDA device (torch sees none here; use --device cpu or auto)",
                          option="--device", got=device)


def format_report(report: Dict[str, Any]) -> str:
    """A readable summary: perplexities and the per-bucket table."""
    cache = report.get("cache")
    lines = [f"# {report['text']}: {report['targets']} targets ({report['convention']})",
             f"ppl {report['ppl']:.2f}  ce {report['cross_entropy']:.4f}  {report.get('name')}: {report['checkpoint']}"
             + (f" + neural cache (window {cache['window']}, theta {cache['theta']}, "
                f"lambda {cache['lambda']})" if cache else "")]
    cmp_ = report.get("compare")
    if cmp_:
        lines.append(f"ppl {cmp_['ppl']:.2f}  ce {cmp_['cross_entropy']:.4f}  {cmp_.get('name')}: {cmp_['checkpoint']}"
                     " (--compare)")
    if report.get("buckets"):
        head = f"{'bucket':>6} {'train count':>13} {'tokens':>7} {'ce':>7}"
        if cmp_:
            head += f" {'ce cmp':>7} {'diff':>7}"
        lines.append(head)
        for i, row in enumerate(report["buckets"]):
            rng = row.get("train_count_range")
            line = (f"{row['bucket']:>6} {(f'{rng[0]}-{rng[1]}' if rng else '-'):>13} "
                    f"{row['tokens']:>7} {row['ce']:>7.3f}")
            if cmp_:
                line += f" {cmp_['buckets'][i]['ce']:>7.3f} {cmp_['difference'][i]['ce_diff']:>+7.3f}"
            lines.append(line)
    return "\n".join(lines)


def plot_report(report: Dict[str, Any], path: PathLike, title: Optional[str] = None) -> None:
    """Chart of the per-bucket cross-entropy: grouped bars of each model (legend: the model
    names), and with --compare their difference per bucket below. The title names the text."""
    if not report.get("buckets"):
        raise RescoreError("--train-text for a per-bucket plot")
    cmp_ = report.get("compare")
    names = [report.get("name") or str(report["checkpoint"])]
    series = {names[0]: [r["ce"] for r in report["buckets"]]}
    diffs = None
    if cmp_:
        names.append(cmp_.get("name") or str(cmp_["checkpoint"]))
        series[names[1]] = [r["ce"] for r in cmp_["buckets"]]
        diffs = {f"{names[0]} - {names[1]}": ([d["ce_diff"] for d in cmp_["difference"]], None)}
    plot_bucket_series(path, bucket_ticks([r.get("train_count_range") for r in report["buckets"]]), series,
                       title=title or f"cross-entropy per rare-word bucket on {report['text']} "
                       f"({report['targets']} targets): " + " vs ".join(names),
                       ylabel="cross-entropy (nats per word)", diffs=diffs,
                       diff_ylabel="cross-entropy difference (nats)",
                       diff_title=f"{names[0]} - {names[1]} (< 0: {names[0]} better)" if cmp_ else "",
                       diff_color="grey")


def tune_cache_report(checkpoint: PathLike, text: PathLike, *, windows, thetas, lambdas, batch_size: int = 10,
                      bptt: int = 100, device: str = "cpu") -> Dict[str, Any]:
    """The neural cache's (window, theta, lambda) by perplexity on ``text`` (a validation text):
    one pass of the model, then every grid point from its kept outputs
    (rescore.models.cache.tune_cache; each equal to rescore-ppl --cache-*). Returns
    {"checkpoint", "text", "grid": [{"window", "theta", "lambda", "cross_entropy", "ppl"}...],
    "best": the grid point of least cross-entropy}."""
    model = load_checkpoint(checkpoint, device)
    streams = load_streams(text, model.vocab, batch_size, pad=True)
    grid = tune_cache(model, streams, bptt, windows, thetas, lambdas, device)
    best = min(grid, key=lambda p: p["cross_entropy"])
    return {"checkpoint": str(checkpoint), "text": str(text), "grid": grid, "best": best}


def format_cache_grid(report: Dict[str, Any]) -> str:
    """One line per grid point of tune_cache_report, then the best."""
    lines = [f"window {p['window']:5d} theta {p['theta']:.3f} lambda {p['lambda']:.3f} ppl {p['ppl']:.2f}"
             for p in report["grid"]]
    b = report["best"]
    lines.append(f"best: window {b['window']} theta {b['theta']:g} lambda {b['lambda']:g} ppl {b['ppl']:.2f}")
    return "\n".join(lines)
