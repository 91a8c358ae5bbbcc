#!/usr/bin/env python3
"""Our scorer against Kaldi's real ``steps/pytorchnn/compute_sentence_scores.py``: whole
processes, one thread each, CPU seconds and peak memory, and the costs compared.

1. ``--model`` (an LSTM body with a softmax head: its embedding is tied with the output layer,
   so embedding size = hidden size, which is what Kaldi's scorer can build) is exported into
   Kaldi's format: the state_dict of Kaldi's model.py ``RNNModel`` (``encoder.weight``,
   ``rnn.*``, ``decoder.weight``, ``decoder.bias``) and a vocabulary file (``word id`` a line,
   our vocabulary's order, so the ids coincide). Our ``<eos>`` is Kaldi's ``--sent-boundary``,
   our ``<unk>`` its ``--oov``. rescore.models.kaldi_lm.import_kaldi_lm maps it back.
2. Kaldi's ``--infile`` is the N-best dir's ``words_text`` (``<utt>-<k> words``, in its file
   order), as Kaldi's ``lmrescore_nbest_pytorchnn.sh`` hands its archives' ``words_text`` to the
   scorer; ``--utts K`` keeps the first K utterances of that order (and writes an N-best dir of
   them for ours). Each run is its own process with ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1``:

   * ``kaldi``: ``python compute_sentence_scores.py`` from ``--kaldi-steps`` with
     ``--model LSTM --emsize H --nhid H --nlayers L --sent-boundary <eos> --oov <unk>``;
   * ``NORMALIZE-CARRY`` (e.g. ``none-first-pass``, ``exact-rescored``): ``rescore-nbest
     NBEST OUT --data-dir DATA --model M --device cpu --normalize NORMALIZE --state-carry CARRY
     --oov-penalty 0`` (no OOV penalty, as Kaldi's scorer has none); a ``-bf16`` suffix
     (``none-first-pass-bf16``) adds ``--precision bf16`` (``-int8``: int8), else ``--precision fp32``;
     a last ``-torch`` (``none-first-pass-int8-torch``) runs it with ``RESCORE_NATIVE=0``: the
     LSTM cell as PyTorch's kernels instead of the fused one (rescore.engine.kernels.native).

   User and system CPU seconds and the peak resident memory of each process come from
   ``os.wait4`` (the whole process: start-up, reading, model load, scoring, writing).
   ``--rounds R`` interleaves the runs (kaldi, ours, kaldi, ours, ...); the table gives medians.
3. The costs: per hypothesis, Kaldi's sentence cost (the sum of its per-word costs, -log P in
   nats, ``</s>`` included, 4 decimals each) against ours (the sum of the same row of our
   ``lmwt.nn``) of the ``exact-first-pass`` run, on the utterances where Kaldi's carried state
   is ours. Kaldi carries along its infile, across recordings, the state after running rank 1
   of the previous utterance over the batch's padded length: an utterance is clean when its
   predecessor in the infile is its predecessor in our conversation, that predecessor was
   clean and its rank 1 was its longest hypothesis (no padding read). The first utterance of
   the infile is clean when it starts its conversation. Expect ~1e-3: the 4 decimals.

``--kaldi-steps`` defaults to $RESCORE_KALDI_STEPS, else $KALDI_ROOT/egs/wsj/s5/steps/pytorchnn.

    PYTHONPATH=. python -m tools.kaldi.bench_kaldi_real --model exp/sn-lstm/model.pt --utts 20
    PYTHONPATH=. python -m tools.kaldi.bench_kaldi_real --model exp/sn-lstm/model.pt --rounds 1 \\
        --runs kaldi,none-first-pass,exact-first-pass,none-rescored --json kaldi_real.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from tools.common import SHARED_DATA  # noqa: E402
DATA = SHARED_DATA
NORMALIZE = ("exact", "none")
PRECISIONS = ("fp32", "bf16", "int8")
CARRY = ("none", "first-pass", "rescored")
CHECK_RUN = "exact-first-pass"  # the run whose costs are Kaldi's where its carried state is clean
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def default_kaldi_steps():
    if os.environ.get("RESCORE_KALDI_STEPS"):
        return os.environ["RESCORE_KALDI_STEPS"]
    if os.environ.get("KALDI_ROOT"):
        return os.path.join(os.environ["KALDI_ROOT"], "egs", "wsj", "s5", "steps", "pytorchnn")
    return None


class _Help(argparse.RawDescriptionHelpFormatter):
    """The module docstring as it is, and every option's default where it has one."""

    def _get_help_string(self, action):
        if action.default in (None, argparse.SUPPRESS) or "%(default)" in action.help:
            return action.help
        return action.help + " (default: %(default)s)"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_Help)
    p.add_argument("--model", required=True, help="our checkpoint: an LSTM body with a softmax head")
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"),
                   help="Kaldi N-best dir (words_text, acwt, lmwt.withlm, lmwt.nolm)")
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"),
                   help="its data dir (text, segments: the conversations)")
    p.add_argument("--kaldi-steps", default=default_kaldi_steps(),
                   help="the folder of Kaldi's compute_sentence_scores.py and model.py")
    p.add_argument("--runs", default="kaldi,none-first-pass,exact-first-pass,none-rescored",
                   help="comma list: kaldi, and NORMALIZE-CARRY[-PRECISION] for ours with NORMALIZE in "
                        f"{'/'.join(NORMALIZE)}, CARRY in {'/'.join(CARRY)} and PRECISION in "
                        f"{'/'.join(PRECISIONS)} (default fp32)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of all the runs, interleaved")
    p.add_argument("--utts", type=int, default=0, help="the first K utterances of the infile (0: all)")
    p.add_argument("--work-dir", help="keep the exported model, inputs and outputs here "
                                      "(default: a temporary folder, removed at the end)")
    p.add_argument("--json", help="write the raw figures here")
    args = p.parse_args(argv)
    args.runs = args.runs.split(",")
    bad = [r for r in args.runs if r != "kaldi" and run_settings(r) is None]
    if bad or len(set(args.runs)) != len(args.runs):
        p.error(f"--runs: unknown or repeated {bad or args.runs}; known: kaldi, NORMALIZE-CARRY")
    if args.rounds < 1 or args.utts < 0:
        p.error("--rounds must be >= 1 and --utts >= 0")
    script = Path(args.kaldi_steps or ".", "compute_sentence_scores.py")
    if "kaldi" in args.runs and not (args.kaldi_steps and script.is_file()):
        where = f"no compute_sentence_scores.py in {args.kaldi_steps}" if args.kaldi_steps else "not given"
        p.error(f"--kaldi-steps: {where} (set KALDI_ROOT or RESCORE_KALDI_STEPS, or give --kaldi-steps)")
    return args


