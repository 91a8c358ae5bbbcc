#!/usr/bin/env python3
"""How the scoring cost of rescore-nbest's fast engine grows with the work: CPU seconds and peak
memory of whole rescore-nbest runs (import, model load, reading, scoring, writing) against the
hypotheses per utterance (N), the utterances (U) and the output layer, so that a job can be sized.

    PYTHONPATH=. python -m tools.bench.bench_scaling --out-dir exp/scaling              # the full grid
    PYTHONPATH=. python -m tools.bench.bench_scaling --out-dir /tmp/s --repeat 1 \\
        --ns 1,5 --utts 5,10 --n-utts 10 --models 10k --carries rescored            # a quick look
    PYTHONPATH=. python -m tools.bench.bench_scaling --out-dir exp/scaling --plot-only    # redraw

Every point is one N-best dir written from the dev set (--nbest-dir, --data-dir): its first U
utterances in recording order (carry order), the first N hypotheses of each; each run is a fresh
``python -m rescore.cli.nbest`` process (fast engine, --device cpu, --threads torch threads
through OMP_NUM_THREADS: rescore-nbest has no thread option), so that its CPU seconds
(user + sys, os.wait4) and its peak resident memory are that run's own. A point is the median
of --repeat runs, the rounds interleaved so that load changes hit every point alike.

Sweeps (the first --models entry is the model of the N sweep):
  startup  U = 1, N = --n-fixed, each model: the constant (import, model load, reading)
  n        N in --ns on the first --n-utts utterances (all by default)
  utts     U in --utts at N = --n-fixed, each model (--vocab-utts: other U for the models
           after the first) and each carry of --carries for the first model

Models (random 2x256 LSTMs, vocabulary: the most frequent words of --vocab-text; the cost does
not depend on the weights): 10k (softmax, exact), 30k-none (softmax over every word, --normalize
none: only each target's row of the output layer, a self-normalised model's path) and 30k-class
(--output class --classes C, exact). A class model with --normalize none is refused by
rescore-nbest (its normalisers are already exact at (C + class size) x H per edge).

The engine's log gives the rows computed (trie nodes) and forward calls; the tokens read and the
padded rows (what a scorer without prefix sharing computes) are counted from the written dirs
(tools/bench/bench_engine.py's sharing_bound). --out-dir gets table.md, results.json and scaling.png.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.common import REPO  # noqa: E402

from tools.bench.bench_engine import DATA, random_checkpoint, sharing_bound  # noqa: E402

# name -> (output layer, vocabulary: 0 = every word of --vocab-text, --normalize, label)
MODELS = {
    "10k": ("softmax", 10000, "exact", "10k softmax, exact"),
    "30k-none": ("softmax", 0, "none", "30k softmax, --normalize none"),
    "30k-class": ("class", 0, "exact", "30k class-factored, exact"),
}
ENGINE_LINE = re.compile(r"(\d+) hypotheses, (\d+) tokens: (\d+) rows computed in (\d+) forward calls")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", required=True, help="table.md, results.json and scaling.png go here")
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--vocab-text", default=str(DATA / "wikitext2-asr" / "train.txt"),
                   help="random models: vocabulary = the most frequent words of this text")
    p.add_argument("--ns", default="1,5,10,20,50,100", help="N sweep: hypotheses per utterance")
    p.add_argument("--n-utts", type=int, default=0, help="N sweep: the first U utterances (0: all)")
    p.add_argument("--utts", default="50,100,200,400,627", help="U sweep: utterances")
    p.add_argument("--vocab-utts", help="U sweep of the models after the first [default: --utts]")
    p.add_argument("--n-fixed", type=int, default=100, help="N of the U sweep and the start-up runs")
    p.add_argument("--models", default="10k,30k-none,30k-class", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--classes", type=int, default=174, help="classes of the 30k-class model")
    p.add_argument("--carries", default="rescored,first-pass",
                   help="--state-carry curves of the first model's U sweep (the others: rescored)")
    p.add_argument("--repeat", type=int, default=3, help="runs per point (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each run (OMP_NUM_THREADS)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--work-dir", help="N-best dirs, models and run logs [default: a temporary dir, removed]")
    p.add_argument("--plot-only", action="store_true",
                   help="redraw table.md and scaling.png (and refit) from --out-dir's results.json")
    p.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)  # internal: write --work-dir
    return p.parse_args(argv)


def int_list(spec: str) -> list:
    return [int(x) for x in spec.split(",") if x.strip()]


# -- the N-best dirs ------------------------------------------------------------------------------

def write_subset(nbest, data_dir, out: Path, n_utts: int, n_hyps: int, words_txt=None) -> Path:
    """Write the first ``n_utts`` utterances of ``nbest`` (a loaded NbestSet, in its carry order)
    with the first ``n_hyps`` hypotheses of each as a Kaldi N-best dir ``out/nbest`` (text
    archives; with ``words_txt`` also ``words`` and ``out/lang/words.txt``) and their entries of
    the data dir ``data_dir`` as ``out/data``. Returns ``out``."""
    from rescore.formats.kaldi import KALDI_COLUMNS, table_to_kaldi
    from rescore.formats.table import Hypothesis, NbestTable, Utterance

    utts = list(nbest.utterances())
    if not 1 <= n_utts <= len(utts) or n_hyps < 1:
        raise ValueError(f"{n_utts} utterances x {n_hyps} hypotheses of a set of {len(utts)} utterances")
    kept = utts[:n_utts]
    table = NbestTable(str(out / "nbest"), tuple(KALDI_COLUMNS), [
        Utterance(u.id, [Hypothesis(rank, list(h.words), (h.ac, h.withlm, h.nolm))
                         for rank, h in enumerate(u.hyps[:n_hyps], 1)]) for u in kept])
    if words_txt is not None:
        (out / "lang").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(words_txt, out / "lang" / "words.txt")
        words_txt = out / "lang" / "words.txt"
    table_to_kaldi(table, out / "nbest", words_txt)
    write_data_subset(data_dir, out / "data", [u.id for u in kept])
    return out


def write_data_subset(data_dir, out: Path, utt_ids) -> None:
    """The entries of ``utt_ids`` in the data dir's text, utt2spk, segments and spk2utt (the
    files the N-best reader uses; absent ones stay absent)."""
    from rescore.io.kaldi import read_text_table, write_table

    keep = set(utt_ids)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("text", "utt2spk", "segments", "spk2utt"):
        src = Path(data_dir) / name
        if not src.exists():
            continue
        t = read_text_table(src, "tokens")
        if name == "spk2utt":
            items = {k: [u for u in v if u in keep] for k, v in zip(t.keys, t.values)}
            items = {k: v for k, v in items.items() if v}
        else:
            items = {k: v for k, v in zip(t.keys, t.values) if k in keep}
        write_table(out / name, "tokens", items, trailing_space=False)


# -- the points -----------------------------------------------------------------------------------

def plan(args, num_utts: int) -> list:
    """Every point: dict(sweep, model, carry, utts, n). A point shared by two sweeps runs once
    (``runs_as`` names the run)."""
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"--models: unknown model {m!r} (known: {', '.join(MODELS)})")
    base, n_utts = models[0], args.n_utts or num_utts
    points = [dict(sweep="startup", model=m, carry="rescored", utts=1, n=args.n_fixed) for m in models]
    points += [dict(sweep="n", model=base, carry="rescored", utts=n_utts, n=n) for n in int_list(args.ns)]
    for m in models:
        carries = args.carries.split(",") if m == base else ["rescored"]
        us = int_list(args.vocab_utts or args.utts) if m != base else int_list(args.utts)
        points += [dict(sweep="utts", model=m, carry=c, utts=u, n=args.n_fixed) for c in carries for u in us]
    for p in points:
        if p["utts"] > num_utts:
            sys.exit(f"{p['utts']} utterances asked for; the set has {num_utts}")
        p["runs_as"] = f"{p['model']}-{p['carry']}-u{p['utts']}-n{p['n']}"
    return points


def counts(nbest, n_utts: int, n_hyps: int) -> dict:
    """Hypotheses, tokens read, padded rows and trie rows of the first n_utts x n_hyps."""
    sub = nbest.subset_utts([u.id for u in list(nbest.utterances())[:n_utts]])
    row = sharing_bound(sub, [n_hyps])[0]
    return {k: row[k] for k in ("hyps", "tokens", "padded_rows", "trie_rows")}


def parse_engine_log(text: str) -> dict:
    """hyps, tokens, rows, calls of rescore-nbest's engine log line (ValueError if it has none)."""
    m = ENGINE_LINE.search(text)
    if m is None:
        raise ValueError("no engine line ('N hypotheses, T tokens: R rows computed in C forward calls') in the log")
    return dict(zip(("hyps", "tokens", "rows", "calls"), map(int, m.groups())))


