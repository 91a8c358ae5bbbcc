"""A stand-in for Kaldi's ``steps/pytorchnn/compute_sentence_scores.py`` with an LSTM, for the
tests that run without a Kaldi checkout: its options, its input and output formats and its
arithmetic, written from their description (rescore/models/kaldi_lm.py, tools/kaldi/compare_pytorchnn.py),
not from its code.

* the vocabulary: the first field of each line, numbered by first occurrence;
* the infile: ``<utt>-<k> words``; the utterance is the key without its last ``-<k>``;
* per utterance one batch ``<s> w1..wn`` -> ``w1..wn <s>`` (``--sent-boundary``; ``--oov`` for
  a word outside the vocabulary), padded with id 0; the cost of every position is its
  cross-entropy, and the first n + 1 are written, 4 decimals each;
* the LSTM state: zero for the first utterance; for each later one the state after running
  the previous utterance's rank 1 (padded to its batch's length) from that batch's start state,
  along the whole infile.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict

import torch
from torch import nn


class RNNModel(nn.Module):
    """Kaldi's model.py parameter names: encoder, rnn (sequence-first LSTM), decoder (tied)."""

    def __init__(self, ntoken: int, nhid: int, nlayers: int):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight

    def forward(self, x, hidden):  # x (T, B) -> logits (T, B, V)
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden


def read_vocab(path) -> dict:
    vocab = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            vocab.setdefault(line.split()[0], len(vocab))
    return vocab


def read_hyps(path) -> "OrderedDict[str, list]":
    utts: "OrderedDict[str, list]" = OrderedDict()
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, *words = line.split()
            utts.setdefault(key.rsplit("-", 1)[0], []).append(words)
    return utts


def score(model: RNNModel, vocab: dict, utts, boundary: str = "<s>", oov: str = "<unk>") -> dict:
    """utt -> per-word costs of each hypothesis (unrounded), with the carry described above."""
    ids = lambda words: [vocab.get(w, vocab[oov]) for w in words]  # noqa: E731
    L, H = model.rnn.num_layers, model.rnn.hidden_size
    out, carried = {}, None
    with torch.no_grad():
        for utt, hyps in utts.items():
            inputs = [ids([boundary] + h) for h in hyps]
            targets = [ids(h + [boundary]) for h in hyps]
            B, T = len(hyps), max(len(x) for x in inputs)
            x = torch.zeros(T, B, dtype=torch.long)
            y = torch.zeros(T, B, dtype=torch.long)
            for b, (i, t) in enumerate(zip(inputs, targets)):
                x[:len(i), b] = torch.tensor(i)
                y[:len(t), b] = torch.tensor(t)
            if carried is None:
                start = (torch.zeros(L, B, H), torch.zeros(L, B, H))
            else:
                start = tuple(s.expand(L, B, H).contiguous() for s in carried)
            logits, _ = model(x, start)
            cost = nn.functional.cross_entropy(logits.reshape(T * B, -1), y.reshape(-1), reduction="none").view(T, B)
            _, carried = model(x[:, :1], tuple(s[:, :1].contiguous() for s in start))
            out[utt] = [cost[:len(inputs[b]), b].tolist() for b in range(B)]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("--infile", "--outfile", "--vocabulary", "--model-path"):
        p.add_argument(name, required=True)
    p.add_argument("--model", default="LSTM")
    for name in ("--emsize", "--nhid", "--nlayers", "--nhead"):
        p.add_argument(name, type=int, default=2)
    p.add_argument("--oov", default="<unk>")
    p.add_argument("--sent-boundary", default="<s>")
    args = p.parse_args(argv)
    assert args.model == "LSTM" and args.emsize == args.nhid, "an LSTM with tied weights only"
    vocab = read_vocab(args.vocabulary)
    model = RNNModel(len(vocab), args.nhid, args.nlayers)
    model.load_state_dict(torch.load(args.model_path, weights_only=True))
    costs = score(model.eval(), vocab, read_hyps(args.infile), args.sent_boundary, args.oov)
    with open(args.outfile, "w", encoding="utf-8") as f:
        for utt, rows in costs.items():
            for k, row in enumerate(rows, 1):
                f.write(f"{utt}-{k} " + "".join(f"{c:.4f} " for c in row) + "\n")


if __name__ == "__main__":
    main()