def run_settings(name: str):
    """'none-first-pass' -> ('none', 'first-pass', 'fp32'), 'none-first-pass-bf16' -> (...,
    'bf16'); None for a name that is not ours."""
    precision = "fp32"
    name = name[:-len("-torch")] if name.endswith("-torch") else name
    for p in PRECISIONS:
        if name.endswith("-" + p):
            name, precision = name[:-len(p) - 1], p
    normalize, _, carry = name.partition("-")
    return (normalize, carry, precision) if normalize in NORMALIZE and carry in CARRY else None


# --- the export into Kaldi's format -------------------------------------------------------------

def kaldi_state_dict(model) -> dict:
    """The state_dict of Kaldi's model.py RNNModel('LSTM', V, H, H, L, tie_weights=True) that
    computes what ``model`` (our NeuralLM: LSTM body, softmax head) computes; a ValueError for
    any other model."""
    cfg = model.config
    what = f"arch {cfg.arch!r}, head {cfg.head!r}, output {getattr(cfg, 'output', 'softmax')!r}"
    if cfg.arch != "lstm" or cfg.head != "softmax" or getattr(cfg, "output", "softmax") != "softmax":
        raise ValueError(f"Kaldi's RNNModel holds an LSTM with a softmax output layer only; this model has {what}")
    emb = model.embedding.weight
    if model.decoder.weight is not emb or emb.shape[1] != cfg.hidden:
        raise ValueError("Kaldi's scorer ties the weights: the embedding must be the output layer's, "
                         f"of the hidden size {cfg.hidden}")
    names = {n for n, _ in model.named_parameters()}
    expected = {"embedding.weight", "decoder.bias"} | {n for n in names if n.startswith("body.rnn.")}
    if names != expected or len(expected) != 2 + 4 * cfg.layers:
        raise ValueError(f"parameters beyond an LSTM and a softmax layer: {sorted(names - expected)}")
    enc = emb.detach().float().contiguous()
    sd = {"encoder.weight": enc, "decoder.weight": enc, "decoder.bias": model.decoder.bias.detach().float()}
    for n, p in model.body.rnn.named_parameters():  # the same nn.LSTM weights (batch-first or not)
        sd["rnn." + n] = p.detach().float().contiguous()
    return sd


