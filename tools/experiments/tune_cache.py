"""Tune the neural cache (window, theta, lambda) of a trained LM on a validation text.

One pass of the model over the text, then every grid point from the kept outputs
(rescore.models.cache.tune_cache; equal to scoring with ``rescore-ppl --cache-*``).

    python -m tools.experiments.tune_cache CKPT VALID.txt --window 100 --theta 0.1 0.3 0.6 --lam 0.05 0.1 0.2

Prints one line per grid point (ppl) and the best; ``--report`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("text")
    ap.add_argument("--window", type=int, nargs="+", default=[100])
    ap.add_argument("--theta", type=float, nargs="+", default=[0.1, 0.3, 0.6])
    ap.add_argument("--lam", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--bptt", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--report", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import torch

    from rescore.train.data import load_streams
    from rescore.models import load_checkpoint
    from rescore.models.cache import tune_cache

    torch.set_num_threads(1)
    model = load_checkpoint(args.ckpt, args.device)
    streams = load_streams(args.text, model.vocab, args.batch_size, pad=True)
    grid = tune_cache(model, streams, args.bptt, args.window, args.theta, args.lam, args.device)
    for p in grid:
        print(f"window {p['window']:5d} theta {p['theta']:.3f} lambda {p['lambda']:.3f} "
              f"ppl {p['ppl']:.2f}")
    best = min(grid, key=lambda p: p["cross_entropy"])
    print(f"best: window {best['window']} theta {best['theta']} lambda {best['lambda']} "
          f"ppl {best['ppl']:.2f}")
    if args.report:
        from rescore.io.files import write_json

        write_json(args.report, {"ckpt": args.ckpt, "text": args.text, "grid": grid, "best": best})


if __name__ == "__main__":
    main()