def run_once(args, run: dict, work: Path, models: dict, tag: str) -> dict:
    """One fresh rescore-nbest process; its CPU seconds (user + sys), peak RSS, wall, engine log."""
    d = work / "sets" / f"u{run['utts']}-n{run['n']}"
    out = work / "out" / f"{run['runs_as']}-{tag}"
    log_path = work / "logs" / f"{run['runs_as']}-{tag}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "rescore.cli.nbest", str(d / "nbest"), str(out), "--data-dir", str(d / "data"),
           "--model", models[run["model"]], "--weight", "0.5", "--inv-acwt", "9.5", "--wip", "0",
           "--device", args.device, "--engine", "fast", "--state-carry", run["carry"],
           "--normalize", MODELS[run["model"]][2]]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log_path.read_text()
    if proc.returncode != 0:
        sys.exit(f"run failed (exit {proc.returncode}): {' '.join(cmd)}\n{text[-2000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
            "peak_rss_mib": ru.ru_maxrss / 1024, "wall_s": wall, "load_1min": load, **parse_engine_log(text)}


def prepare(args, work: Path) -> None:
    """Write every point's N-best dir and every model's random checkpoint into ``work``, and
    ``work/prepare.json``: the points, model name -> checkpoint, the counts of each dir, the
    machine. Runs in a process of its own (``--prepare``): Linux counts the memory of the
    parent at the fork in a child's peak RSS (ru_maxrss), so the measuring parent stays small."""
    from rescore.io.files import write_json
    from rescore.formats.kaldi import default_words_txt
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    points = plan(args, nbest.num_utts)
    words_txt = default_words_txt(Path(args.nbest_dir))
    sets = {}
    for u, n in sorted({(p["utts"], p["n"]) for p in points}):
        d = work / "sets" / f"u{u}-n{n}"
        if not (d / "nbest" / "words_text").exists():
            write_subset(nbest, args.data_dir, d, u, n, words_txt)
        sets[f"u{u}-n{n}"] = counts(nbest, u, n)
    paths = {}
    for m in dict.fromkeys(p["model"] for p in points):
        output, vocab, _, _ = MODELS[m]
        paths[m] = str(work / "models" / f"{m}.pt")
        if not Path(paths[m]).exists():
            Path(paths[m]).parent.mkdir(parents=True, exist_ok=True)
            ns = argparse.Namespace(vocab_text=args.vocab_text, max_vocab=vocab or None, max_vocab_all=vocab == 0,
                                    classes=args.classes, arch="lstm", head="softmax", memory_aug=False,
                                    hidden=256, layers=2, history=100, context=100)
            random_checkpoint(ns, Path(paths[m]), output)
    write_json(work / "prepare.json", {"points": points, "models": paths, "sets": sets, "machine": machine()})


