#!/usr/bin/env python3
"""Benchmark of the paired bootstrap of rescore-wer / the rescore-nbest report.

On the shared dev set (../shared/data/tts-wikitext2-dev: 627 utterances, 60 recordings),
PocketSphinx's 1-best against rank 2 of the N-best (a worse system): seconds for --draws
bootstrap draws of the overall WER difference, ours (rescore.metrics: one bincount and one
matrix product per statistic) against a baseline measured in the same run on the same draws:
a Python loop summing the drawn units' errors per draw, as Kaldi's compute-wer-bootci does
(in C++). Both give the same interval (checked). Median of --repeats runs.

Usage: PYTHONPATH=. python -m tools.bench.bench_bootstrap [--draws 1000] [--repeats 3] [--units utterance|group]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from tools.common import SHARED_DATA  # noqa: E402

from rescore.io.kaldi import read_text_table  # noqa: E402
from rescore.metrics import _bootstrap, _resample_counts, align, read_groups  # noqa: E402

DATA = SHARED_DATA / "tts-wikitext2-dev"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--units", choices=("utterance", "group"), default="utterance")
    a = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"needs {DATA}")
    refs = read_text_table(DATA / "data" / "text", "tokens").as_dict()
    ps = read_text_table(DATA / "extra" / "ps_1best.txt", "tokens").as_dict()
    table = read_text_table(DATA / "nbest" / "words_text", "tokens").as_dict()
    rank2 = {k.rsplit("-", 1)[0]: w for k, w in table.items()
             if k.endswith("-2")}
    rank2 = {u: rank2.get(u, ps[u]) for u in refs}  # an utterance with one hypothesis keeps it
    utts = list(refs)
    groups = read_groups(DATA / "data" / "segments") if a.units == "group" else {u: u for u in utts}
    index: dict = {}
    unit = np.array([index.setdefault(groups[u], len(index)) for u in utts])
    G = len(index)
    errs = []
    for hyps in (ps, rank2):
        _, al = align(refs, hyps)
        e = np.array([al[u].substitutions + al[u].deletions + len(al[u].inserted) for u in utts], dtype=float)
        errs.append(np.bincount(unit, weights=e, minlength=G))
    errors = np.stack(errs)  # (2, G)
    ref_words = np.bincount(unit, weights=[len(refs[u]) for u in utts], minlength=G)

    def ours():
        counts = _resample_counts(G, a.draws, 0)
        _, d = _bootstrap(counts, errors, ref_words, 0.95)
        return d[0]["ci"]

    def baseline():
        idx = np.random.default_rng(0).integers(0, G, size=(a.draws, G)).tolist()
        e0, e1, r = errors[0].tolist(), errors[1].tolist(), ref_words.tolist()
        diffs = []
        for draw in idx:
            n = sum(r[i] for i in draw)
            diffs.append(100.0 * (sum(e1[i] for i in draw) - sum(e0[i] for i in draw)) / n)
        return [float(x) for x in np.percentile(diffs, [2.5, 97.5])]

    times = {}
    for name, f in (("ours", ours), ("baseline", baseline)):
        ts, out = [], None
        for _ in range(a.repeats):
            t = time.perf_counter()
            out = f()
            ts.append(time.perf_counter() - t)
        times[name] = (statistics.median(ts), out)
    assert np.allclose(times["ours"][1], times["baseline"][1]), times
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.1f}; "
          f"{len(utts)} utterances, {G} units ({a.units}), {a.draws} draws")
    for name, (t, ci) in times.items():
        print(f"{name:>8}: {t * 1000:8.1f} ms  CI of the difference [{ci[0]:+.2f}, {ci[1]:+.2f}]")
    print(f"ratio baseline / ours: {times['baseline'][0] / times['ours'][0]:.1f}x")


if __name__ == "__main__":
    main()
