#!/usr/bin/env python3
"""Benchmark rescoring with a Hugging Face causal LM (rescore-nbest --model hf:DIR): the way
Hugging Face users rescore N-best lists (``padded``: each hypothesis, after its carried context,
one sequence; an utterance's hypotheses batched with right padding) against rescore's prefix
sharing (``fast``: one token trie per utterance under a tree attention mask, the context once),
and ``nemo``: the batching of NeMo's scripts/asr_language_modeling/neural_rescorer/
eval_neural_rescorer.py (NVIDIA/NeMo at 8cfedd72, reproduced here): every candidate
``<bos> tokens <eos>`` one row, --nemo-batch consecutive candidates (in file order, 256 by
default) padded to the longest of the batch, the log-softmax over the whole vocabulary at every
position, no carry (its costs equal ``fast``'s with --state-carry none; they are compared then).
The tokens are rescore's (each word's pieces) so that the costs compare.

Runs are interleaved (fast, padded, fast, padded, ...) so load changes hit both alike; the
median of --repeat runs is reported, in wall and CPU seconds, as subword tokens scored per second
(every hypothesis' pieces and its end of sentence) and the ratio fast / padded. The two engines'
per-hypothesis costs are compared (they agree to float rounding).

    PYTHONPATH=. python -m tools.bench.bench_hf --convs 6 --utts 5                     # random GPT-2
    PYTHONPATH=. python -m tools.bench.bench_hf --model hf:/path/to/gpt2 --convs 60 --utts 100

Without --model a randomly initialised GPT-2 (--layers, --dim, --heads) with a byte-level BPE
of --vocab tokens trained on the first lines of --text is saved to a temporary directory: speed
does not depend on the weights. Needs the hf extra (transformers, tokenizers).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tools.common import SHARED_DATA  # noqa: E402
DATA = SHARED_DATA
EOT = "<|endoftext|>"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--model", help="hf:DIR; without it a random GPT-2 of the options below")
    p.add_argument("--layers", type=int, default=4, help="random model: layers")
    p.add_argument("--dim", type=int, default=256, help="random model: hidden size")
    p.add_argument("--heads", type=int, default=4, help="random model: attention heads")
    p.add_argument("--vocab", type=int, default=2000, help="random model: BPE vocabulary size")
    p.add_argument("--positions", type=int, default=1024, help="random model: positions")
    p.add_argument("--text", default=str(DATA / "wikitext2-asr" / "train.txt"),
                   help="random model: the BPE is trained on the first --text-lines lines of it")
    p.add_argument("--text-lines", type=int, default=5000)
    p.add_argument("--convs", type=int, default=6, help="first N conversations of the set (0: all)")
    p.add_argument("--utts", type=int, default=5, help="first M utterances of each (0: all)")
    p.add_argument("--hf-context", type=int, default=512, help="tokens of carried context")
    p.add_argument("--state-carry", default="rescored", help="none, first-pass or rescored")
    p.add_argument("--engines", default="fast,padded", help="comma list of fast, padded, naive, nemo "
                   "(fast-bf16: fast with --precision bf16; fast-single: fast with one trie per call, as "
                   "on a CPU, where a GPU puts several conversations' side by side; fast-batched: side by "
                   "side on any device; the last of them, "
                   "nemo aside unless --state-carry none, is the costs' reference; "
                   "the speed ratios are against nemo where run, else padded)")
    p.add_argument("--repeat", type=int, default=3, help="runs per engine (median reported)")
    p.add_argument("--baseline-rounds", type=int, default=1000,
                   help="run nemo and padded in the first N rounds only (slow baselines on a CPU)")
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--conv-batch", type=int, default=16, help="conversations side by side (rescore-nbest's)")
    p.add_argument("--gpu-memory-fraction", type=float,
                   help="cap this process's CUDA memory (torch.cuda.set_per_process_memory_fraction) so that "
                        "large calls run out of memory and the engine's back-off halves --max-tokens")
    p.add_argument("--device", default="cpu")
    p.add_argument("--weight", type=float, default=0.5)
    p.add_argument("--inv-acwt", type=float, default=9.5)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--nemo-batch", type=int, default=256, help="nemo: candidates per call (its --batch_size)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--costs-out", help="write the first engine's costs here (lmwt.nn lines)")
    p.add_argument("--profile", help="write a torch profiler table of one fast run here")
    return p.parse_args(argv)


def save_random_gpt2(out_dir, lines, vocab=500, layers=2, dim=32, heads=2, positions=256, seed=0, scale=1.0):
    """A GPT-2 of random weights (times ``scale``) and a byte-level BPE of ``vocab`` tokens trained
    on ``lines``, saved in out_dir as save_pretrained writes them; returns out_dir."""
    import tokenizers
    import torch
    import transformers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=vocab, min_frequency=2, special_tokens=[EOT], show_progress=False)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOT, eos_token=EOT,
                                               unk_token=EOT)
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=positions, n_embd=dim, n_layer=layers,
                                  n_head=heads, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    model = transformers.GPT2LMHeadModel(cfg)
    if scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def read_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, n) if line.strip()]


def load_conversations(args):
    """The engine's conversations of the first --convs x --utts of the N-best set."""
    return load_conversations_keys(args)[0]


