"""Neural cache (Grave, Joulin, Usunier 2017) as a test-time wrapper around any LanguageModel.

The cache stores pairs (h_i, x_{i+1}): the body output that predicted a word and the word that
came (Grave et al. 2017, §3, eq. 2),

    P_cache(w | h_t) ∝ sum_{i < t, x_{i+1} = w} exp(theta h_t . h_i),

over the last L pairs, and the model's distribution becomes (eq. 4)

    P(w) = (1 - lambda) P_model(w) + lambda P_cache(w).

Pairing h_i with the word that followed it (rather than with the word it consumed) is the paper's
definition: the cache proposes "what came after a context like this one". The pair completed
by input x_t is (h_{t-1}, x_t), so the cache window of position t is the L inputs ending at t,
each with the hidden state of the position before it; the last hidden state of a call waits in
the state for the next call's first input.

P_model is the wrapped model's whole mixture (softmax, or the implicit pointer's V + L output,
or any other head), so the wrapper only rescales the wrapped ``HeadOutput`` by (1 - lambda) and
appends its L cache slots, weighted lambda P_cache, to ``log_slot``/``slot_ident``: training
code, perplexity and the rescoring engine need no special case. At a position whose cache is
still empty (start of a conversation) the model's distribution is used alone.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from rescore.models.base import EMPTY, HeadOutput, LanguageModel, LMState, compact_store
from rescore.progress import Progress

PREFIX = "ncache_"  # the wrapper's keys in LMState; the wrapped model keeps its own
# most pairs a state keeps of its own before they move to a shared store row: above the length
# of nearly every hypothesis, so an utterance's words stay the state's own (and can be left out
# of the history at the carry: rescore.models.base.forget_inputs)
RECENT = 128


class NeuralCacheLM(LanguageModel):
    """A LanguageModel that adds a neural cache of window L to another LanguageModel.

    inner:  a trained model whose forward returns ``HeadOutput.hidden`` (B, T, H), the query.
    window: L, number of (hidden state, next word) pairs kept.
    theta:  flatness of the cache distribution (Grave et al. 2017, eq. 2).
    lam:    interpolation weight lambda in [0, 1) of the cache (eq. 4).
    The window lives in two parts. The pairs before the current utterance are a row of a store
    shared by every state that has them (``LMState.stores``: the nodes of an utterance's trie
    all start from the same carried window, 2 MB a row at L = 2000, H = 256, which is then never
    copied per node); the pairs since then, at most R = min(L, RECENT), are each state's own.
    An input ``<eos>`` (the start of an utterance) moves a state's own pairs into a new store
    row, and so does having more than R of them.

    State keys added: ``ncache_h`` (B, R, H) the state's own keys h_i and ``ncache_ident``
    (B, R) the identities of x_{i+1} (EMPTY = no pair), both right-aligned (slot R - 1 the
    latest pair); ``ncache_n`` (B,) how many of them there are; ``ncache_base_h`` and
    ``ncache_base_ident`` (B,) the row of the stores of the same names ((S, L, H) keys and
    (S, L) identities, right-aligned) that holds the window before them;
    ``ncache_last_h`` (B, H) hidden state of the last position, ``ncache_last_ok`` (B,) bool:
    whether ``ncache_last_h`` belongs to a real position.
    """

    def __init__(self, inner: LanguageModel, window: int, theta: float, lam: float):
        super().__init__()
        if window < 1:
            raise ValueError(f"neural cache window must be >= 1, got {window}")
        if not 0.0 <= lam < 1.0:
            raise ValueError(f"neural cache lambda must be in [0, 1), got {lam}")
        self.inner = inner
        self.window = int(window)
        self.theta = float(theta)
        self.lam = float(lam)
        self.config = inner.config
        self.vocab = inner.vocab
        self.recent = min(self.window, RECENT)

    # (the engine's view of the model is the inner model's: rescore.models.base.LanguageModel)
    @property
    def self_norm(self) -> float:
        return self.inner.self_norm

    @property
    def class_output(self) -> bool:
        return self.inner.class_output

    @property
    def head_name(self) -> str:
        return self.inner.head_name

    def initial_state(self, batch_size: int, device=None) -> LMState:
        state = self.inner.initial_state(batch_size, device)
        for k in state.tensors:
            if k.startswith(PREFIX):
                raise ValueError(f"state key {k!r} of the wrapped model clashes with the cache")
        H = self.inner.hidden_size
        L, R = self.window, self.recent
        dtype = next(self.inner.parameters()).dtype
        row = torch.zeros(batch_size, dtype=torch.long, device=device)
        state.tensors.update({
            PREFIX + "h": torch.zeros(batch_size, R, H, dtype=dtype, device=device),
            PREFIX + "ident": torch.full((batch_size, R), EMPTY, dtype=torch.long, device=device),
            PREFIX + "n": row.clone(),
            PREFIX + "base_h": row.clone(),
            PREFIX + "base_ident": row,
            PREFIX + "last_h": torch.zeros(batch_size, H, dtype=dtype, device=device),
            PREFIX + "last_ok": torch.zeros(batch_size, dtype=torch.bool, device=device),
        })
        state.stores.update({
            PREFIX + "base_h": torch.zeros(1, L, H, dtype=dtype, device=device),
            PREFIX + "base_ident": torch.full((1, L), EMPTY, dtype=torch.long, device=device),
        })
        return state

    @property
    def hidden_size(self) -> int:
        return self.inner.hidden_size

    @property
    def supports_unnormalized(self) -> bool:
        return self.inner.supports_unnormalized

    @property
    def takes_inference(self) -> bool:
        return self.inner.takes_inference

    def forward(self, ids: Tensor, ident: Tensor, state: LMState, normalize: bool = True,
                inference=None) -> tuple[HeadOutput, LMState]:
        """ids, ident (B, T) int64 -> the cached mixture at each position and the next state.
        With ``normalize=False`` the wrapped model's part is unnormalised (its Z left out; for
        a self-normalised model Z ~ 1) and the cache's part stays exact."""
        own = {k: v for k, v in state.tensors.items() if k.startswith(PREFIX)}
        stores = {k: v for k, v in state.stores.items() if k.startswith(PREFIX)}
        inner_state = LMState({k: v for k, v in state.tensors.items() if not k.startswith(PREFIX)},
                              {k: v for k, v in state.stores.items() if not k.startswith(PREFIX)})
        out, inner_next = self.inner(ids, ident, inner_state,
                                     **({} if normalize else {"normalize": False}),
                                     **({} if inference is None else {"inference": inference}))
        if out.hidden is None:
            raise ValueError("the wrapped model gives no HeadOutput.hidden; the cache needs it")
        hidden = out.hidden  # (B, T, H)
        B, T, H = hidden.shape
        L, R = self.window, self.recent
        dev = hidden.device

        # An utterance starts: the state's own pairs move to a store row first.
        start = (ids[:, 0] == self.vocab.eos_id) & (own[PREFIX + "n"] > 0)
        if bool(start.any()):
            own, stores = self._fold(own, stores, start.nonzero().squeeze(1))
        n = own[PREFIX + "n"]  # (B,)

        # Pair completed by input t: key h_{t-1} (the carried last hidden state for t = 0).
        prev_h = torch.cat([own[PREFIX + "last_h"].to(hidden.dtype).unsqueeze(1),
                            hidden[:, :-1]], dim=1)  # (B, T, H)
        prev_ok = torch.cat([own[PREFIX + "last_ok"].unsqueeze(1),
                             prev_h.new_ones(B, T - 1, dtype=torch.bool)], dim=1)  # (B, T)
        new_ident = ident.masked_fill(~prev_ok, EMPTY)

        # The window of position t: the store row's pairs but the n + t + 1 oldest, the state's
        # own n pairs, and this call's pairs up to t; each part's slots outside it are EMPTY.
        t = torch.arange(T, device=dev)
        j = torch.arange(L, device=dev)
        r = torch.arange(R, device=dev)
        base_ok = j.view(1, 1, L) >= (n.view(B, 1, 1) + t.view(1, T, 1) + 1)
        rec_ok = ((r.view(1, 1, R) >= (R - n).view(B, 1, 1))
                  & ((R - r).view(1, 1, R) + t.view(1, T, 1) <= L - 1))
        new_ok = (t.view(1, T) <= t.view(T, 1)) & (t.view(T, 1) - t.view(1, T) <= L - 1)  # (t, s)
        base_ident = stores[PREFIX + "base_ident"].index_select(0, own[PREFIX + "base_ident"])
        slot_ident = torch.cat([
            base_ident.unsqueeze(1).expand(B, T, L).masked_fill(~base_ok, EMPTY),
            own[PREFIX + "ident"].unsqueeze(1).expand(B, T, R).masked_fill(~rec_ok, EMPTY),
            new_ident.unsqueeze(1).expand(B, T, T).masked_fill(~new_ok, EMPTY)], dim=2)  # (B, T, L+R+T)
        scores = self.theta * torch.cat([
            self._store_scores(hidden, stores[PREFIX + "base_h"], own[PREFIX + "base_h"]),
            hidden @ own[PREFIX + "h"].to(hidden.dtype).transpose(1, 2),
            hidden @ prev_h.transpose(1, 2)], dim=2)  # theta h_t . h_i
        empty = slot_ident == EMPTY
        any_pair = ~empty.all(-1, keepdim=True)  # (B, T, 1)
        # A finite fill keeps log_softmax finite (and its gradient NaN-free) on empty rows.
        log_cache = torch.log_softmax(scores.masked_fill(empty, torch.finfo(scores.dtype).min),
                                      dim=-1)
        log_cache = log_cache.masked_fill(empty, float("-inf"))
        log_lam = torch.where(any_pair, hidden.new_tensor(math.log(self.lam) if self.lam > 0
                                                          else float("-inf")),
                              hidden.new_tensor(float("-inf")))  # (B, T, 1)
        log_keep = torch.where(any_pair, hidden.new_tensor(math.log1p(-self.lam)),
                               hidden.new_tensor(0.0))

        log_slot = [log_lam + log_cache]
        slot_ids = [slot_ident]
        if out.log_slot is not None:
            log_slot.insert(0, log_keep + out.log_slot)
            slot_ids.insert(0, out.slot_ident)
        vocab_score = None
        if out.log_vocab is None:  # unnormalised: shift the wrapped rows by log(1 - lambda)
            inner_score, keep = out.vocab_score, log_keep.squeeze(-1)  # (B, T)

            def vocab_score(b, t, v):
                return inner_score(b, t, v) + keep[b, t].float()
        mixed = HeadOutput(log_vocab=None if out.log_vocab is None else log_keep + out.log_vocab,
                           log_slot=torch.cat(log_slot, dim=-1),
                           slot_ident=torch.cat(slot_ids, dim=-1),
                           hidden=hidden, aux_loss=out.aux_loss, log_norm=out.log_norm,
                           vocab_score=vocab_score)

        # This call's pairs join the state's own; beyond R they all move to a store row.
        dtype = own[PREFIX + "h"].dtype
        nxt = dict(own)
        nxt[PREFIX + "h"] = torch.cat([own[PREFIX + "h"], prev_h.to(dtype)], 1)[:, -R:]
        nxt[PREFIX + "ident"] = torch.cat([own[PREFIX + "ident"], new_ident], 1)[:, -R:]
        nxt[PREFIX + "n"] = n + T
        full = n + T > R
        if bool(full.any()):
            nxt, stores = self._fold(own, stores, full.nonzero().squeeze(1), nxt,
                                     prev_h.to(dtype), new_ident)
        nxt[PREFIX + "last_h"] = hidden[:, -1].to(own[PREFIX + "last_h"].dtype)
        nxt[PREFIX + "last_ok"] = torch.ones_like(own[PREFIX + "last_ok"])
        return mixed, LMState({**inner_next.tensors, **nxt}, {**inner_next.stores, **stores})

    def _store_scores(self, hidden: Tensor, store: Tensor, rows: Tensor) -> Tensor:
        """hidden (B, T, H) . the keys of each row's store row ``store[rows]`` ((S, L, H),
        (B,)) -> (B, T, L), one product per distinct store row (the states of an utterance's
        trie share theirs), without gathering a copy of the keys per row."""
        uniq, inv = torch.unique(rows, return_inverse=True)
        if uniq.numel() == 1:
            return hidden @ store[uniq[0]].to(hidden.dtype).t()
        out = None
        for k, u in enumerate(uniq.tolist()):
            sel = (inv == k).nonzero().squeeze(1)
            part = hidden[sel] @ store[u].to(hidden.dtype).t()  # (autocast picks its dtype)
            if out is None:
                out = part.new_empty(hidden.shape[0], hidden.shape[1], store.shape[1])
            out[sel] = part
        return out

    def _fold(self, own, stores, rows: Tensor, nxt=None, new_h: Optional[Tensor] = None,
              new_ident: Optional[Tensor] = None):
        """Rows ``rows`` of the state: the last L of their store row's pairs, their own n pairs
        and (``new_h``/``new_ident`` (B, T, H)/(B, T): this call's) become a new store row, and
        they keep no pairs of their own. Returns (the state's tensors, the stores); the stores
        keep only the rows still referred to."""
        nxt = dict(own if nxt is None else nxt)
        L, R = self.window, self.recent
        n = own[PREFIX + "n"][rows]  # (F,)
        F = rows.numel()
        parts_h = [stores[PREFIX + "base_h"].index_select(0, own[PREFIX + "base_h"][rows]),
                   own[PREFIX + "h"][rows]]
        parts_i = [stores[PREFIX + "base_ident"].index_select(0, own[PREFIX + "base_ident"][rows]),
                   own[PREFIX + "ident"][rows]]
        T = 0
        if new_h is not None:
            T = new_h.shape[1]
            parts_h.append(new_h[rows])
            parts_i.append(new_ident[rows])
        seq_h = torch.cat([p.to(parts_h[0].dtype) for p in parts_h], 1)  # (F, L + R + T, H)
        seq_i = torch.cat(parts_i, 1)
        # the last L of the valid positions: the store row's L, own slots R - n .. R - 1, the T new
        p = (n + T).view(F, 1) + torch.arange(L, device=rows.device).view(1, L)  # (F, L)
        nn = n.view(F, 1)
        pos = torch.where(p < L, p, torch.where(p < L + nn, p + (R - nn), L + R + (p - L - nn)))
        folded_h = seq_h.gather(1, pos.unsqueeze(-1).expand(F, L, seq_h.shape[2]))
        folded_i = seq_i.gather(1, pos)
        for key, folded in (("base_h", folded_h), ("base_ident", folded_i)):
            store, refs = stores[PREFIX + key], nxt[PREFIX + key].clone()
            refs[rows] = len(store) + torch.arange(F, device=rows.device)
            stores = dict(stores)
            stores[PREFIX + key], nxt[PREFIX + key] = compact_store(torch.cat([store, folded.to(store.dtype)]), refs)
        nxt[PREFIX + "h"] = nxt[PREFIX + "h"].clone()
        nxt[PREFIX + "h"][rows] = 0
        nxt[PREFIX + "ident"] = nxt[PREFIX + "ident"].clone()
        nxt[PREFIX + "ident"][rows] = EMPTY
        nxt[PREFIX + "n"] = nxt[PREFIX + "n"].clone()
        nxt[PREFIX + "n"][rows] = 0
        return nxt, stores


