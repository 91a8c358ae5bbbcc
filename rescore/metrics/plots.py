"""The bucket charts (PNG, matplotlib's Agg backend): one value per rare-word bucket for one or
more series, and a comparison's per-bucket WER with the differences and their bootstrap CIs."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.metrics.buckets import _range_label
from rescore.metrics.compare import FIRST_PASS, RESCORED, NbestWords
from rescore.metrics.record import plain

PathLike = Union[str, Path]


def plot_buckets(rows: List[dict], path: PathLike, *, value: str = "wer", labels: Optional[List[str]] = None,
                 others: Optional[List[List[dict]]] = None, title: str = "", ylabel: Optional[str] = None) -> None:
    """Bar chart of one value per bucket (rarest left) to a PNG; others adds side-by-side series
    (e.g. several models), named by labels (one per series, rows first)."""
    series = [rows] + list(others or [])
    names = labels or [f"series {i}" for i in range(len(series))]
    plot_bucket_series(path, bucket_ticks([r.get("train_count_range") for r in rows]),
                       {n: [r[value] for r in s] for n, s in zip(names, series)}, title=title,
                       ylabel=ylabel or {"wer": "WER on bucket's reference tokens (%)", "ce": "cross-entropy (nats)",
                                         "ce_diff": "cross-entropy difference (nats)"}.get(value, value))


def nbest_chart_title(nbest: NbestWords) -> str:
    """'WER per rare-word bucket on exp/mini/nbest/test (96 utterances): first-pass vs rescored'."""
    return (f"WER per rare-word bucket on {nbest.path} ({len(nbest.hyps)} utterances): "
            f"{FIRST_PASS} vs {RESCORED}")


def _pyplot():
    import matplotlib  # (lazy: keeps matplotlib out of the commands' start-up; only a chart needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (lazy, and only after the Agg backend is chosen)

    return plt


def _save(fig, path: PathLike) -> None:
    from rescore.io.kaldi import atomic_output  # (lazy: keeps rescore.io out of the commands' start-up)

    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)


def bucket_ticks(ranges: Sequence[Optional[Sequence[int]]], total: Optional[str] = None) -> List[str]:
    """x tick labels of a bucket chart: the bucket and its training-count range on two lines,
    then ``total`` (e.g. "all") when given."""
    ticks = [f"{b}\n{_range_label(r, short=True)}" for b, r in enumerate(ranges)]
    return ticks + ([f"{total}\n"] if total else [])


# name -> (values, [lo, hi] per bar or None, or None for no whiskers)
DiffSeries = Mapping[str, Tuple[Sequence[float], Optional[Sequence[Optional[Sequence[float]]]]]]


def plot_bucket_series(path: PathLike, ticks: Sequence[str], series: Mapping[str, Sequence[float]], *,
                       title: str, ylabel: str, diffs: Optional[DiffSeries] = None,
                       diff_ylabel: str = "difference", diff_title: str = "", separate_last: bool = False,
                       diff_color: Optional[str] = None) -> None:
    """The one bucket chart (PNG): above, grouped bars of each series (legend: the series'
    names); below, when diffs is given, each difference series as bars with optional interval
    whiskers (name -> (values, [lo, hi] per bar or None)), a line at 0. separate_last draws a
    dotted line before the last group (an "all" group beside the buckets). The difference bars
    take the colour of the series they belong to (the last ones), or diff_color."""
    plt = _pyplot()
    xs = list(range(len(ticks)))
    panels = 2 if diffs else 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 7.5 if diffs else 4.5), sharex=True, squeeze=False)
    ax = axes[0][0]
    width = 0.8 / max(1, len(series))
    top = 0.0
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], list(vals), width, label=name)
        top = max([top, *vals])
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)  # room for the legend above the bars
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper center", ncol=len(series), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(textwrap.fill(title, 95))
    if diffs:
        ax2 = axes[1][0]
        width = 0.8 / len(diffs)
        for i, (name, (vals, cis)) in enumerate(diffs.items()):
            vals = [v or 0.0 for v in vals]
            yerr = None
            if cis is not None:
                yerr = [[v - c[0] if c else 0.0 for v, c in zip(vals, cis)],
                        [c[1] - v if c else 0.0 for v, c in zip(vals, cis)]]
            ax2.bar([x + (i - (len(diffs) - 1) / 2) * width for x in xs], vals, width, yerr=yerr, capsize=3,
                    color=diff_color or f"C{len(series) - len(diffs) + i}", label=name)
        ax2.axhline(0, color="black", linewidth=0.8)
        ax2.set_ylabel(diff_ylabel)
        if len(diffs) > 1 or not diff_title:
            ax2.legend(loc="best", fontsize=9)
        ax2.grid(axis="y", alpha=0.3)
        if diff_title:
            ax2.set_title(diff_title, fontsize=10)
    for row in axes:
        if separate_last:
            row[0].axvline(len(xs) - 1.5, color="grey", linewidth=0.8, linestyle=":")
    bottom = axes[-1][0]
    bottom.set_xticks(xs)
    bottom.set_xticklabels(list(ticks), fontsize=8)
    bottom.set_xlabel("rare-word bucket (0 = rarest) and the training counts of its words")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_comparison(cmp: dict, path: PathLike, title: str) -> None:
    """PNG of a compare_systems result with buckets: above, each system's WER per bucket and
    overall ("all") as grouped bars; below, each further system's difference from the baseline
    with its bootstrap CI as whiskers (< 0: fewer errors than the baseline)."""
    cmp = plain(cmp)
    if not cmp.get("buckets"):
        raise RescoreError("a per-bucket comparison (the LM training text) for the chart")
    names = [s["name"] for s in cmp["systems"]]
    base = cmp["baseline"]
    rows = cmp["buckets"]
    series = {n: [r["systems"][n]["wer"] for r in rows] + [s["wer"] or 0.0]
              for n, s in zip(names, cmp["systems"])}
    diffs = None
    if len(names) > 1:
        total = {d["system"]: d for d in cmp["differences"]}
        diffs = {f"{n} - {base}": ([r["differences"][n]["wer_diff"] for r in rows] + [total[n]["wer_diff"]],
                                   [r["differences"][n]["ci"] for r in rows] + [total[n]["ci"]])
                 for n in names[1:]}
    boot = cmp["bootstrap"]
    conf = f"whiskers: {100 * boot['confidence']:g}% bootstrap CI" if boot else "no bootstrap CI"
    plot_bucket_series(path, bucket_ticks([r["train_count_range"] for r in rows], "all"), series, title=title,
                       ylabel="WER (%)\n(sub + del + ins) / ref tokens", diffs=diffs,
                       diff_ylabel=f"WER difference (points)\n{conf}",
                       diff_title=f"difference from {base} (< 0: fewer errors than {base})", separate_last=True)