def measure(args, work: Path, points: list, sets: dict, models: dict) -> dict:
    """Run every distinct point --repeat times, rounds interleaved; runs_as -> summary."""
    runs = {p["runs_as"]: p for p in points}
    got = {k: [] for k in runs}
    total = len(runs) * args.repeat
    for r in range(args.repeat):
        for i, (k, p) in enumerate(runs.items()):
            res = run_once(args, p, work, models, f"r{r + 1}")
            got[k].append(res)
            print(f"[{r * len(runs) + i + 1}/{total}] {k}: {res['cpu_s']:.1f} CPU-s, "
                  f"{res['peak_rss_mib']:.0f} MiB, load {res['load_1min']:.1f}", file=sys.stderr)
    out = {}
    for k, p in runs.items():
        rs = got[k]
        c = sets[f"u{p['utts']}-n{p['n']}"]
        eng = {f: rs[0][f] for f in ("hyps", "tokens", "rows", "calls")}
        if eng["hyps"] != c["hyps"] or eng["tokens"] != c["tokens"]:
            sys.exit(f"{k}: the engine scored {eng} where the dir holds {c}")
        out[k] = {**c, **eng, "rows_equal_trie": eng["rows"] == c["trie_rows"],
                  "cpu_s": statistics.median(x["cpu_s"] for x in rs),
                  "cpu_runs": [x["cpu_s"] for x in rs],
                  "user_s": statistics.median(x["user_s"] for x in rs),
                  "sys_s": statistics.median(x["sys_s"] for x in rs),
                  "wall_s": statistics.median(x["wall_s"] for x in rs),
                  "peak_rss_mib": statistics.median(x["peak_rss_mib"] for x in rs),
                  "load_runs": [x["load_1min"] for x in rs]}
    return out


