"""One perplexity table for several models on one text, with per-bucket cross-entropy
differences against the first model (Li et al. 2020 Figure 2).

Each model is scored once (rescore.train.ppl.score_text, the convention of rescore-ppl), so a table of
n models costs n passes instead of the 2(n-1) of n-1 ``rescore-ppl --compare`` runs.

    python -m tools.experiments.ppl_table TEXT TRAIN_TEXT OUT_PREFIX NAME=CKPT[@WINDOW,THETA,LAMBDA] ...

NAME=CKPT@100,0.3,0.1 scores CKPT with a neural cache (window 100, theta 0.3, lambda 0.1).
Writes OUT_PREFIX.json, OUT_PREFIX.md (markdown table) and OUT_PREFIX.png (per-bucket
differences against the first model); prints the table. Per-target costs are kept in
OUT_PREFIX.NAME.costs.json and reused by a later run with the same NAME, checkpoint and cache.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections import Counter


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 4:
        sys.exit(__doc__)
    text, train_text, prefix, specs = argv[0], argv[1], argv[2], argv[3:]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    import torch

    from rescore.io.files import atomic_output, read_json, write_json
    from rescore.metrics import (bucket_ce_difference, bucket_cross_entropy, plot_buckets,
                                 rare_word_buckets)
    from rescore.models import load_checkpoint
    from rescore.models.cache import with_cache
    from rescore.train.ppl import score_text, target_words
    from rescore.vocab import EOS, read_sentences

    torch.set_num_threads(1)
    sentences = read_sentences(text)
    targets = target_words(sentences)
    counts: Counter = Counter()
    for s in read_sentences(train_text):
        counts.update(s)
    words = [w for w in targets if w != EOS]
    buckets = rare_word_buckets(counts, words, n=10)
    rows = []
    for spec in specs:
        name, ckpt = spec.split("=", 1)
        cache = None
        if "@" in ckpt:
            ckpt, c = ckpt.split("@")
            w, th, lam = c.split(",")
            cache = {"window": int(w), "theta": float(th), "lambda": float(lam)}
        model = load_checkpoint(ckpt)
        n_params = sum(p.numel() for p in model.parameters())
        if cache:
            model = with_cache(model, cache["window"], cache["theta"], cache["lambda"])
        t0 = time.perf_counter()
        kept = f"{prefix}.{name}.costs.json"
        key = {"checkpoint": ckpt, "mtime": os.path.getmtime(ckpt), "cache": cache, "text": text}
        old = read_json(kept) if os.path.exists(kept) else None
        if old is not None and old["key"] == key:
            costs = old["costs"]
        else:
            costs = score_text(model, sentences, 10, 100, "cpu", progress=False)
            write_json(kept, {"key": key, "costs": costs})
        ce = sum(costs) / len(costs)
        b = bucket_cross_entropy(words, [c for w, c in zip(targets, costs) if w != EOS], buckets)
        rows.append({"name": name, "checkpoint": ckpt, "cache": cache, "params": n_params,
                     "ppl": math.exp(ce), "cross_entropy": ce, "buckets": b,
                     "seconds": time.perf_counter() - t0})
        logging.info("%s: ppl %.2f (%.0f s)", name, math.exp(ce), rows[-1]["seconds"])
    base = rows[0]
    for r in rows:
        r["diff"] = bucket_ce_difference(r["buckets"], base["buckets"])
    head = ("| model | parameters | test ppl | "
            + " | ".join(f"Δce b{i}" for i in range(buckets.n)) + " |")
    lines = [head, "|" + "---|" * (3 + buckets.n)]
    for r in rows:
        lines.append(f"| {r['name']} | {r['params']:,} | {r['ppl']:.2f} | "
                     + " | ".join(f"{d['ce_diff']:+.3f}" for d in r["diff"]) + " |")
    lines.append("| tokens per bucket | | | " + " | ".join(str(d["tokens"]) for d in base["diff"])
                 + " |")
    rng = ["-".join(map(str, x)) if x else "-" for x in buckets.ranges]
    lines.append("| train count range | | | " + " | ".join(rng) + " |")
    table = "\n".join(lines)
    print(table)
    with atomic_output(prefix + ".md") as f:
        f.write(table + "\n")
    write_json(prefix + ".json", {"text": text, "train_text": train_text, "models": rows})
    others = rows[1:]
    if others:
        plot_buckets(others[0]["diff"], prefix + ".png", value="ce_diff",
                     others=[r["diff"] for r in others[1:]],
                     labels=[f"{r['name']} - {base['name']}" for r in others],
                     title="per-bucket cross-entropy difference (< 0: better than "
                           f"{base['name']})", ylabel="Δ cross-entropy (nats)")


if __name__ == "__main__":
    main()
