#!/usr/bin/env python3
"""Our engine against Kaldi's own scorer loop, on the same model and the same N-best lists.

Kaldi's ``steps/pytorchnn/compute_sentence_scores.py`` (Ke Li, 2020) scores an N-best list
utterance by utterance. This tool re-implements its loop (written from reading it, not copied)
around one of our checkpoints, so that only the scorer differs:

* read the hypotheses from a text file (``<utt>-<k> words``), group them by utterance;
* per utterance one padded batch ``<s> w1..wn`` -> ``w1..wn <s>`` (padding id 0), one forward
  over all of it, ``CrossEntropyLoss(reduction='none')`` on the (B*T, V) logits;
* an RNN's state carried from utterance to utterance: after each batch the model runs again on
  the first (rank-1) hypothesis, padded as in the batch, from row 0 of the batch's start state,
  and its end state starts every hypothesis of the next utterance (never reset);
* write every token cost with 4 decimals.

``--no-carry`` starts every utterance from the zero state instead: Kaldi's costs are then exactly
ours with ``--state-carry none`` (checked here to 1e-4 per token, the 4 decimals). Timed: the
Kaldi loop (reading, scoring, writing; the model already loaded) against ``rescore.engine``'s
fast engine (scoring only) on the same conversations, one thread each, medians.

    PYTHONPATH=. python tools/bench_kaldi_scorer.py --model exp/lm-long/lstm/model.pt
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="an LSTM checkpoint with a softmax head")
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--convs", type=int, default=1000, help="first N conversations")
    p.add_argument("--utts", type=int, default=1000, help="first M utterances of each")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def load_sents(path):
    """Kaldi's reading: utterance id = key without its last '-<k>'; a key alone = empty hyp."""
    sents = OrderedDict()
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.strip().split(" ", 1)
            key, hyp = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], " ")
            sents.setdefault(key.rsplit("-", 1)[0], []).append(hyp)
    return sents


def kaldi_scores(model, sents, carry: bool):
    """The loop of compute_sentence_scores.py around our LSTM: per-token costs per utterance."""
    import torch

    vocab = model.vocab
    V, eos, unk = len(vocab), vocab.eos_id, vocab.unk_id
    index = vocab.index
    criterion = torch.nn.CrossEntropyLoss(reduction="none")
    lstm = model.body.rnn  # batch_first, (layers, B, H) states

    def run(data, hidden):  # logits (B, T, V), final (h, c)
        out, hidden = lstm(model.embedding(data), hidden)
        return model.decoder(out), hidden

    result = OrderedDict()
    hidden = None
    with torch.no_grad():
        for idx, (key, hyps) in enumerate(sents.items()):
            B = len(hyps)
            inputs, targets = [], []
            for hyp in hyps:
                words = hyp.split()
                inputs.append([eos] + [index.get(w, unk) for w in words])
                targets.append([index.get(w, unk) for w in words] + [eos])
            lens = [len(x) for x in inputs]
            T = max(lens)
            data = torch.zeros(B, T, dtype=torch.long)
            target = torch.zeros(B, T, dtype=torch.long)
            for b, (x, y) in enumerate(zip(inputs, targets)):
                data[b, :len(x)] = torch.tensor(x)
                target[b, :len(y)] = torch.tensor(y)
            if carry and idx > 0:
                h, c = hidden
                start = (h.repeat(1, B, 1), c.repeat(1, B, 1))
            else:
                z = torch.zeros(lstm.num_layers, B, lstm.hidden_size)
                start = (z, z.clone())
            logits, _ = run(data, start)
            loss = criterion(logits.reshape(-1, V), target.reshape(-1)).view(B, T)
            if carry:  # the state after the rank-1 hypothesis, padding included (Kaldi's way)
                _, hidden = run(data[:1], (start[0][:, :1], start[1][:, :1]))
            scores = loss.numpy()
            result[key] = [scores[b, :lens[b]] for b in range(B)]
    return result


def write_scores(result, path):
    with open(path, "w", encoding="utf-8") as f:
        for key, rows in result.items():
            for k, row in enumerate(rows, 1):
                f.write(f"{key}-{k} " + "".join(f"{x:.4f} " for x in row) + "\n")


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    from rescore.combine import Params
    from rescore.engine import score_nbest_set
    from rescore.models import load_checkpoint
    from rescore.nbest import load_nbest_dir

    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.model, "cpu").eval()
    if model.config.arch != "lstm" or model.config.head != "softmax":
        raise SystemExit("error: Kaldi's scorer loop here needs an LSTM with a softmax head")
    nbest = load_nbest_dir(args.nbest_dir, args.data_dir)
    keep = [u.id for c in nbest.conversations[:args.convs] for u in c.utterances[:args.utts]]
    nbest = nbest.subset_utts(keep)
    tmp = Path(tempfile.mkdtemp(prefix="bench_kaldi."))
    text = tmp / "hyps.txt"  # what Kaldi's step hands its scorer: <utt>-<k> words, in order
    with open(text, "w", encoding="utf-8") as f:
        for u in nbest.utterances():
            for k, h in enumerate(u.hyps, 1):
                f.write(f"{u.id}-{k} {' '.join(h.words)}\n")
    n_hyps = sum(len(u.hyps) for u in nbest.utterances())
    params = Params(0.5, 9.5, 0.0)

    def kaldi(carry):
        t0 = time.perf_counter()
        res = kaldi_scores(model, load_sents(text), carry)
        write_scores(res, tmp / "scores.txt")
        return time.perf_counter() - t0, res

    def ours(carry, precision="fp32"):
        t0 = time.perf_counter()
        res = score_nbest_set(model, nbest, params, state_carry=carry, device="cpu",
                              precision=precision, progress=False)
        return time.perf_counter() - t0, res

    runs = {"kaldi, carry (as shipped)": lambda: kaldi(True),
            "kaldi, no carry": lambda: kaldi(False),
            "fast, carry rescored, fp32": lambda: ours("rescored"),
            "fast, carry none, fp32": lambda: ours("none"),
            "fast, carry rescored, bf16": lambda: ours("rescored", "bf16")}
    times = {name: [] for name in runs}
    out = {}
    for _ in range(args.repeat):  # interleaved rounds
        for name, fn in runs.items():
            t, out[name] = fn()
            times[name].append(t)
    # identical costs: Kaldi without carry == fast with carry none, token by token
    k, f = out["kaldi, no carry"], out["fast, carry none, fp32"]
    diff = max(abs(float(a) - b) for u in nbest.utterances() for j, h in enumerate(u.hyps)
               for a, b in zip(k[u.id][j], f[h.key]))
    base = statistics.median(times["kaldi, carry (as shipped)"])
    summary = {"model": args.model, "hyps": n_hyps, "utterances": len(keep),
               "threads": args.threads, "max_token_diff_no_carry": diff, "runs": {}}
    print(f"{n_hyps} hypotheses of {len(keep)} utterances, {args.threads} thread(s), medians of "
          f"{args.repeat}; Kaldi's loop without carry vs fast without carry: max |d| per token "
          f"{diff:.1e}")
    print(f"{'scorer':30} {'s':>8} {'hyps/s':>8} {'x Kaldi':>8}")
    for name, ts in times.items():
        t = statistics.median(ts)
        summary["runs"][name] = {"s": t, "all": ts, "hyps_per_s": n_hyps / t,
                                 "x_kaldi": base / t}
        print(f"{name:30} {t:8.1f} {n_hyps / t:8.0f} {base / t:8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
