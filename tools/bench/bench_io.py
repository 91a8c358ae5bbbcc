#!/usr/bin/env python3
"""Benchmark of N-best I/O, interpolation and scoring.

1. The shared dev set (../shared/data/tts-wikitext2-dev, 62,631 hypotheses): seconds to read
   and check the N-best dir (load_nbest_dir), to combine (1-best by the interpolated cost + the new
   graph costs), and to score (jiwer WER + rapidfuzz oracle); median of --repeats runs.
2. A synthetic N-best dir of --hyps hypotheses (default 1M: 10,000 utterances x 100), written
   by this script into a temporary directory as Kaldi text archives (words, words_text, acwt,
   lmwt.withlm, lmwt.nolm, words.txt), then again gzipped: hypotheses/second of load_nbest_dir.

Baseline, measured in the same run on the same files: the `paste | awk` way Kaldi's scripts join
archives -- read every archive line by line, split, float() the costs, no checks at all. The
ratio ours/baseline is what strictness (key, order, contiguity, words.txt checks) costs.

3. With --split-jobs N: the read of one `rescore-nbest --split K/N` job (load_nbest_dir with
   select=split_share, which parses only the job's conversations) against the whole read, on
   the dev set (segments: 60 conversations) and on the synthetic text archives (one
   conversation per utterance): seconds per job (median over the N jobs), of all N jobs
   together, and of the whole read (median of --repeats), measured in the same run.
   --split-only leaves out 1. and 2.

4. With --phases MODEL: where the CPU time of whole `rescore-nbest` runs on the dev set goes
   (MODEL scores it: `--device cpu --normalize none --state-carry first-pass --oov-penalty 0
   --precision fp32`, OMP_NUM_THREADS=1; with --phases-train-text also `--train-text` and the
   default OOV penalty, auto): each of --repeats runs is a process of its own, which times its
   phases with time.process_time (each phase's own calls, inclusive): reading the N-best dir,
   the input checks, encoding the words, the engine's scoring (the rest of score_nbest),
   writing lmwt.nn and lmwt.interp, the report and its chart; the process's own CPU seconds
   (user + sys) and the rest ("other": the imports, torch's among them, loading the model,
   the interpolation, the text and JSON outputs). Medians; leaves out 1. to 3.

Usage: PYTHONPATH=. python -m tools.bench.bench_io [--hyps 1000000] [--repeats 3] [--json OUT]
                                           [--split-jobs 8 [--split-only]]
       PYTHONPATH=. python -m tools.bench.bench_io --phases exp/sn-lstm/model.pt [--phases-train-text] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tools.common import REPO, SHARED_DATA  # noqa: E402

from rescore.nbest.combine import Params, best_hypotheses, graph_cost  # noqa: E402
from rescore.io.files import write_json  # noqa: E402
from rescore.metrics import align, oracle_wer  # noqa: E402
from rescore.formats.kaldi import find_archive  # noqa: E402
from rescore.nbest.sets import load_nbest_dir  # noqa: E402

ARCHIVES = ("words", "words_text", "acwt", "lmwt.withlm", "lmwt.nolm")


def naive_read(nbest_dir: Path) -> int:
    """The baseline: what `paste | awk` does -- split lines, float() the costs, check nothing."""
    cols = {}
    for name in ARCHIVES:
        p = find_archive(nbest_dir, name)
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            if name in ("acwt", "lmwt.withlm", "lmwt.nolm"):
                cols[name] = [float(line.split()[1]) for line in f]
            elif name == "words":
                cols[name] = [[int(x) for x in line.split()[1:]] for line in f]
            else:
                cols[name] = [line.split()[1:] for line in f]
    return len(cols["acwt"])


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_dev(repeats: int) -> dict:
    d = SHARED_DATA / "tts-wikitext2-dev"
    if not d.is_dir():
        print(f"skipping the dev set: {d} is absent", file=sys.stderr)
        return {}
    t_read, s = timed(lambda: load_nbest_dir(d / "nbest", d / "data"), repeats)
    t_naive, _ = timed(lambda: naive_read(d / "nbest"), repeats)
    p = Params(0.0, 9.5, 0.0)

    def combine():
        best = best_hypotheses(s, p)
        interp = {h.key: graph_cost(h, p.weight, 0.0) for u in s.utterances() for h in u.hyps}
        return best, interp

    t_comb, (best, _) = timed(combine, repeats)
    one_best = {u.id: u.hyps[best[u.id]].words for u in s.utterances()}

    def score():
        stats, _ = align(s.refs, one_best)
        return stats.wer, oracle_wer(s.refs, {u.id: [h.words for h in u.hyps] for u in s.utterances()})

    t_score, (wer, oracle) = timed(score, repeats)
    return {"hyps": s.num_hyps, "read_s": t_read, "naive_read_s": t_naive, "read_ratio": t_read / t_naive,
            "combine_s": t_comb, "score_s": t_score, "total_s": t_read + t_comb + t_score,
            "wer": wer, "oracle_wer": oracle}


def make_synthetic(root: Path, n_hyps: int, per_utt: int = 100, vocab: int = 20000, seed: int = 0) -> Path:
    """Write a Kaldi-layout N-best dir of n_hyps hypotheses (text archives, trailing spaces)."""
    rng = np.random.default_rng(seed)
    d = root / "nbest"
    d.mkdir(parents=True)
    words = [f"w{i}" for i in range(1, vocab + 1)]
    (d / "words.txt").write_text("<eps> 0\n" + "".join(f"{w} {i}\n" for i, w in enumerate(words, 1)))
    n_utts = (n_hyps + per_utt - 1) // per_utt
    lens = rng.integers(5, 26, size=n_hyps)  # 5-25 words, mean 15
    ids = rng.integers(1, vocab + 1, size=int(lens.sum()))
    costs = rng.uniform(0, 1000, size=(3, n_hyps))
    files = {n: open(d / n, "w") for n in ARCHIVES}
    pos = 0
    for i in range(n_hyps):
        key = f"utt{i // per_utt:07d}-{i % per_utt + 1}"
        h = ids[pos:pos + lens[i]]
        pos += lens[i]
        files["words"].write(key + " " + " ".join(map(str, h.tolist())) + " \n")
        files["words_text"].write(key + " " + " ".join(words[j - 1] for j in h.tolist()) + "\n")
        files["acwt"].write(f"{key} {costs[0, i]:.4f} \n")
        files["lmwt.withlm"].write(f"{key} {costs[1, i]:.4f} \n")
        files["lmwt.nolm"].write(f"{key} {costs[2, i] / 10:.4f} \n")
    for f in files.values():
        f.close()
    assert n_utts > 0
    return d


def gzip_dir(d: Path) -> Path:
    g = d.parent / "nbest-gz"
    g.mkdir()
    shutil.copy(d / "words.txt", g / "words.txt")
    for n in ARCHIVES:
        with open(d / n, "rb") as src, gzip.open(g / f"{n}.gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
    return g


def bench_synthetic(n_hyps: int, repeats: int) -> dict:
    out = {"hyps": n_hyps}
    with tempfile.TemporaryDirectory(prefix="bench_io.") as tmp:
        t = time.perf_counter()
        d = make_synthetic(Path(tmp), n_hyps)
        out["generate_s"] = time.perf_counter() - t
        out["text_bytes"] = sum((d / n).stat().st_size for n in ARCHIVES)
        g = gzip_dir(d)
        for label, path in (("text", d), ("gz", g)):
            t_ours, s = timed(lambda: load_nbest_dir(path), repeats)
            assert s.num_hyps == n_hyps
            del s
            t_naive, n = timed(lambda: naive_read(path), repeats)
            assert n == n_hyps
            out[label] = {"read_s": t_ours, "hyps_per_s": n_hyps / t_ours, "naive_read_s": t_naive,
                          "naive_hyps_per_s": n_hyps / t_naive, "ratio": t_ours / t_naive}
    return out


def bench_split(nbest_dir: Path, data_dir, n_jobs: int, repeats: int) -> dict:
    """Seconds of the whole read and of each job's read of nbest_dir split into n_jobs."""
    from rescore.jobs.nbest import split_share

    t_whole, s = timed(lambda: load_nbest_dir(nbest_dir, data_dir), repeats)
    n_hyps, n_convs = s.num_hyps, len(s.conversations)
    del s
    jobs, got = [], 0
    for k in range(1, n_jobs + 1):
        t = time.perf_counter()
        part = load_nbest_dir(nbest_dir, data_dir, select=lambda ids: split_share(ids, k, n_jobs, block=1))
        jobs.append(time.perf_counter() - t)
        got += part.num_hyps
    assert got == n_hyps  # the shares cover the set
    return {"hyps": n_hyps, "conversations": n_convs, "jobs": n_jobs, "whole_s": t_whole,
            "job_s": statistics.median(jobs), "job_max_s": max(jobs), "all_jobs_s": sum(jobs),
            "whole_over_job": t_whole / statistics.median(jobs), "all_jobs_over_whole": sum(jobs) / t_whole}


