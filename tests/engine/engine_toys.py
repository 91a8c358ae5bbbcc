"""Tiny language models written against rescore.models.base alone, for the engine tests.

They follow the base conventions (batch-first fixed-shape LMState, identities for the pointer)
and are written position by position, so they are obviously right, not fast:

* ToyLSTM: embedding -> LSTM -> tied softmax.
* ToyPointer: the same body with an implicit-cache-pointer-like head (Li et al. 2020): softmax
  over V + L, slot i of the last L tokens' identities, optional memory scalar m_k = v . h_k.
* ToyAttention: one causal self-attention layer over a key/value cache of fixed capacity with a
  validity mask (how a Transformer state fits LMState), softmax head.
* ToyVocab: the Vocabulary contract of the common brief (encode -> ids, identities; OOV
  identities len(vocab) + k in order of first sight).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import nn

from rescore.models.base import EMPTY, HeadOutput, LanguageModel, LMState


class ToyVocab:
    def __init__(self, words: List[str]):
        self.itos = ["<eos>", "<unk>"] + list(words)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.eos_id, self.unk_id = 0, 1
        self._oov: Dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: List[str]) -> Tuple[List[int], List[int]]:
        ids, ident = [], []
        for w in words:
            i = self.stoi.get(w)
            if i is None:
                ids.append(self.unk_id)
                ident.append(len(self.itos) + self._oov.setdefault(w, len(self._oov)))
            else:
                ids.append(i)
                ident.append(i)
        return ids, ident


class ToyLSTM(LanguageModel):
    def __init__(self, vocab: ToyVocab, hidden: int = 16, layers: int = 2, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.vocab = vocab
        self.config = {"hidden": hidden, "layers": layers}
        self.emb = nn.Embedding(len(vocab), hidden)
        self.rnn = nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.bias = nn.Parameter(torch.randn(len(vocab)) * 0.5)
        self.emb.weight.data.mul_(2.0)  # spread the distributions so differences show

    def initial_state(self, batch_size, device=None):
        L, H = self.rnn.num_layers, self.rnn.hidden_size
        z = torch.zeros(batch_size, L, H, device=device)
        return LMState({"h": z, "c": z.clone()})

    def body(self, ids, state):
        h0 = state.tensors["h"].transpose(0, 1).contiguous()
        c0 = state.tensors["c"].transpose(0, 1).contiguous()
        x = self.emb(ids)
        if torch.is_autocast_enabled("cpu"):  # as rescore.models.bodies.LSTMBody (AVX2 CPUs)
            dt = torch.get_autocast_dtype("cpu")
            x, h0, c0 = x.to(dt), h0.to(dt), c0.to(dt)
        out, (h, c) = self.rnn(x, (h0, c0))
        return out, {"h": h.transpose(0, 1), "c": c.transpose(0, 1)}

    def forward(self, ids, ident, state):
        out, st = self.body(ids, state)
        logits = out @ self.emb.weight.t() + self.bias
        return HeadOutput(log_vocab=logits.log_softmax(-1), hidden=out), LMState(st)


class ToyPointer(ToyLSTM):
    def __init__(self, vocab, hidden=16, layers=1, hist=5, memory=True, seed=1):
        super().__init__(vocab, hidden, layers, seed)
        self.L = hist
        self.memory = memory
        self.w_p = nn.Linear(hidden, hist, bias=False)
        self.v = nn.Linear(hidden, 1, bias=False)
        self.w_p.weight.data.mul_(3.0)

    def initial_state(self, batch_size, device=None):
        st = super().initial_state(batch_size, device)
        st.tensors["hist_ident"] = torch.full((batch_size, self.L), EMPTY, dtype=torch.long,
                                              device=device)
        st.tensors["hist_mem"] = torch.zeros(batch_size, self.L, device=device)
        return st

    def forward(self, ids, ident, state):
        out, st = self.body(ids, state)  # (B, T, H)
        hid, mem = state.tensors["hist_ident"], state.tensors["hist_mem"]
        B, T, _ = out.shape
        lv, ls, si = [], [], []
        for t in range(T):  # slide the window: drop the oldest slot, append x_t
            hid = torch.cat([hid[:, 1:], ident[:, t:t + 1]], dim=1)
            m = self.v(out[:, t]) if self.memory else torch.zeros(B, 1)
            mem = torch.cat([mem[:, 1:], m], dim=1)
            p = self.w_p(out[:, t]) + mem
            p = p.masked_fill(hid == EMPTY, float("-inf"))
            z = torch.cat([out[:, t] @ self.emb.weight.t() + self.bias, p], dim=-1).log_softmax(-1)
            lv.append(z[:, :len(self.vocab)])
            ls.append(z[:, len(self.vocab):])
            si.append(hid)
        st["hist_ident"], st["hist_mem"] = hid, mem
        return (HeadOutput(torch.stack(lv, 1), torch.stack(ls, 1), torch.stack(si, 1), out),
                LMState(st))


class ToyAttention(LanguageModel):
    """One causal attention layer + feed-forward; state = key/value cache of capacity C (the
    oldest entries drop out) with a validity mask and a position counter."""

    def __init__(self, vocab, hidden=16, capacity=12, seed=2):
        super().__init__()
        torch.manual_seed(seed)
        self.vocab, self.C, self.H = vocab, capacity, hidden
        self.config = {"hidden": hidden, "capacity": capacity}
        self.emb = nn.Embedding(len(vocab), hidden)
        self.pos = nn.Embedding(1024, hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.Tanh(), nn.Linear(2 * hidden, hidden))
        self.emb.weight.data.mul_(2.0)

    def initial_state(self, batch_size, device=None):
        return LMState({
            "k": torch.zeros(batch_size, self.C, self.H, device=device),
            "v": torch.zeros(batch_size, self.C, self.H, device=device),
            "valid": torch.zeros(batch_size, self.C, dtype=torch.bool, device=device),
            "pos": torch.zeros(batch_size, dtype=torch.long, device=device),
        })

    def forward(self, ids, ident, state):
        k, v, valid, pos = (state.tensors[n] for n in ("k", "v", "valid", "pos"))
        outs = []
        for t in range(ids.shape[1]):
            x = self.emb(ids[:, t]) + self.pos(pos.clamp(max=1023))
            q, kn, vn = self.qkv(x).chunk(3, dim=-1)
            k = torch.cat([k[:, 1:], kn.unsqueeze(1)], 1)
            v = torch.cat([v[:, 1:], vn.unsqueeze(1)], 1)
            valid = torch.cat([valid[:, 1:], torch.ones_like(valid[:, :1])], 1)
            att = (k @ q.unsqueeze(-1)).squeeze(-1) / self.H ** 0.5
            att = att.masked_fill(~valid, float("-inf")).softmax(-1)
            h = x + (att.unsqueeze(-1) * v).sum(1)
            outs.append(h + self.ff(h))
            pos = pos + 1
        out = torch.stack(outs, 1)
        logits = out @ self.emb.weight.t()
        return (HeadOutput(log_vocab=logits.log_softmax(-1), hidden=out),
                LMState({"k": k, "v": v, "valid": valid, "pos": pos}))
