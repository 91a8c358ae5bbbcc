"""The jobs of rescore-ppl: the perplexity of a trained LM on a text, with cross-entropy per
rare-word bucket (:class:`PplJob`, rescore.train.ppl.perplexity_report), and the neural cache's
settings tuned by perplexity on a validation text (:class:`CacheTuneJob`,
rescore.train.ppl.tune_cache_report).

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) before any work for an
output path that is an input. This module imports no torch: the scoring module (rescore.train.ppl,
torch) is imported when a job runs, so that rescore-ppl's ``--help`` and option checks stay instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from rescore.errors import check
from rescore.io.files import write_json
from rescore.io.outputs import check_output_file


def _device(device: str) -> str:
    """``auto``: CUDA when torch sees it, else the CPU; any other spec as given."""
    if device != "auto":
        return device
    import torch  # (lazy: the job's module stays torch-free; torch is loaded when a job runs anyway)

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class PplJob:
    """rescore-ppl CKPT TEXT: perplexity of ``ckpt`` (and of ``compare``) on ``text``, one sentence a
    line; per rare-word bucket with ``train_text``. Checked when built."""

    ckpt: str
    text: str
    train_text: Optional[str] = None  # the LM's training text: word frequencies of the buckets
    compare: Optional[str] = None  # a second checkpoint: per-bucket difference ckpt - compare
    report: Optional[str] = None  # JSON report
    plot: Optional[str] = None  # PNG bar chart
    name: Optional[str] = None  # of ckpt in the table and chart; None: from its config
    compare_name: Optional[str] = None
    title: Optional[str] = None  # of the chart; None: the text and the model names
    n_buckets: int = 10
    batch_size: int = 10  # parallel streams the text is cut into
    bptt: int = 100  # tokens per forward call
    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N
    cache_window: int = 0  # neural cache (Grave et al. 2017) on ckpt: pairs kept; 0: none
    cache_theta: float = 0.3
    cache_lambda: float = 0.1

    def __post_init__(self):
        inputs = (self.ckpt, self.text, self.train_text, self.compare)
        check_output_file(self.report, "--report", inputs)
        check_output_file(self.plot, "--plot", inputs + (self.report,))

    def run(self) -> str:
        """Score; write --report and --plot; returns the readable report (rescore.train.ppl.format_report)."""
        from rescore.train import ppl  # (lazy: torch, when the job runs)

        rep = ppl.perplexity_report(self.ckpt, self.text, train_text=self.train_text, compare=self.compare,
                                    batch_size=self.batch_size, bptt=self.bptt, n_buckets=self.n_buckets,
                                    device=_device(self.device), cache_window=self.cache_window,
                                    cache_theta=self.cache_theta, cache_lambda=self.cache_lambda, name=self.name,
                                    compare_name=self.compare_name)
        if self.report:
            write_json(self.report, rep)
        if self.plot:
            ppl.plot_report(rep, self.plot, self.title)
        return ppl.format_report(rep)


@dataclass(frozen=True)
class CacheTuneJob:
    """rescore-ppl --tune-cache: one pass of ``ckpt`` over ``text`` (a validation text, never the
    test text), then the perplexity of every (window, theta, lambda) of the grids from the kept
    outputs (rescore.models.cache.tune_cache; each equal to scoring with --cache-*). Checked when
    built."""

    ckpt: str
    text: str
    windows: Sequence[int]
    thetas: Sequence[float]
    lambdas: Sequence[float]
    report: Optional[str] = None  # the grid and the best point as JSON
    batch_size: int = 10
    bptt: int = 100
    device: str = "auto"

    def __post_init__(self):
        for option, values in (("--cache-windows", self.windows), ("--cache-thetas", self.thetas),
                               ("--cache-lambdas", self.lambdas)):
            check(len(values) > 0, "at least one value", option, "none")
        check_output_file(self.report, "--report", (self.ckpt, self.text))

    def run(self) -> str:
        """Sweep; write --report; returns one line per grid point, then the best."""
        from rescore.train import ppl  # (lazy: torch, when the job runs)

        rep = ppl.tune_cache_report(self.ckpt, self.text, batch_size=self.batch_size, bptt=self.bptt,
                                    device=_device(self.device), windows=self.windows, thetas=self.thetas,
                                    lambdas=self.lambdas)
        if self.report:
            write_json(self.report, rep)
        return ppl.format_cache_grid(rep)