def export_kaldi_lm(checkpoint, out_dir, sent_boundary: str = "") -> dict:
    """Write ``out_dir``/model.pt (Kaldi's state_dict) and ``out_dir``/words.txt (our vocabulary,
    ``word id`` a line, our ``<eos>`` written as ``sent_boundary`` when given: Kaldi's steps
    script leaves compute_sentence_scores.py's default ``<s>``); return
    compute_sentence_scores.py's options for them."""
    import torch

    from rescore.models import load_checkpoint
    from rescore.vocab import EOS, UNK

    model = load_checkpoint(checkpoint, "cpu")
    sd = kaldi_state_dict(model)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(sd, out_dir / "model.pt")
    with open(out_dir / "words.txt", "w", encoding="utf-8") as f:
        f.writelines(f"{sent_boundary if sent_boundary and w == EOS else w} {i}\n"
                     for i, w in enumerate(model.vocab.words))
    H = model.config.hidden
    return {"model_path": str(out_dir / "model.pt"), "vocabulary": str(out_dir / "words.txt"),
            "model": "LSTM", "emsize": H, "nhid": H, "nlayers": model.config.layers,
            "sent_boundary": sent_boundary or EOS, "oov": UNK}


# --- inputs -------------------------------------------------------------------------------------

def file_order(nbest_dir) -> list:
    """The hypothesis keys of the N-best dir in file order (words_text's, else words')."""
    from rescore.io.kaldi import read_table
    from rescore.formats.kaldi import find_archive

    for name, kind in (("words_text", "tokens"), ("words", "ints")):
        path = find_archive(nbest_dir, name)
        if path is not None:
            return read_table(path, kind, keep=lambda key: False).keys
    raise SystemExit(f"error: no words_text or words archive in {nbest_dir}")


def prepare_inputs(args, work: Path) -> dict:
    """Kaldi's infile, the N-best dir ours reads (a subset of the first --utts utterances where
    asked) and what the cost check needs: infile utterance order, our conversations, lengths."""
    from rescore.io.kaldi import write_table
    from rescore.nbest.sets import load_nbest_dir
    from rescore.formats.kaldi import words_txt_of

    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    keys = file_order(args.nbest_dir)
    order = list(dict.fromkeys(k.rsplit("-", 1)[0] for k in keys))  # Kaldi's utterance id
    nbest_dir, subset = args.nbest_dir, bool(args.utts) and args.utts < len(order)
    if subset:
        order = order[:args.utts]
        nbest = nbest.subset_utts(order)
    utts = {u.id: u for u in nbest.utterances()}
    hyps = [h for uid in order for h in utts[uid].hyps]
    if subset:  # the same archives, restricted, in the same order
        nbest_dir = work / "nbest"
        nbest_dir.mkdir(parents=True, exist_ok=True)
        write_table(nbest_dir / "words_text", "tokens", {h.key: h.words for h in hyps})
        for name, field in (("acwt", "ac"), ("lmwt.withlm", "withlm"), ("lmwt.nolm", "nolm")):
            write_table(nbest_dir / name, "float", {h.key: getattr(h, field) for h in hyps})
    infile = work / "words_text"
    with open(infile, "w", encoding="utf-8") as f:
        f.writelines(" ".join([h.key, *h.words]) + "\n" for h in hyps)
    words_txt = words_txt_of(args.nbest_dir, None)
    return {"infile": str(infile), "nbest_dir": str(nbest_dir), "subset": subset,
            "words_txt": None if words_txt is None else str(words_txt), "order": order,
            "conversations": [[u.id for u in c.utterances] for c in nbest.conversations],
            "lengths": {u: [len(h.words) + 1 for h in utts[u].hyps] for u in order},
            "utterances": len(order), "hyps": len(hyps)}


