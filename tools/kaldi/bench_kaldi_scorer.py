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
Kaldi loop (reading, scoring, writing; the model already loaded) against ``rescore.engine.score``'s
fast engine (scoring only) on the same conversations, one thread each, medians of the wall
time and of this process's CPU time (the steadier figure on a loaded machine).

Runs (``--runs``, interleaved in each round): ``kaldi`` (its carry, as shipped),
``kaldi-nocarry``, ``fast`` (carry rescored, exact), ``fast-nocarry``, ``fast-bf16``, ``none``
(carry rescored, ``--normalize none``: the target rows of the output layer only),
``none-nocarry``, ``none-bf16``.

A model other than an LSTM with a softmax head (e.g. the implicit pointer with memory) goes
through the same loop around its own forward: one padded batch per utterance, the whole
normalised output (``HeadOutput.log_prob`` of the targets, word identities as our engine
gives them), the rank-1 hypothesis run again for the carried state (``LMState``).

    PYTHONPATH=. python -m tools.kaldi.bench_kaldi_scorer --model exp/lm-long/lstm/model.pt
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from tools.common import SHARED_DATA  # noqa: E402
DATA = SHARED_DATA


RUNS = {  # name: (label, scorer, carry, precision, normalize)
    "kaldi": ("kaldi, carry (as shipped)", "kaldi", True, "fp32", "exact"),
    "kaldi-nocarry": ("kaldi, no carry", "kaldi", False, "fp32", "exact"),
    "fast": ("fast, carry rescored, fp32", "fast", "rescored", "fp32", "exact"),
    "fast-nocarry": ("fast, carry none, fp32", "fast", "none", "fp32", "exact"),
    "fast-bf16": ("fast, carry rescored, bf16", "fast", "rescored", "bf16", "exact"),
    "none": ("unnormalised, carry rescored, fp32", "fast", "rescored", "fp32", "none"),
    "none-nocarry": ("unnormalised, carry none, fp32", "fast", "none", "fp32", "none"),
    "none-bf16": ("unnormalised, carry rescored, bf16", "fast", "rescored", "bf16", "none"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a checkpoint (Kaldi's own loop: an LSTM "
                   "with a softmax head; other models through their forward)")
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--convs", type=int, default=1000, help="first N conversations")
    p.add_argument("--utts", type=int, default=1000, help="first M utterances of each")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", default="kaldi,kaldi-nocarry,fast,fast-nocarry,none",
                   help="comma list of " + ",".join(RUNS))
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

    if model.config.arch != "lstm" or model.config.head != "softmax" \
            or getattr(model.config, "output", "softmax") != "softmax":  # class output too
        return kaldi_scores_generic(model, sents, carry)
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


def kaldi_scores_generic(model, sents, carry: bool):
    """The same loop around any model's own forward (LMState carry, normalised output)."""
    import torch

    vocab = model.vocab
    eos = vocab.eos_id
    result = OrderedDict()
    end = None
    with torch.no_grad():
        for idx, (key, hyps) in enumerate(sents.items()):
            B = len(hyps)
            enc = [vocab.encode(hyp.split()) for hyp in hyps]
            lens = [len(ids) + 1 for ids, _ in enc]
            T = max(lens)
            data = torch.zeros(B, T, dtype=torch.long)
            ident = torch.zeros(B, T, dtype=torch.long)
            target = torch.zeros(B, T, dtype=torch.long)
            target_ident = torch.zeros(B, T, dtype=torch.long)
            for b, (ids, idents) in enumerate(enc):
                n = len(ids) + 1
                data[b, :n] = torch.tensor([eos] + ids)
                ident[b, :n] = torch.tensor([eos] + idents)
                target[b, :n] = torch.tensor(ids + [eos])
                target_ident[b, :n] = torch.tensor(idents + [eos])
            if carry and idx > 0:
                start = end.select(torch.zeros(B, dtype=torch.long))
            else:
                start = model.initial_state(B)
            out, _ = model(data, ident, start)
            loss = -out.log_prob(target, target_ident)
            if carry:  # the state after the rank-1 hypothesis, padding included (Kaldi's way)
                _, end = model(data[:1], ident[:1], start.select(torch.zeros(1, dtype=torch.long)))
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

    from rescore.nbest.combine import Params
    from rescore.jobs.nbest import score_nbest_set
    from rescore.models import load_checkpoint
    from rescore.nbest.sets import load_nbest_dir

    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.model, "cpu").eval()
    names = args.runs.split(",")
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"error: unknown run(s) {unknown}; known: {list(RUNS)}")
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

    def run(name):
        _, scorer, carry, precision, normalize = RUNS[name]
        t0, c0 = time.perf_counter(), time.process_time()
        if scorer == "kaldi":
            res = kaldi_scores(model, load_sents(text), carry)
            write_scores(res, tmp / "scores.txt")
        else:
            res = score_nbest_set(model, nbest, params, state_carry=carry, device="cpu",
                                  precision=precision, normalize=normalize, progress=False)
        return time.perf_counter() - t0, time.process_time() - c0, res

    times = {name: [] for name in names}
    cpu = {name: [] for name in names}
    out = {}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeat):  # interleaved rounds
        for name in names:
            t, c, out[name] = run(name)
            times[name].append(t)
            cpu[name].append(c)
            loads.append(os.getloadavg()[0])
    summary = {"model": args.model, "hyps": n_hyps, "utterances": len(keep),
               "threads": args.threads, "load_avg_1min": loads, "runs": {}}
    print(f"{n_hyps} hypotheses of {len(keep)} utterances, {args.threads} thread(s), medians of "
          f"{args.repeat}; 1-minute load average {min(loads):.1f} to {max(loads):.1f}")
    # identical costs: Kaldi without carry == fast with carry none, token by token
    for kn, fn in (("kaldi-nocarry", "fast-nocarry"), ("kaldi-nocarry", "none-nocarry"),
                   ("fast", "none")):
        if kn in out and fn in out:
            k, f = out[kn], out[fn]
            get = (lambda u, j, h: k[u.id][j]) if kn.startswith("kaldi") else (
                lambda u, j, h: k[h.key])
            diff = [abs(float(a) - b) for u in nbest.utterances() for j, h in enumerate(u.hyps)
                    for a, b in zip(get(u, j, h), f[h.key])]
            summary[f"token_diff_{kn}_vs_{fn}"] = {"max": max(diff),
                                                   "mean": statistics.fmean(diff)}
            print(f"{kn} vs {fn}: per token |d| max {max(diff):.1e}, mean "
                  f"{statistics.fmean(diff):.1e}")
    base = names[0]
    print(f"ratios against {RUNS[base][0]!r} (the first run)")
    print(f"{'scorer':36} {'wall s':>7} {'cpu s':>7} {'hyps/s':>8} {'x wall':>7} {'x cpu':>7}")
    for name in names:
        t, c = statistics.median(times[name]), statistics.median(cpu[name])
        summary["runs"][name] = {
            "label": RUNS[name][0], "s": t, "cpu_s": c, "all": times[name], "cpu_all": cpu[name],
            "hyps_per_s": n_hyps / t, "x_first_wall": statistics.median(times[base]) / t,
            "x_first_cpu": statistics.median(cpu[base]) / c}
        r = summary["runs"][name]
        print(f"{RUNS[name][0]:36} {t:7.1f} {c:7.1f} {n_hyps / t:8.0f} {r['x_first_wall']:7.2f} "
              f"{r['x_first_cpu']:7.2f}")
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, summary)


if __name__ == "__main__":
    main()
