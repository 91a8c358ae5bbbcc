#!/usr/bin/env python3
"""Perplexity and log Z of a model on a text: how self-normalised it is.

The text is scored as rescore-ppl scores it (``rescore.train.ppl``: cut into --batch-size streams,
state carried over --bptt chunks, every word and sentence end a target). For every target it
records log P and log Z (``HeadOutput.log_norm``: the normaliser of the head's V-sized softmax,
over V + L for the implicit pointer; with the class-factored layer the sum of the class
softmax's and the target class's within-class one) and reports the perplexity, the mean, standard deviation
and quantiles of log Z, and the perplexity the unnormalised costs (``rescore-nbest --normalize
none``: -ln P - log Z for the softmax and the implicit pointer) would give.

    PYTHONPATH=. python -m tools.experiments.self_norm_stats --model exp/sn-lstm/model.pt \\
        --text ../shared/data/wikitext2-asr/test.txt [--json out.json]
"""

from __future__ import annotations

import argparse
import math


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, action="append",
                   help="checkpoint (repeat the option for several)")
    p.add_argument("--text", required=True, help="one sentence per line (e.g. test.txt)")
    p.add_argument("--batch-size", type=int, default=10, help="streams (rescore-ppl's default)")
    p.add_argument("--bptt", type=int, default=100, help="tokens per call (rescore-ppl's)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def stats(model_path: str, text: str, batch_size: int, bptt: int):
    import torch

    from rescore.train.data import encode_corpus, make_streams
    from rescore.models import load_checkpoint
    from rescore.vocab import read_sentences

    model = load_checkpoint(model_path, "cpu")
    ids, ident = encode_corpus(read_sentences(text), model.vocab)
    s = make_streams(ids, ident, batch_size, pad=True)
    state = model.initial_state(s.ids.shape[0])
    lps, lzs, masks = [], [], []
    with torch.inference_mode():
        for x, xi, y, yi, m in s.chunks(bptt):
            out, state = model(x, xi, state)
            if out.target_norm is not None:  # class-factored: the class softmax's log Z plus
                lp, z_in = out.log_prob_and_norm(y)  # the within-class one of each target's class
                lps.append(lp.double())
                lzs.append((out.log_norm + z_in).double())
            else:
                lps.append(out.log_prob(y, yi).double())
                lzs.append(out.log_norm.double())
            masks.append(m)
    mask = torch.cat(masks, 1)
    lp, lz = torch.cat(lps, 1)[mask], torch.cat(lzs, 1)[mask]  # (n,) over the targets
    q = torch.quantile(lz, torch.tensor([0.01, 0.1, 0.5, 0.9, 0.99], dtype=torch.float64))
    ce = float(-lp.mean())
    return {"model": model_path, "text": text, "targets": int(lp.numel()),
            "self_norm": model.config.self_norm, "head": model.config.head,
            "ppl": math.exp(ce), "cross_entropy": ce,
            "log_z_mean": float(lz.mean()), "log_z_std": float(lz.std()),
            "log_z_abs_mean": float(lz.abs().mean()),
            "log_z_quantiles": dict(zip(["1%", "10%", "50%", "90%", "99%"], q.tolist())),
            "ppl_unnormalised": math.exp(ce + float(lz.mean()))}


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    results = [stats(m, args.text, args.batch_size, args.bptt) for m in args.model]
    print(f"{'model':34} {'alpha':>5} {'targets':>8} {'ppl':>8} {'logZ mean':>9} {'std':>6} "
          f"{'|logZ|':>6} {'1%':>6} {'50%':>6} {'99%':>6} {'ppl(none)':>9}")
    for r in results:
        q = r["log_z_quantiles"]
        print(f"{r['model'][-34:]:34} {r['self_norm']:5.2f} {r['targets']:8d} {r['ppl']:8.1f} "
              f"{r['log_z_mean']:9.3f} {r['log_z_std']:6.3f} {r['log_z_abs_mean']:6.3f} "
              f"{q['1%']:6.2f} {q['50%']:6.2f} {q['99%']:6.2f} {r['ppl_unnormalised']:9.1f}")
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, results)


if __name__ == "__main__":
    main()
