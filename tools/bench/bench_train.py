"""Training throughput (tokens/s) of each head beside the softmax baseline, in one run.

Models are built at the benchmark's sizes; each round runs one training step (forward, backward,
clip, SGD) of every model in turn on the same batch of real text, so machine noise hits all of
them alike; the medians over rounds are reported, with the ratio to the baseline.

    PYTHONPATH=$PWD python -m tools.bench.bench_train --arch lstm --rounds 15

The output layer of every variant is ``--output`` (softmax or class, with ``--classes C``),
or the one named after a colon: ``--variants softmax,softmax:class --max-vocab 0`` compares the
full softmax with the class-factored layer at the full training vocabulary.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


from rescore.train.data import load_streams  # noqa: E402
from rescore.models import ModelConfig, build_model  # noqa: E402
from rescore.train.loop import train_counts  # noqa: E402
from rescore.vocab import Vocabulary  # noqa: E402

VARIANTS = {"softmax": dict(head="softmax"), "pointer": dict(head="pointer"),
            "pointer+mem": dict(head="pointer", memory_aug=True),
            # the pointer baselines
            "psmm": dict(head="psmm"), "pointer-generator": dict(head="pointer-generator"),
            "pg+coverage": dict(head="pointer-generator", coverage=True, coverage_weight=1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="../shared/data/wikitext2-asr/train.txt")
    ap.add_argument("--arch", default="lstm", choices=["lstm", "transformer"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--bptt", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--max-vocab", type=int, default=10000, help="0: every training word")
    ap.add_argument("--output", default="softmax", choices=["softmax", "class"],
                    help="output layer of variants without ':softmax' / ':class'")
    ap.add_argument("--classes", type=int, default=0,
                    help="C of the class output [default: round(sqrt(V))]")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="softmax,pointer,pointer+mem")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    vocab = Vocabulary.from_text(args.train, args.max_vocab or None)
    data = load_streams(args.train, vocab, args.batch_size, pad=False)
    names = args.variants.split(",")
    classes = args.classes or round(len(vocab) ** 0.5)
    counts = None
    models, optims, states = {}, {}, {}
    for name in names:
        torch.manual_seed(0)
        head, _, output = name.partition(":")
        output = output or args.output
        extra = {}
        if output == "class":
            if counts is None:
                counts = train_counts(args.train, vocab)
            extra = dict(output="class", classes=classes)
        cfg = ModelConfig(arch=args.arch, hidden=args.hidden, layers=args.layers,
                          history=args.bptt, context=args.bptt, **VARIANTS[head], **extra)
        models[name] = build_model(cfg, vocab, counts).train()
        optims[name] = torch.optim.SGD(models[name].parameters(), lr=1.0)
        states[name] = models[name].initial_state(args.batch_size)
    times = {n: [] for n in names}
    for r in range(args.rounds + 2):
        x, xi, y, yi, _ = data.chunk(r, args.bptt)
        for name in names:
            model, opt = models[name], optims[name]
            t0 = time.perf_counter()
            out, states[name] = model(x, xi, states[name].detach())
            loss = -out.log_prob(y, yi).mean()
            if out.aux_loss is not None:  # the coverage term, as in training
                loss = loss + out.aux_loss.mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
            if r >= 2:  # the first rounds warm up allocators and caches
                times[name].append(time.perf_counter() - t0)
    tokens = args.batch_size * args.bptt
    base = statistics.median(times[names[0]])
    print(f"# {args.arch} {args.layers}x{args.hidden}, V={len(vocab)}, L=T={args.bptt}, "
          f"B={args.batch_size}, {args.threads} thread(s), median of {args.rounds} steps"
          + (f"; class output: C={classes}" if counts is not None else ""))
    print(f"{'model':<22} {'tokens/s':>9} {'vs ' + names[0]:>16}")
    for name in names:
        med = statistics.median(times[name])
        print(f"{name:<22} {tokens / med:>9.0f} {base / med:>16.3f}")


if __name__ == "__main__":
    main()