def command(name: str, args, inputs: dict, kaldi: dict, out: Path) -> list:
    """The argv of one run; its outputs go under ``out``."""
    if name == "kaldi":
        return [sys.executable, str(Path(args.kaldi_steps) / "compute_sentence_scores.py"),
                "--infile", inputs["infile"], "--outfile", str(out / "lmwt.nn"),
                "--vocabulary", kaldi["vocabulary"], "--model-path", kaldi["model_path"],
                "--model", kaldi["model"], "--emsize", str(kaldi["emsize"]), "--nhid", str(kaldi["nhid"]),
                "--nlayers", str(kaldi["nlayers"]), "--sent-boundary", kaldi["sent_boundary"],
                "--oov", kaldi["oov"]]
    normalize, carry, precision = run_settings(name)
    argv = [sys.executable, "-m", "rescore.cli.nbest", inputs["nbest_dir"], str(out), "--data-dir", args.data_dir,
            "--model", args.model, "--device", "cpu", "--normalize", normalize, "--state-carry", carry,
            "--oov-penalty", "0", "--precision", precision]
    if inputs["words_txt"]:
        argv += ["--words-txt", inputs["words_txt"]]
    return argv + (["--allow-missing"] if inputs["subset"] else [])  # references of the utterances left out


def measure(argv: list, log: Path, extra_env: Optional[dict] = None) -> dict:
    """Run argv with one thread (and ``extra_env``); its CPU seconds (user, sys), peak RSS (MiB)
    and wall seconds."""
    env = dict(os.environ, **ONE_THREAD, **(extra_env or {}))
    with open(log, "w") as f:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"error: exit status {p.returncode}: {' '.join(argv)}\n" + "\n".join(tail))
    return {"user_s": ru.ru_utime, "sys_s": ru.ru_stime, "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_mib": ru.ru_maxrss / 1024, "wall_s": wall}


# --- the cost check -----------------------------------------------------------------------------

def clean_utterances(order: list, conversations: list, lengths: dict) -> list:
    """The utterances (of ``order``, Kaldi's infile order) whose start state in Kaldi's scorer is
    ours with first-pass carry; ``conversations``: our utterance ids in carry order; ``lengths``:
    utt -> token counts (words + 1) of its hypotheses in rank order."""
    ours_prev = {u: prev for conv in conversations for prev, u in zip([None] + conv[:-1], conv)}
    clean, prev = [], None
    for u in order:
        if prev is None:  # Kaldi's zero state
            ok = ours_prev[u] is None
        else:  # Kaldi's: prev's start state, then rank 1 of prev run over max(lengths[prev]) tokens
            ok = ours_prev[u] == prev and prev in clean[-1:] and lengths[prev][0] == max(lengths[prev])
        if ok:
            clean.append(u)
        prev = u
    return clean


def read_costs(path) -> dict:
    """key -> per-word costs of an lmwt.nn (Kaldi's or ours)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts:
                out[parts[0]] = [float(x) for x in parts[1:]]
    return out


def check_costs(kaldi_nn, ours_nn, inputs: dict) -> dict:
    """Kaldi's sentence costs against ours, per hypothesis: on the clean utterances, and on all."""
    k, o = read_costs(kaldi_nn), read_costs(ours_nn)
    if set(k) != set(o):
        raise SystemExit(f"error: {kaldi_nn} and {ours_nn} have different keys "
                         f"({len(set(k) ^ set(o))} in one only)")
    tokens = [key for key in k if len(k[key]) != len(o[key])]
    if tokens:
        raise SystemExit(f"error: {tokens[0]}: {len(k[tokens[0]])} costs from Kaldi, {len(o[tokens[0]])} of ours")
    clean = set(clean_utterances(inputs["order"], inputs["conversations"], inputs["lengths"]))
    diff = {key: abs(sum(k[key]) - sum(o[key])) for key in k}
    utt = {key: key.rsplit("-", 1)[0] for key in k}
    on_clean = [d for key, d in diff.items() if utt[key] in clean]
    every = list(diff.values())
    return {"clean_utterances": len(clean), "clean_hyps": len(on_clean),
            "clean_max_abs": max(on_clean) if on_clean else None,
            "all_hyps": len(every), "all_max_abs": max(every), "all_median_abs": statistics.median(every)}