# -- results --------------------------------------------------------------------------------------

def curves(points: list) -> dict:
    """(sweep, model, carry) -> its points in sweep order (the N sweep by N, the U sweep by U)."""
    out = {}
    for p in points:
        if p["sweep"] != "startup":
            out.setdefault((p["sweep"], p["model"], p["carry"]), []).append(p)
    for v in out.values():
        v.sort(key=lambda p: p["n"] if p["sweep"] == "n" else p["utts"])
    return out


def fit_line(xs, ys) -> tuple:
    """Least-squares (intercept, slope) of ys = a + b xs; (ys[0], 0) for a single point."""
    if len(xs) < 2:
        return float(ys[0]), 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def fits(points: list, res: dict) -> list:
    """Per curve: CPU-s = a + b x rows computed, the start-up run of its model, and the log-log
    slope over the curve's x (N or U) from its first to its last point of CPU-s and of CPU-s
    above the start-up run (1: linear in x)."""
    import math

    startup = {p["model"]: res[p["runs_as"]] for p in points if p["sweep"] == "startup"}
    rows = []
    for (sweep, model, carry), ps in curves(points).items():
        rs = [res[p["runs_as"]] for p in ps]
        a, b = fit_line([r["rows"] for r in rs], [r["cpu_s"] for r in rs])
        x = [p["n"] if sweep == "n" else p["utts"] for p in ps]
        def loglog(c0, c1):  # d log CPU / d log x from the first to the last point
            ok = len(ps) > 1 and x[-1] != x[0] and c0 > 0 and c1 > 0
            return math.log(c1 / c0) / math.log(x[-1] / x[0]) if ok else None
        s0 = startup.get(model, {}).get("cpu_s")
        above = None if s0 is None else loglog(rs[0]["cpu_s"] - s0, rs[-1]["cpu_s"] - s0)
        rows.append({"sweep": sweep, "model": model, "carry": carry, "intercept_cpu_s": a,
                     "cpu_s_per_1k_rows": 1000 * b, "startup_cpu_s": startup.get(model, {}).get("cpu_s"),
                     "startup_peak_rss_mib": startup.get(model, {}).get("peak_rss_mib"),
                     "loglog_slope": loglog(rs[0]["cpu_s"], rs[-1]["cpu_s"]),
                     "loglog_slope_above_startup": above, "x_first": x[0], "x_last": x[-1]})
    return rows


def machine() -> dict:
    import platform

    name = ""
    try:
        name = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    return {"cpu": name or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__}