def with_cache(model: LanguageModel, window: int, theta: float, lam: float) -> LanguageModel:
    """``model`` with a neural cache of ``window`` pairs, or ``model`` itself when window is 0."""
    if window <= 0:
        return model
    return NeuralCacheLM(model, window, theta, lam)


@torch.no_grad()
def tune_cache(model: LanguageModel, streams, bptt: int, windows: Sequence[int],
               thetas: Sequence[float], lambdas: Sequence[float], device="cpu",
               progress: bool = True) -> List[Dict[str, float]]:
    """Cross-entropy of ``model`` with a neural cache, for every (window, theta, lambda).

    ``streams`` (rescore.train.data.Streams) are scored once, as ``rescore.train.ppl`` scores them (side by
    side, state carried over BPTT chunks of ``bptt`` columns); the cache mixture of each grid
    point is then computed from the kept log P_model and hidden states, so a grid costs one pass
    of the model. Each result equals what ``NeuralCacheLM`` gives (the tests check it).
    Returns [{"window", "theta", "lambda", "cross_entropy", "ppl"}...] in grid order.
    """
    was_training = model.training
    model.eval()
    state = model.initial_state(streams.ids.shape[0], device)
    lps, hs = [], []
    for x, xi, y, yi, _ in Progress(streams.chunks(bptt), total=streams.n_chunks(bptt),
                                    desc="scoring", unit="chunk", enabled=progress, leave=False):
        out, state = model(x.to(device), xi.to(device), state)
        if out.hidden is None:
            raise ValueError("the model gives no HeadOutput.hidden; the cache needs it")
        lps.append(out.log_prob(y.to(device), yi.to(device)).double().cpu())
        hs.append(out.hidden.double().cpu())
    model.train(was_training)
    lp_model = torch.cat(lps, 1)  # (B, N)
    hidden = torch.cat(hs, 1)  # (B, N, H)
    x_ident, y_ident, mask = streams.ident, streams.target_ident, streams.mask  # (B, N)
    B, N = x_ident.shape
    n_targets = int(mask.sum())
    results = []
    for W in windows:
        # Cache log-probabilities of every target, for every theta: (n_theta, B, N).
        log_cache = torch.full((len(thetas), B, N), float("-inf"), dtype=torch.float64)
        has_pair = torch.zeros(B, N, dtype=torch.bool)
        # W leading blanks: pair i = (h_i, x_{i+1}) sits at column i + W; no pair for i < 0.
        hp = torch.cat([hidden.new_zeros(B, W, hidden.shape[2]), hidden], 1)  # (B, W+N, H)
        xp = torch.cat([x_ident.new_full((B, W), EMPTY), x_ident], 1)  # (B, W+N)
        okp = torch.cat([torch.zeros(B, W, dtype=torch.bool),
                         torch.ones(B, N, dtype=torch.bool)], 1)  # (B, W+N): a real h_i
        block = 512
        for t0 in range(0, N, block):
            t1 = min(N, t0 + block)
            n = t1 - t0
            band = (torch.arange(n).unsqueeze(1) + torch.arange(W).unsqueeze(0)).expand(B, n, W)
            scores = (hidden[:, t0:t1] @ hp[:, t0:t1 + W - 1].transpose(1, 2)).gather(2, band)
            valid = okp[:, t0:t1 + W - 1].unsqueeze(1).expand(B, n, -1).gather(2, band)
            nxt = xp[:, t0 + 1:t1 + W].unsqueeze(1).expand(B, n, -1).gather(2, band)
            match = valid & (nxt == y_ident[:, t0:t1].unsqueeze(-1))  # (B, n, W)
            any_valid = valid.any(-1)
            has_pair[:, t0:t1] = any_valid
            for k, theta in enumerate(thetas):
                s = (theta * scores).masked_fill(~valid, float("-inf"))
                hit = torch.logsumexp(s.masked_fill(~match, float("-inf")), -1)
                norm = torch.logsumexp(s.masked_fill(~any_valid.unsqueeze(-1), 0.0), -1)
                log_cache[k, :, t0:t1] = torch.where(any_valid, hit - norm,
                                                     hit.new_tensor(float("-inf")))
        for k, theta in enumerate(thetas):
            for lam in lambdas:
                mixed = torch.logaddexp(math.log1p(-lam) + lp_model,
                                        (math.log(lam) if lam > 0 else float("-inf"))
                                        + log_cache[k])
                lp = torch.where(has_pair, mixed, lp_model)
                ce = float(-lp[mask].sum()) / n_targets
                results.append({"window": int(W), "theta": float(theta), "lambda": float(lam),
                                "cross_entropy": ce, "ppl": math.exp(ce)})
    return results