# --- the report ---------------------------------------------------------------------------------

def summary(results: dict) -> dict:
    """name -> medians over the rounds (CPU seconds, wall) and the largest peak RSS."""
    out = {}
    for name, rounds in results.items():
        out[name] = {f: statistics.median(r[f] for r in rounds) for f in ("user_s", "sys_s", "cpu_s", "wall_s")}
        out[name]["peak_rss_mib"] = max(r["peak_rss_mib"] for r in rounds)
    base = out.get("kaldi")
    for s in out.values():
        s["x_kaldi"] = base["cpu_s"] / s["cpu_s"] if base else None
    return out


def table(summ: dict) -> str:
    lines = ["| run | CPU-s user | sys | total | wall s | peak RSS MiB | x Kaldi |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in summ.items():
        x = "" if s["x_kaldi"] is None else f"{s['x_kaldi']:.2f}"
        lines.append(f"| {name} | {s['user_s']:.1f} | {s['sys_s']:.1f} | {s['cpu_s']:.1f} | {s['wall_s']:.1f} "
                     f"| {s['peak_rss_mib']:.0f} | {x} |")
    return "\n".join(lines)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def benchmark(args, work: Path) -> dict:
    """Export, prepare, run the rounds, check the costs: every figure of the report."""
    try:
        kaldi = export_kaldi_lm(args.model, work / "kaldi-model")
    except ValueError as e:
        raise SystemExit(f"error: {args.model}: {e}") from None
    inputs = prepare_inputs(args, work)
    print(f"{inputs['hyps']} hypotheses of {inputs['utterances']} utterances; Kaldi's options: "
          + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in kaldi.items()), flush=True)
    load_before = uptime()
    results = {name: [] for name in args.runs}
    for r in range(args.rounds):
        for name in args.runs:
            out = work / "out" / f"{name}.{r + 1}"
            out.mkdir(parents=True, exist_ok=True)
            env = {"RESCORE_NATIVE": "0"} if name.endswith("-torch") else None
            results[name].append(measure(command(name, args, inputs, kaldi, out),
                                         work / "out" / f"{name}.{r + 1}.log", env))
            print(f"round {r + 1}: {name}: {results[name][-1]['cpu_s']:.1f} CPU-s", flush=True)
    report = {"model": args.model, "nbest_dir": args.nbest_dir, "utterances": inputs["utterances"],
              "hyps": inputs["hyps"], "rounds": args.rounds, "threads": 1, "kaldi_options": kaldi,
              "load_before": load_before, "load_after": uptime(), "runs": results, "summary": summary(results)}
    if "kaldi" in results and CHECK_RUN in results:
        last = f"{args.rounds}"
        report["cost_check"] = check_costs(work / "out" / f"kaldi.{last}" / "lmwt.nn",
                                           work / "out" / f"{CHECK_RUN}.{last}" / "lmwt.nn", inputs)
    return report


def print_report(report: dict) -> None:
    print(f"\n{report['hyps']} hypotheses of {report['utterances']} utterances, one thread per process, "
          f"medians of {report['rounds']} round(s); x Kaldi = Kaldi's total CPU-s / the run's")
    print(f"load before: {report['load_before']}\nload after:  {report['load_after']}\n")
    print(table(report["summary"]))
    c = report.get("cost_check")
    if c is None:
        print(f"\ncosts: not compared (needs the runs kaldi and {CHECK_RUN})")
        return
    clean = "none" if c["clean_max_abs"] is None else f"{c['clean_max_abs']:.2e}"
    print(f"\ncosts, Kaldi against {CHECK_RUN}, per hypothesis: max |difference| {clean} on the "
          f"{c['clean_hyps']} hypotheses of the {c['clean_utterances']} utterance(s) where Kaldi's carried "
          f"state is ours (Kaldi rounds each word cost to 4 decimals); on all {c['all_hyps']}: max "
          f"{c['all_max_abs']:.3g}, median {c['all_median_abs']:.2e} (Kaldi's carry reads padding and "
          "crosses recordings)")


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_kaldi_real."))
    try:
        report = benchmark(args, work)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report)
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