def load_conversations_keys(args):
    """(the engine's conversations of the first --convs x --utts of the N-best set, the
    hypotheses' keys in the same nesting)."""
    from rescore.nbest.combine import fixed_cost
    from rescore.engine.score import UttInput
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    convs = nbest.conversations[:args.convs or None]
    utts = [c.utterances[:args.utts or None] for c in convs]
    return ([[UttInput([h.words for h in u.hyps], [fixed_cost(h, args.weight, args.inv_acwt, 0.0) for h in u.hyps])
              for u in us] for us in utts], [[[h.key for h in u.hyps] for u in us] for us in utts])


def nemo_costs(lm, convs, batch_size: int, device: str):
    """Sentence costs (one-element lists, the per-hypothesis sum) the way of NeMo's
    eval_neural_rescorer.py (module docstring); EngineStats-like counts in ``nemo_costs.stats``."""
    import torch

    from rescore.engine.forward import autocast_for

    dev = torch.device(device)
    lm.to(dev)
    rows = [[lm.bos_id] + lm.encode(h)[0] + [lm.eos_id] for c in convs for u in c for h in u.hyps]
    sums, calls, positions = [], 0, 0
    with torch.inference_mode():
        for b in range(0, len(rows), batch_size):
            batch = rows[b:b + batch_size]
            L = max(len(r) for r in batch)
            ids = torch.tensor([r + [lm.eos_id] * (L - len(r)) for r in batch], device=dev)
            mask = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in batch], device=dev)
            with autocast_for(dev, "auto"):
                logits = lm.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            log_probs = torch.nn.functional.log_softmax(logits.float(), dim=-1)
            tgt = log_probs[:, :-1].gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
            sums += (-(tgt * mask[:, 1:]).sum(-1)).double().tolist()
            calls += 1
            positions += ids.numel()
    nemo_costs.stats = {"rows": positions, "calls": calls}
    it = iter(sums)
    return [[[[next(it)] for _ in u.hyps] for u in c] for c in convs]