def print_split(label: str, r: dict) -> None:
    print(f"{label} ({r['hyps']} hyps, {r['conversations']} conversations), --split K/{r['jobs']}: "
          f"one job {r['job_s']:.2f} s (median; max {r['job_max_s']:.2f} s), whole read {r['whole_s']:.2f} s "
          f"(x{r['whole_over_job']:.2f} the job); all {r['jobs']} jobs {r['all_jobs_s']:.2f} s "
          f"(x{r['all_jobs_over_whole']:.2f} the whole read)", flush=True)


# (label, module, attribute) of each timed phase of a rescore-nbest run (--phases)
PHASES = [("read", "rescore.nbest.sets", "load_nbest_dir"), ("checks", "rescore.nbest.checks", "check_nbest_input"),
          ("encode", "rescore.engine.score", "_encode"), ("scoring", "rescore.engine.score", "score_nbest"),
          ("lmwt.nn", "rescore.io.kaldi", "write_nn_costs"), ("lmwt.interp", "rescore.io.kaldi", "write_table"),
          ("report", "rescore.metrics", "nbest_report"), ("chart", "rescore.metrics", "plot_comparison")]


def phases_child(argv) -> None:
    """One timed rescore-nbest run in this process (argv: its arguments); prints its phases'
    CPU seconds as JSON on the last line of stdout."""
    import importlib
    import json
    import resource
    import runpy

    spent = dict.fromkeys([p[0] for p in PHASES], 0.0)

    def timed(label, fn):
        def run(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.process_time() - t
        return run

    for label, module, name in PHASES:
        mod = importlib.import_module(module)
        setattr(mod, name, timed(label, getattr(mod, name)))
    sys.argv = ["rescore-nbest", *argv]
    try:
        runpy.run_module("rescore.cli.nbest", run_name="__main__")
    except SystemExit as e:
        if e.code:
            raise
    ru = resource.getrusage(resource.RUSAGE_SELF)
    spent["scoring"] -= spent["encode"]  # (score_nbest encodes the words first)
    spent["process"] = ru.ru_utime + ru.ru_stime
    spent["other"] = spent["process"] - sum(spent[p[0]] for p in PHASES)
    print(json.dumps(spent))


def bench_phases(model: str, train_text: bool, repeats: int) -> dict:
    """Medians over ``repeats`` processes of phases_child's figures on the dev set."""
    import json
    import os
    import subprocess

    d = SHARED_DATA / "tts-wikitext2-dev"
    args = [str(d / "nbest"), None, "--data-dir", str(d / "data"), "--model", model, "--device", "cpu",
            "--normalize", "none", "--state-carry", "first-pass", "--precision", "fp32"]
    args += ["--train-text", str(SHARED_DATA / "wikitext2-asr" / "train.txt")] if train_text \
        else ["--oov-penalty", "0"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench_io.") as tmp:
            args[1] = str(Path(tmp) / "out")
            r = subprocess.run([sys.executable, "-m", "tools.bench.bench_io", "--phases-child", *args], env=env,
                               capture_output=True, text=True, check=True, cwd=REPO)
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["load"] = os.getloadavg()[0]
    return out


def main() -> None:
    if sys.argv[1:2] == ["--phases-child"]:
        return phases_child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hyps", type=int, default=1_000_000, help="hypotheses in the synthetic N-best dir")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure (the median is reported)")
    ap.add_argument("--json", help="also write the figures as JSON here")
    ap.add_argument("--split-jobs", type=int, default=0, help="also time one --split K/N job's read, N jobs")
    ap.add_argument("--split-only", action="store_true", help="with --split-jobs: only the split figures")
    ap.add_argument("--phases", metavar="MODEL", help="time the phases of rescore-nbest runs of MODEL on the dev set")
    ap.add_argument("--phases-train-text", action="store_true",
                    help="with --phases: also --train-text (report buckets, chart, OOV penalty auto)")
    args = ap.parse_args()
    res = {"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
           "repeats": args.repeats}
    if args.phases:
        res["phases"] = ph = bench_phases(args.phases, args.phases_train_text, args.repeats)
        print("CPU s (median of %d runs, load %.1f): " % (args.repeats, ph["load"])
              + ", ".join(f"{k} {v:.2f}" for k, v in ph.items() if k != "load"), flush=True)
        if args.json:
            write_json(args.json, res)
        return
    if args.split_jobs:
        res["split"] = {}
        dev = SHARED_DATA / "tts-wikitext2-dev"
        if dev.is_dir():
            res["split"]["dev"] = bench_split(dev / "nbest", dev / "data", args.split_jobs, args.repeats)
            print_split("dev set", res["split"]["dev"])
        with tempfile.TemporaryDirectory(prefix="bench_io.") as tmp:
            d = make_synthetic(Path(tmp), args.hyps)
            res["split"]["synthetic"] = bench_split(d, None, args.split_jobs, args.repeats)
            print_split("synthetic text", res["split"]["synthetic"])
    if args.split_only:
        if args.json:
            write_json(args.json, res)
        return
    res["dev"] = bench_dev(args.repeats)
    if res["dev"]:
        dv = res["dev"]
        print(f"dev set ({dv['hyps']} hyps): read {dv['read_s']:.2f} s (naive {dv['naive_read_s']:.2f} s, "
              f"x{dv['read_ratio']:.2f}), combine {dv['combine_s']:.3f} s, score {dv['score_s']:.2f} s, "
              f"total {dv['total_s']:.2f} s; WER {dv['wer']:.2f} %, oracle {dv['oracle_wer']:.2f} %", flush=True)
    res["synthetic"] = sy = bench_synthetic(args.hyps, args.repeats)
    for label in ("text", "gz"):
        r = sy[label]
        print(f"synthetic {args.hyps} hyps, {label}: {r['read_s']:.1f} s = {r['hyps_per_s']:,.0f} hyps/s "
              f"(naive {r['naive_hyps_per_s']:,.0f} hyps/s, ours/naive time x{r['ratio']:.2f})", flush=True)
    if args.json:
        write_json(args.json, res)


if __name__ == "__main__":
    main()
