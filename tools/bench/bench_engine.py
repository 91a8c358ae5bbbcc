#!/usr/bin/env python3
"""Benchmark the rescoring engines (fast / padded / naive) on an N-best dir, in one run.

Each engine runs in its own subprocess (so its peak resident memory can be read on its own),
on the same model file and the same conversations; the parent checks that every engine's
per-hypothesis costs equal the naive reference and prints hypotheses/s, tokens/s, rows computed,
the speed-up over padded and the peak memory, as a table and JSON.

    PYTHONPATH=. python -m tools.bench.bench_engine --convs 20 --utts 3            # random 2x256 LSTM
    PYTHONPATH=. python -m tools.bench.bench_engine --model exp/lm/lstm/model.pt --convs 60
    PYTHONPATH=. python -m tools.bench.bench_engine --bound --convs 1000 --utts 1000   # no model
    PYTHONPATH=. python -m tools.bench.bench_engine --convs 4 --utts 50 --one-conversation \
        --state-carry first-pass --engines fast,naive                      # one job's carry

--bound runs no model: it counts, for the first K hypotheses of every utterance (K from
--bound-k), the token rows of one padded batch per utterance and the distinct prefixes of the
utterance's trie. An exact engine computes the output layer (its V x H product and the V-way
normaliser) once per distinct prefix at least, so padded rows / distinct prefixes bounds its
speed-up over padded where the output layer dominates the time per row.

--normalize exact,none runs every engine with exact and with unnormalised costs (``--normalize
none`` of rescore-nbest: the output layer's target rows only); ``ENGINE:none`` rows are checked
against the naive engine's unnormalised costs.

--outputs softmax,class runs every engine with a random model of each output layer (the full
softmax and the class-factored one of ``--output class``, ``--classes`` C, classes binned by the
counts of --vocab-text), interleaved: ``ENGINE@class`` rows are checked against the naive
engine of the same model, or the first run of it.

Without --model a randomly initialised model (--arch/--head/--hidden/--layers, vocabulary of
--vocab-text) is saved to a temporary checkpoint: speed does not depend on the weights.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.common import REPO, SHARED_DATA  # noqa: E402
DATA = SHARED_DATA


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--model", help="checkpoint; without it a random model of the options below")
    p.add_argument("--arch", default="lstm", help="random model: lstm or transformer")
    p.add_argument("--head", default="softmax", help="random model: softmax or pointer")
    p.add_argument("--memory-aug", action="store_true", help="random model: pointer memory")
    p.add_argument("--hidden", type=int, default=256, help="random model: hidden size")
    p.add_argument("--layers", type=int, default=2, help="random model: layers")
    p.add_argument("--history", type=int, default=100, help="random model: pointer history L")
    p.add_argument("--context", type=int, default=100, help="random model: Transformer window")
    p.add_argument("--vocab-text", default=str(DATA / "wikitext2-asr" / "train.txt"),
                   help="random model: vocabulary = the most frequent words of this text")
    p.add_argument("--max-vocab", type=int, default=10000,
                   help="random model: vocabulary size (the LM helper's models use 10000)")
    p.add_argument("--max-vocab-all", action="store_true",
                   help="random model: every word of --vocab-text (no --max-vocab)")
    p.add_argument("--outputs", default="softmax",
                   help="random models: comma list of output layers, softmax and/or class")
    p.add_argument("--classes", type=int, default=0,
                   help="random class model: C [default: round(sqrt(V))]")
    p.add_argument("--convs", type=int, default=20, help="first N conversations of the set")
    p.add_argument("--utts", type=int, default=3, help="first M utterances of each conversation")
    p.add_argument("--one-conversation", action="store_true",
                   help="the chosen utterances as one conversation, in order (the carry along a "
                        "job's whole archive, as Kaldi's pytorchnn scorer does)")
    p.add_argument("--engines", default="fast,padded,naive")
    p.add_argument("--normalize", default="exact",
                   help="comma list of exact, none, auto: each engine runs with each")
    p.add_argument("--repeat", type=int, default=1, help="runs per engine (median reported)")
    p.add_argument("--state-carry", default="rescored")
    p.add_argument("--weight", type=float, default=0.5)
    p.add_argument("--inv-acwt", type=float, default=9.5)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--conv-batch", type=int, default=16)
    p.add_argument("--schedule", default="auto", help="fast engine: auto, levels, segments, tree")
    p.add_argument("--precision", default="auto",
                   help="auto, fp32, bf16 or int8 (rescore-nbest --precision); a comma list runs every "
                        "engine in each (ENGINE/PRECISION rows, compared with the first precision's)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per worker (2 threads on a loaded 2-core machine spin in "
                        "OpenMP barriers: small ops get 1000x slower)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--bound", action="store_true",
                   help="only count rows: padded vs distinct prefixes, by N-best depth")
    p.add_argument("--bound-k", default="1,5,10,25,50,100,1000",
                   help="--bound: N-best depths to count (first K hypotheses per utterance)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one engine
    p.add_argument("--costs-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-normalize", default="exact", help=argparse.SUPPRESS)
    p.add_argument("--worker-precision", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def load_subset(args):
    from rescore.nbest.sets import Conversation, NbestSet, load_nbest_dir

    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    keep = [u.id for c in nbest.conversations[:args.convs] for u in c.utterances[:args.utts]]
    nbest = nbest.subset_utts(keep)
    if args.one_conversation:
        nbest = NbestSet(nbest.path, [Conversation("all", list(nbest.utterances()))], nbest.refs, nbest.grouping)
    return nbest


def matmul_flops_per_row(cfg, output_layer: bool = True) -> float:
    """FLOPs of the matrix products of one scored token row (2 per multiply-add): the output
    layer (H x V, class output ~H x (C + V/C) per edge, counted per row; not computed by
    unnormalised scoring, ``output_layer=False``) and the body;
    small terms (pointer heads, LayerNorm, gates, the target rows of unnormalised scoring)
    left out. A Transformer row attends to about its W = context cached keys."""
    H, V, n = cfg.hidden, cfg.vocab_size, cfg.layers
    if getattr(cfg, "output", "softmax") == "class":  # about C + V/C rows per target
        V = cfg.classes + V / cfg.classes
    body = (n * 2 * 4 * H * 2 * H if cfg.arch == "lstm"  # 4 gates from [x ; h]
            else n * 2 * ((4 + 2 * cfg.ff_mult) * H * H + 2 * cfg.context * H))
    return (2.0 * H * V if output_layer else 0.0) + body


def sharing_bound(nbest, depths):
    """Per depth K: hypotheses, scored tokens, padded rows, distinct prefixes (trie rows)."""
    rows = []
    for k in depths:
        hyps = tokens = padded = prefixes = 0
        for conv in nbest.conversations:
            for utt in conv.utterances:
                words = [tuple(h.words) for h in utt.hyps[:k]]
                if not words:
                    continue
                hyps += len(words)
                tokens += sum(len(w) + 1 for w in words)
                padded += len(words) * (max(len(w) for w in words) + 1)
                # node = consumed prefix <eos> w1..wi, i = 0..n: each needs its own output row
                prefixes += len({w[:i] for w in words for i in range(len(w) + 1)})
        rows.append({"k": k, "hyps": hyps, "tokens": tokens, "padded_rows": padded,
                     "trie_rows": prefixes, "bound": padded / prefixes})
    return rows


def bound_main(args) -> None:
    nbest = load_subset(args)
    depths = [int(k) for k in args.bound_k.split(",")]
    result = sharing_bound(nbest, depths)
    print(f"{args.nbest_dir}: {len(nbest.conversations)} conversations; rows of the output "
          "layer by N-best depth K (first K hypotheses of each utterance)")
    print(f"{'K':>5} {'hyps':>8} {'tokens':>9} {'padded rows':>11} {'trie rows':>9} "
          f"{'padded/trie':>11} {'tokens/trie':>11}")
    for r in result:
        print(f"{r['k']:5d} {r['hyps']:8d} {r['tokens']:9d} {r['padded_rows']:11d} "
              f"{r['trie_rows']:9d} {r['bound']:11.2f} {r['tokens'] / r['trie_rows']:11.2f}")
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, result)


def worker(args) -> None:
    """Score the subset with one engine; print one JSON line of measurements."""
    import torch

    from rescore.nbest.combine import Params
    from rescore.engine.score import EngineStats, resolve_normalize
    from rescore.jobs.nbest import score_nbest_set
    from rescore.models import load_checkpoint

    torch.set_num_threads(args.threads)
    nbest = load_subset(args)
    model = load_checkpoint(args.model, args.device)
    cfg = model.config
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = EngineStats()
    t0, c0 = time.perf_counter(), time.process_time()
    costs = score_nbest_set(model, nbest, Params(args.weight, args.inv_acwt, 0.0),
                            state_carry=args.state_carry, device=args.device,
                            max_tokens=args.max_tokens, engine=args.worker,
                            conv_batch=args.conv_batch, schedule=args.schedule,
                            precision=args.worker_precision or args.precision,
                            normalize=args.worker_normalize,
                            stats=stats, progress=False)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    from rescore.io.files import write_json

    write_json(args.costs_out, costs)  # (read back by the parent run)
    print(json.dumps({
        "engine": args.worker, "normalize": args.worker_normalize, "wall_s": wall, "cpu_s": cpu, "hyps": stats.hyps,
        "tokens": stats.tokens, "rows": stats.rows, "calls": stats.calls,
        "gflop": stats.rows * matmul_flops_per_row(
            cfg, resolve_normalize(model, args.worker_normalize) == "exact") / 1e9,
        "rss_before_mib": rss_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cuda_peak_mib": (torch.cuda.max_memory_allocated() / 2**20
                          if args.device.startswith("cuda") else None),
    }))


def random_checkpoint(args, path: Path, output: str = "softmax") -> None:
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.train.loop import train_counts
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    vocab = Vocabulary.from_text(args.vocab_text, None if args.max_vocab_all else args.max_vocab)
    extra, counts = {}, None
    if output == "class":
        # self_norm: only so that --normalize none is allowed (a random model's raw scores
        # are timed, not judged)
        extra = dict(output="class", classes=args.classes or round(len(vocab) ** 0.5), self_norm=0.1)
        counts = train_counts(args.vocab_text, vocab)
    cfg = ModelConfig(arch=args.arch, head=args.head, memory_aug=args.memory_aug,
                      hidden=args.hidden, layers=args.layers, history=args.history,
                      context=args.context, **extra)
    save_checkpoint(build_model(cfg, vocab, counts), path)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    if args.bound:
        return bound_main(args)
    tmp = Path(tempfile.mkdtemp(prefix="bench_engine."))
    outputs = args.outputs.split(",")
    if args.model is not None and outputs != ["softmax"]:
        sys.exit("--outputs: random models only (without --model)")
    models = {"softmax": args.model}
    for o in outputs:
        if models.get(o) is None:
            models[o] = str(tmp / f"random-{o}.pt")
            random_checkpoint(args, Path(models[o]), o)
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    # a run: ENGINE (exact costs) or ENGINE:NORMALIZE, @OUTPUT for a class model
    engines = [(e if n == "exact" else f"{e}:{n}") + ("" if o == "softmax" else f"@{o}")
               for e in args.engines.split(",") for n in args.normalize.split(",")
               for o in outputs]
    precisions = args.precision.split(",")
    if len(precisions) > 1:  # ENGINE.../PRECISION: every run in each precision
        engines = [f"{e}/{p}" for e in engines for p in precisions]
    runs, costs = {e: [] for e in engines}, {}
    for r in range(args.repeat):
        for e in engines:  # interleaved, so load changes hit every engine alike
            if e.startswith("naive") and r > 0:
                continue  # the reference is slow; one run
            run, _, precision = e.partition("/")
            e_norm, _, output = run.partition("@")
            engine, _, norm = e_norm.partition(":")
            model = models[output or "softmax"]
            out = tmp / f"{e.replace(':', '-').replace('@', '-').replace('/', '-')}.json"
            cmd = [sys.executable, "-m", "tools.bench.bench_engine", *passthrough, "--model", model, "--worker", engine,
                   "--worker-normalize", norm or "exact", "--costs-out", str(out)]
            if precision:
                cmd += ["--worker-precision", precision]
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=REPO)
            runs[e].append(json.loads(res.stdout.strip().splitlines()[-1]))
            costs[e] = json.loads(out.read_text())
            print(f"run {r + 1} {e}: {runs[e][-1]['wall_s']:.1f} s", file=sys.stderr)

    def reference(e):  # the naive engine of the same normalisation and model, else the first
        if "/" in e:  # (several precisions: the same run in the first one)
            return costs[f"{e.partition('/')[0]}/{precisions[0]}"]
        suffix = e[len(e.split(":")[0].split("@")[0]):]  # ":none", "@class", ""
        same = [x for x in engines if x.endswith(suffix) and x[:-len(suffix) or None].isalpha()]
        return costs.get("naive" + suffix) or costs[same[0]]
    summary = {"model": args.model or f"random {args.arch}-{args.head}"
               f"{'+mem' if args.memory_aug else ''} {args.layers}x{args.hidden} "
               f"V={'all' if args.max_vocab_all else args.max_vocab}",
               "convs": args.convs, "utts": args.utts, "threads": args.threads,
               "load_avg_1min": os.getloadavg()[0], "engines": {}}
    for e in engines:
        r = runs[e]
        wall = statistics.median(x["wall_s"] for x in r)
        cpu = statistics.median(x["cpu_s"] for x in r)
        ref = reference(e)
        d_tok = max(abs(a - b) for k in ref for a, b in zip(ref[k], costs[e][k]))
        d_hyp = max(abs(sum(ref[k]) - sum(costs[e][k])) for k in ref)
        summary["engines"][e] = {
            "wall_s": wall, "cpu_s": cpu, "runs": [x["wall_s"] for x in r],
            "cpu_runs": [x["cpu_s"] for x in r], "hyps": r[0]["hyps"],
            "tokens": r[0]["tokens"], "rows": r[0]["rows"], "calls": r[0]["calls"],
            "gflop": r[0]["gflop"], "gflops_per_s": r[0]["gflop"] / wall,
            "hyps_per_s": r[0]["hyps"] / wall, "tokens_per_s": r[0]["tokens"] / wall,
            "hyps_per_cpu_s": r[0]["hyps"] / cpu, "tokens_per_cpu_s": r[0]["tokens"] / cpu,
            "peak_rss_mib": max(x["peak_rss_mib"] for x in r),
            "rss_before_mib": r[0]["rss_before_mib"], "cuda_peak_mib": r[0]["cuda_peak_mib"],
            "max_diff_token": d_tok, "max_diff_hyp": d_hyp,
        }
    base = summary["engines"].get("padded")
    print(f"model {summary['model']}; {args.convs} conversations x {args.utts} utterances; "
          f"{args.threads} threads; load {summary['load_avg_1min']:.1f}")
    print("medians; wall = elapsed seconds, cpu = this process's CPU seconds (less sensitive to "
          "the machine's load); ratios against padded; peak = peak resident memory of the "
          "worker, +MiB = its rise while scoring; GF/s = matrix-product GFLOP of the rows "
          "computed per wall second (compare tools/bench/bench_gemm.py)")
    print(f"{'engine':16} {'wall s':>7} {'cpu s':>7} {'hyps/s':>7} {'tok/s':>7} {'tok/cpu-s':>9} "
          f"{'rows':>8} {'calls':>6} {'x wall':>6} {'x cpu':>6} {'peak MiB':>8} {'+MiB':>5} "
          f"{'max|d|hyp':>9} {'GF/s':>6}")
    for e, s in summary["engines"].items():
        s["speedup_vs_padded"] = base["wall_s"] / s["wall_s"] if base else None
        s["cpu_speedup_vs_padded"] = base["cpu_s"] / s["cpu_s"] if base else None
        print(f"{e:16} {s['wall_s']:7.1f} {s['cpu_s']:7.1f} {s['hyps_per_s']:7.1f} "
              f"{s['tokens_per_s']:7.0f} {s['tokens_per_cpu_s']:9.0f} {s['rows']:8d} "
              f"{s['calls']:6d} {s['speedup_vs_padded'] or 0:6.2f} "
              f"{s['cpu_speedup_vs_padded'] or 0:6.2f} {s['peak_rss_mib']:8.0f} "
              f"{s['peak_rss_mib'] - s['rss_before_mib']:5.0f} "
              f"{s['max_diff_hyp']:9.1e} {s['gflops_per_s']:6.1f}")
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, summary)


if __name__ == "__main__":
    main()