def write_markdown(path: Path, summary: dict) -> None:
    """table.md: the points, then the fits."""
    pts, res = summary["points"], summary["results"]
    lines = [f"Machine: {summary['machine']['cpu']}, {summary['machine']['cores']} cores, torch "
             f"{summary['machine']['torch']}; {summary['threads']} thread(s) per run; medians of {summary['repeat']} "
             f"runs; 1-minute load {summary['load']['min']:.1f} to {summary['load']['max']:.1f} "
             f"(median {summary['load']['median']:.1f}).", "",
             "| sweep | model | carry | U | N | hyps | tokens read | padded rows | rows computed | tokens / row "
             "| calls | CPU s | CPU s of the runs | peak RSS MiB |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for p in pts:
        r = res[p["runs_as"]]
        rows = f"{r['rows']:,}" + ("" if r["rows_equal_trie"] else f" (trie {r['trie_rows']:,})")
        lines.append(f"| {p['sweep']} | {p['model']} | {p['carry']} | {p['utts']} | {p['n']} | {r['hyps']:,} "
                     f"| {r['tokens']:,} | {r['padded_rows']:,} | {rows} | {r['tokens'] / r['rows']:.2f} "
                     f"| {r['calls']:,} | {r['cpu_s']:.1f} | {' / '.join(f'{c:.1f}' for c in r['cpu_runs'])} "
                     f"| {r['peak_rss_mib']:.0f} |")
    lines += ["", "Fit of each curve, CPU s = a + b x rows computed; start-up: the same command on 1 utterance; "
              "log-log slope: d log CPU / d log x from the first to the last point (1: linear in x), of the "
              "whole run and of its CPU s above the start-up run.", "",
              "| sweep | model | carry | x | a (CPU s) | b (CPU s per 1,000 rows) | start-up CPU s | start-up peak MiB "
              "| log-log slope | above start-up |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for f in summary["fits"]:
        x = "N" if f["sweep"] == "n" else "U"
        slope, above = ("" if v is None else f"{v:.2f}"
                        for v in (f["loglog_slope"], f.get("loglog_slope_above_startup")))
        su = "" if f["startup_cpu_s"] is None else f"{f['startup_cpu_s']:.1f}"
        sm = "" if f["startup_peak_rss_mib"] is None else f"{f['startup_peak_rss_mib']:.0f}"
        lines.append(f"| {f['sweep']} | {f['model']} | {f['carry']} | {x} {f['x_first']}-{f['x_last']} "
                     f"| {f['intercept_cpu_s']:.1f} | {f['cpu_s_per_1k_rows']:.3f} | {su} | {sm} | {slope} | {above} |")
    path.write_text("\n".join(lines) + "\n")


def _log_axes(a, xs, log_y: bool = True) -> None:
    """Log axes with plain numbers: x ticks at the points, y ticks 1-2-5."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    a.set_xscale("log")
    a.set_xticks(sorted(set(xs)))
    a.xaxis.set_major_formatter(plain)
    a.xaxis.set_minor_formatter(NullFormatter())
    if log_y:
        a.set_yscale("log")
        a.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        a.yaxis.set_major_formatter(plain)
        a.yaxis.set_minor_formatter(NullFormatter())
    a.grid(True, alpha=0.3)


def plot(path: Path, summary: dict) -> None:
    """scaling.png: CPU-s against N and against U (log-log; dotted: the model's start-up run;
    thin: the CPU-s above it), the rows computed against the tokens read, and peak RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rescore.io.files import atomic_output

    res, pts = summary["results"], summary["points"]
    startup = {p["model"]: res[p["runs_as"]]["cpu_s"] for p in pts if p["sweep"] == "startup"}
    fig, ax = plt.subplots(2, 2, figsize=(10, 7.2))
    (a_n, a_u), (a_rows, a_rss) = ax
    colors, xs_of = {}, {a: [] for a in ax.flat}
    for (sweep, model, carry), ps in curves(pts).items():
        rs = [res[p["runs_as"]] for p in ps]
        label = MODELS[model][3] + ("" if carry == "rescored" else f", carry {carry}")
        color = colors.setdefault(model, f"C{len(colors)}")
        style = "-" if carry == "rescored" else "--"
        xs = [p["n"] if sweep == "n" else p["utts"] for p in ps]
        target = a_n if sweep == "n" else a_u
        target.plot(xs, [r["cpu_s"] for r in rs], style, marker="o", color=color, label=label)
        if model in startup:
            target.axhline(startup[model], color=color, linestyle=":", linewidth=1)
            if sweep == "n":
                target.plot(xs, [max(r["cpu_s"] - startup[model], 1e-3) for r in rs], style, color=color,
                            linewidth=0.8, marker=".", label=f"{label}, minus start-up")
        if sweep == "utts":
            a_rss.plot(xs, [r["peak_rss_mib"] for r in rs], style, marker="o", color=color, label=label)
        else:
            a_rows.plot(xs, [r["tokens"] for r in rs], "-", marker="s", color="C7", label="tokens read")
            a_rows.plot(xs, [r["padded_rows"] for r in rs], "--", marker="^", color="C8", label="padded rows")
            a_rows.plot(xs, [r["rows"] for r in rs], "-", marker="o", color=color, label="rows computed (trie)")
            a_rows.set_title(f"prefix sharing: token positions against N, U = {ps[0]['utts']}", fontsize=10)
        for a in (target, a_rss if sweep == "utts" else a_rows):
            xs_of[a] += xs
    a_n.set_title(f"CPU s against N (hypotheses per utterance), U = {summary.get('n_utts', '')}", fontsize=10)
    a_u.set_title(f"CPU s against U (utterances), N = {summary['n_fixed']}", fontsize=10)
    a_rss.set_title("peak resident memory against U", fontsize=10)
    for a, xl, yl in ((a_n, "N", "CPU s (user + sys), whole run"), (a_u, "U", "CPU s (user + sys), whole run"),
                      (a_rows, "N", "token positions"), (a_rss, "U", "peak RSS (MiB)")):
        if xs_of[a]:
            _log_axes(a, xs_of[a], log_y=a is not a_rss)
            if a in (a_n, a_u):
                a.set_ylim(bottom=1)  # the start-up lines in view
            a.legend(fontsize=7)
        a.set_xlabel(xl)
        a.set_ylabel(yl)
    fig.suptitle(f"rescore-nbest, fast engine, random 2x256 LSTMs, {summary['threads']} thread; dotted: the "
                 "same command on 1 utterance (start-up)", fontsize=10)
    fig.tight_layout()
    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=80)
    plt.close(fig)


def main(argv=None) -> None:
    args = parse_args(argv)
    from rescore.io.files import read_json, write_json

    out = Path(args.out_dir)
    if args.prepare:
        return prepare(args, Path(args.work_dir))
    if args.plot_only:
        summary = read_json(out / "results.json")
        summary["fits"] = fits(summary["points"], summary["results"])  # (this version's fits)
        write_json(out / "results.json", summary)
    else:
        work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_scaling."))
        try:
            argv = list(sys.argv[1:] if argv is None else argv)
            subprocess.run([sys.executable, "-m", "tools.bench.bench_scaling", *argv, "--work-dir", str(work),
                            "--prepare"], check=True, cwd=REPO)
            prep = read_json(work / "prepare.json")
            t0 = time.time()
            res = measure(args, work, prep["points"], prep["sets"], prep["models"])
        finally:
            if not args.work_dir:
                shutil.rmtree(work, ignore_errors=True)
        points = prep["points"]
        loads = [x for r in res.values() for x in r["load_runs"]]
        summary = {"command": " ".join(["tools/bench/bench_scaling.py", *argv]), "nbest_dir": args.nbest_dir,
                   "repeat": args.repeat, "threads": args.threads, "n_fixed": args.n_fixed,
                   "n_utts": next((p["utts"] for p in points if p["sweep"] == "n"), None),
                   "machine": prep["machine"],
                   "load": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
                   "elapsed_s": time.time() - t0,
                   "total_cpu_s": sum(sum(r["cpu_runs"]) for r in res.values()),
                   "points": points, "results": res, "fits": fits(points, res)}
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "results.json", summary)
    write_markdown(out / "table.md", summary)
    plot(out / "scaling.png", summary)
    print((out / "table.md").read_text())
    print(f"wrote {out}/table.md, results.json, scaling.png", file=sys.stderr)


if __name__ == "__main__":
    main()