def write_costs(path, convs, keys, costs) -> None:
    """lmwt.nn lines (key c1 ... c_{n+1}) of every hypothesis."""
    with open(path, "w", encoding="utf-8") as f:
        for c, conv in enumerate(convs):
            for u, _ in enumerate(conv):
                for h, cost in enumerate(costs[c][u]):
                    f.write(keys[c][u][h] + " " + " ".join(f"{x:.6f}" for x in cost) + "\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from rescore.engine import hf as hf_engine
    from rescore.engine.score import EngineStats, score_nbest
    from rescore.models.hf import load_hf

    spec = args.model
    if spec is None:
        spec = "hf:" + str(save_random_gpt2(Path(tempfile.mkdtemp(prefix="bench_hf.")) / "gpt2",
                                            read_lines(args.text, args.text_lines), args.vocab, args.layers,
                                            args.dim, args.heads, args.positions))
    lm = load_hf(spec, torch.device(args.device), args.hf_context)
    if args.gpu_memory_fraction:
        torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
    convs, keys = load_conversations_keys(args)
    n_hyps = sum(len(u.hyps) for c in convs for u in c)
    tokens = sum(len(lm.encode(h)[0]) + 1 for c in convs for u in c for h in u.hyps)
    engines = args.engines.split(",")
    runs = {e: [] for e in engines}
    costs = {}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    def report(final: bool) -> None:
        comparable = [e for e in engines if e != "nemo" or args.state_carry == "none"]
        ref = costs[comparable[-1]] if comparable else None

        def max_diff(x):
            if ref is None or (x is costs.get("nemo") and args.state_carry != "none"):
                return None
            return max(abs(sum(a) - sum(b)) for cx, cr in zip(x, ref) for ux, ur in zip(cx, cr)
                       for a, b in zip(ux, ur))
        summary = {"model": args.model or f"random GPT-2 {args.layers}x{args.dim}, {args.heads} heads, "
                   f"BPE {len(lm.tokenizer)}", "convs": len(convs), "utts": sum(len(c) for c in convs),
                   "hyps": n_hyps, "tokens": tokens, "hf_context": args.hf_context, "state_carry": args.state_carry,
                   "threads": args.threads, "load_avg_1min": os.getloadavg()[0], "engines": {}}
        for e in engines:
            wall = statistics.median(x["wall_s"] for x in runs[e])
            cpu = statistics.median(x["cpu_s"] for x in runs[e])
            summary["engines"][e] = {"wall_s": wall, "cpu_s": cpu, "runs": [x["wall_s"] for x in runs[e]],
                                     "tokens_per_s": tokens / wall, "tokens_per_cpu_s": tokens / cpu,
                                     "rows": runs[e][0]["rows"], "calls": runs[e][0]["calls"],
                                     "oom_backoffs": runs[e][0]["oom_backoffs"],
                                     "max_diff_hyp_vs_ref": max_diff(costs[e])}
        base = summary["engines"].get("nemo") or summary["engines"].get("padded")
        summary["baseline"] = "nemo" if "nemo" in summary["engines"] else "padded"
        print(f"model {summary['model']}; {summary['convs']} conversations, {summary['utts']} utterances, "
              f"{n_hyps} hypotheses, {tokens} tokens; carry {args.state_carry}, context {args.hf_context}; "
              f"{args.threads} threads; load {summary['load_avg_1min']:.1f}")
        print(f"{'engine':7} {'wall s':>7} {'cpu s':>7} {'tok/s':>7} {'tok/cpu-s':>9} {'rows':>9} {'calls':>6} "
              f"{'x wall':>6} {'x cpu':>6} {'max|d|hyp':>9}")
        for e, s in summary["engines"].items():
            d = s["max_diff_hyp_vs_ref"]
            s["speedup_vs_baseline"] = base["wall_s"] / s["wall_s"] if base else None
            s["cpu_speedup_vs_baseline"] = base["cpu_s"] / s["cpu_s"] if base else None
            print(f"{e:7} {s['wall_s']:7.1f} {s['cpu_s']:7.1f} {s['tokens_per_s']:7.0f} {s['tokens_per_cpu_s']:9.0f} "
                  f"{s['rows']:9d} {s['calls']:6d} {s['speedup_vs_baseline'] or 0:6.2f} "
                  f"{s['cpu_speedup_vs_baseline'] or 0:6.2f} {'-' if d is None else format(d, '9.1e'):>9}")
        summary["complete"] = final
        if args.json:
            from rescore.io.files import write_json

            write_json(args.json, summary)

    for r in range(args.repeat):
        for e in engines:  # interleaved
            if (e == "naive" and r > 0) or (e in ("nemo", "padded") and r >= args.baseline_rounds):
                continue
            stats = EngineStats()
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            engine, _, precision = e.partition("-")
            layout, precision = (precision, "") if precision in ("single", "batched") else ("", precision)
            if e == "nemo":
                costs[e] = nemo_costs(lm, convs, args.nemo_batch, args.device)
                stats.rows, stats.calls = nemo_costs.stats["rows"], nemo_costs.stats["calls"]
            else:
                side_by_side = hf_engine.SIDE_BY_SIDE_DEVICES
                hf_engine.SIDE_BY_SIDE_DEVICES = {"single": (), "batched": ("cpu", "cuda")}.get(layout, side_by_side)
                try:
                    costs[e] = score_nbest(lm, convs, weight=args.weight, state_carry=args.state_carry,
                                           device=args.device, max_tokens=args.max_tokens, engine=engine,
                                           conv_batch=args.conv_batch, precision=precision or "auto",
                                           stats=stats, progress=False)
                finally:
                    hf_engine.SIDE_BY_SIDE_DEVICES = side_by_side
            sync()
            runs[e].append({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                            "rows": stats.rows, "calls": stats.calls, "oom_backoffs": stats.oom_backoffs})
            print(f"run {r + 1} {e}: {runs[e][-1]['wall_s']:.1f} s", file=sys.stderr)
        report(final=r == args.repeat - 1)  # (the JSON after every round: a run cut short keeps it)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            score_nbest(lm, convs, weight=args.weight, state_carry=args.state_carry, device=args.device,
                        max_tokens=args.max_tokens, engine="fast", progress=False)
        key = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
        Path(args.profile).write_text(prof.key_averages().table(sort_by=key, row_limit=30), encoding="utf-8")
    if args.costs_out:
        write_costs(args.costs_out, convs, keys, costs[engines[0]])


if __name__ == "__main__":
    main()
