"""Pointer baselines as heads of the one model interface: PSMM and the pointer-generator.

Both heads attend over the hidden states of the last L positions (slot i of position t holds
token x_{t-L+1+i}, its identity and the body output h_{t-L+1+i}; 0 = oldest, the last slot is
the current input x_t) and give the mixture

    P(w) = g_t P_vocab(w) + (1 - g_t) sum_{i : ident_i == ident(w)} a_t[i]

through ``HeadOutput`` (``log_vocab`` = log g_t + log_softmax(W h_t + b), ``log_slot`` =
log((1 - g_t) a_t)), so copying compares word identities and an out-of-vocabulary word in the
history gets its copy mass (See et al. 2017's extended vocabulary) with no extra code.

The history (identities, hidden states, and for coverage the accumulated attention of each
slot) is carried in the state dict across training chunks and across rescored utterances.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescore.models.base import EMPTY, HeadOutput, Part
from rescore.models.classes import ClassDecoder
from rescore.models.heads import OutputRows, log_norm, register_head
from rescore.models.history import slide


def band_index(T: int, L: int, device) -> Tensor:
    """(T, L) int64: column of slot i of position t in the (carried L + current T) sequence.

    The history of position t is the L positions ending at t; with the L carried slots in front,
    those are columns t + 1 .. t + L.
    """
    return (torch.arange(T, device=device).unsqueeze(1) + 1
            + torch.arange(L, device=device).unsqueeze(0))


class _HistoryHead(Part):
    """What PSMM and the pointer-generator share: the tied softmax and the hidden-state history.

    With a class decoder (``--output class``) P_vocab is the class-factored one, unchanged
    otherwise: log_vocab(w) = log gate + log P(c(w) | h) + log P(w | c(w), h)."""

    supports_class_output = True

    def __init__(self, config, decoder: nn.Linear):
        super().__init__()
        self.decoder = decoder  # tied output layer, weight (V, H), or a ClassDecoder
        if config.history < 1:
            raise ValueError(f"the {type(self).__name__} needs history >= 1")
        self.history = int(config.history)  # L
        words = decoder.words if isinstance(decoder, ClassDecoder) else decoder
        self.hidden_size = words.weight.shape[1]  # H

    def _weight(self) -> Tensor:
        """The word output rows (V, H): the state's dtype follows them."""
        d = self.decoder
        return (d.words if isinstance(d, ClassDecoder) else d).weight

    def _class_vocab(self, hidden: Tensor, log_gate: Tensor):
        """``vocab_score`` of the factored P_vocab shifted by log_gate (B, T)."""
        class_lp = F.log_softmax(self.decoder.class_logits(hidden).float(), dim=-1)
        return self.decoder.scorer(hidden, class_lp, log_gate)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        L, H = self.history, self.hidden_size
        dtype = self._weight().dtype
        return {
            "hist_ident": torch.full((batch_size, L), EMPTY, dtype=torch.long, device=device),
            "hist_h": torch.zeros(batch_size, L, H, dtype=dtype, device=device),
        }

    def _full(self, hidden: Tensor, ident: Tensor, state: Dict[str, Tensor]):
        """Carried slots followed by the current positions, and the next carried slots."""
        L = self.history
        full_h = torch.cat([state["hist_h"].to(hidden.dtype), hidden], dim=1)  # (B, L+T, H)
        slot_ident, new_ident = slide(state["hist_ident"], ident)  # (B, T, L), (B, L)
        # The carried slots keep the state's dtype (float32 under autocast too): LMState.cat
        # and .where combine states of different calls.
        new_h = full_h[:, -L:].to(state["hist_h"].dtype)
        return full_h, slot_ident, {"hist_ident": new_ident, "hist_h": new_h}


@register_head("psmm")
class PsmmHead(_HistoryHead):
    """Pointer sentinel mixture (Merity et al. 2017, §2.2-2.3, eqs. 3-7).

    q_t = tanh(W_q h_t + b_q); z_ti = q_t . h_i over the L history slots; sentinel score q_t . s;
    a_t = softmax([z_t; q_t . s]) (empty slots masked out); gate g_t = a_t[sentinel];
    P(w) = g_t P_vocab(w) + sum_{i: x_i = w} a_t[i].
    Extra parameters: H * H + 2 H.
    """

    def __init__(self, config, decoder: nn.Linear):
        super().__init__(config, decoder)
        H = self.hidden_size
        self.query = nn.Linear(H, H)  # W_q, b_q
        self.sentinel = nn.Parameter(torch.empty(H).uniform_(-0.1, 0.1))  # s

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor, state: Dict[str, Tensor],
                normalize: bool = True) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        """hidden (B, T, H) float, emb (B, T, E) (unused), ident (B, T) int64. Unnormalised
        (``normalize=False``): P_vocab without its normaliser, the L-way attention exact."""
        B, T, _ = hidden.shape
        L = self.history
        full_h, slot_ident, new_state = self._full(hidden, ident, state)
        q = torch.tanh(self.query(hidden))  # (B, T, H)
        scores_full = q @ full_h.transpose(1, 2)  # (B, T, L+T): q_t . h_j for every column j
        idx = band_index(T, L, hidden.device).expand(B, T, L)
        z = scores_full.gather(2, idx)  # (B, T, L)
        z = z.masked_fill(slot_ident == EMPTY, float("-inf"))
        sent = (q * self.sentinel).sum(-1, keepdim=True)  # (B, T, 1)
        log_a = torch.log_softmax(torch.cat([z, sent], dim=-1), dim=-1)  # (B, T, L+1)
        if isinstance(self.decoder, ClassDecoder):
            return HeadOutput(None, log_slot=log_a[..., :L], slot_ident=slot_ident, hidden=hidden,
                              vocab_score=self._class_vocab(hidden, log_a[..., L])), new_state
        if not normalize:
            return HeadOutput(None, log_slot=log_a[..., :L], slot_ident=slot_ident,
                              hidden=hidden, vocab_score=OutputRows(
                                  self.decoder, hidden, log_a[..., L])), new_state
        logits = self.decoder(hidden)  # (B, T, V)
        log_p_vocab = torch.log_softmax(logits, dim=-1)
        out = HeadOutput(log_vocab=log_a[..., L:] + log_p_vocab, log_slot=log_a[..., :L],
                         slot_ident=slot_ident, hidden=hidden,
                         log_norm=log_norm(logits, log_p_vocab))
        return out, new_state


@register_head("pointer-generator")
class PointerGeneratorHead(_HistoryHead):
    """Pointer-generator (See et al. 2017, eqs. 1, 8, 9, 10-13) as a language-model head.

    Additive attention over the L history slots,
        e_ti = v . tanh(W_h h_i + W_s h_t + w_c c_ti + b_attn),  a_t = softmax(e_t)   (eqs. 1, 11)
    context h*_t = sum_i a_ti h_i; generation switch
        p_gen = sigmoid(w_h* . h*_t + w_s . h_t + w_x . x_t + b_ptr)                  (eq. 8)
    with x_t the input embedding; P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: x_i = w} a_ti
    (eq. 9). With ``config.coverage``, c_ti is the attention that the token in slot i received
    at all earlier positions (eq. 10), it enters the attention through w_c, and the per-position
    loss term lambda * sum_i min(a_ti, c_ti) (eqs. 12-13, lambda = ``config.coverage_weight``)
    is returned in ``HeadOutput.aux_loss`` for the trainer. Coverage makes the attention a
    recurrence over positions, so that path loops over T (vectorized over batch and slots).
    Extra parameters: A (2H + 2 + [1 with coverage]) + 2H + E + 1 with attention size A = H
    (as in See et al.); E = H (tied embeddings).
    """

    def __init__(self, config, decoder: nn.Linear):
        super().__init__(config, decoder)
        H = self.hidden_size
        E = self.hidden_size  # tied embeddings: E == H
        A = H  # attention size
        self.coverage = bool(config.coverage)
        self.coverage_weight = float(config.coverage_weight)  # lambda
        self.attn_h = nn.Linear(H, A, bias=False)  # W_h
        self.attn_s = nn.Linear(H, A)  # W_s, b_attn
        self.attn_v = nn.Linear(A, 1, bias=False)  # v
        self.attn_c = nn.Parameter(torch.empty(A).uniform_(-0.1, 0.1)) if self.coverage else None
        self.gen_ctx = nn.Linear(H, 1, bias=False)  # w_h*
        self.gen_h = nn.Linear(H, 1, bias=False)  # w_s
        self.gen_x = nn.Linear(E, 1)  # w_x, b_ptr

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        state = super().init_state(batch_size, device)
        if self.coverage:
            state["hist_cov"] = torch.zeros(batch_size, self.history,
                                            dtype=self._weight().dtype, device=device)
        return state

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor, state: Dict[str, Tensor],
                normalize: bool = True) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        """hidden (B, T, H) float, emb (B, T, E) float, ident (B, T) int64. Unnormalised
        (``normalize=False``): P_vocab without its normaliser, the attention exact."""
        B, T, _ = hidden.shape
        L = self.history
        full_h, slot_ident, new_state = self._full(hidden, ident, state)
        empty = slot_ident == EMPTY  # (B, T, L)
        keys = self.attn_h(full_h).unfold(1, L, 1)[:, 1:].transpose(2, 3)  # (B, T, L, A) view
        pre = keys + self.attn_s(hidden).unsqueeze(2)  # (B, T, L, A)
        aux = None
        if self.coverage:
            # c depends on earlier attentions: a recurrence over positions.
            cov = torch.cat([state["hist_cov"].to(hidden.dtype),
                             hidden.new_zeros(B, T)], dim=1)  # (B, L+T) per column
            attn, aux_t = [], []
            # unbind, not pre[:, t]: each slice's backward would allocate a full-size zero grad.
            for t, pre_t in enumerate(pre.unbind(1)):
                c = cov[:, t + 1:t + 1 + L]  # (B, L)
                x = torch.addcmul(pre_t, c.unsqueeze(-1), self.attn_c)  # + w_c c_ti
                e = self.attn_v(torch.tanh(x)).squeeze(-1)  # (B, L)
                log_a_t = torch.log_softmax(e.masked_fill(empty[:, t], float("-inf")), dim=-1)
                a = log_a_t.exp()  # (B, L)
                aux_t.append(self.coverage_weight * torch.minimum(a, c).sum(-1))
                attn.append(log_a_t)
                cov = cov + F.pad(a, (t + 1, T - 1 - t))
            log_a = torch.stack(attn, dim=1)  # (B, T, L)
            aux = torch.stack(aux_t, dim=1)  # (B, T)
            new_state["hist_cov"] = cov[:, -L:].to(state["hist_cov"].dtype)
        else:
            e = self.attn_v(torch.tanh(pre)).squeeze(-1)  # (B, T, L)
            log_a = torch.log_softmax(e.masked_fill(empty, float("-inf")), dim=-1)
        idx = band_index(T, L, hidden.device).expand(B, T, L)
        # log_a's dtype, not hidden's: under autocast log_softmax is float32, hidden half.
        a_full = log_a.new_zeros(B, T, L + T).scatter(2, idx, log_a.exp())  # (B, T, L+T)
        context = a_full @ full_h  # (B, T, H): h*_t
        gen = (self.gen_ctx(context) + self.gen_h(hidden) + self.gen_x(emb))  # (B, T, 1)
        log_slot = F.logsigmoid(-gen) + log_a  # -inf for empty slots
        if isinstance(self.decoder, ClassDecoder):
            score = self._class_vocab(hidden, F.logsigmoid(gen).squeeze(-1))
            return HeadOutput(None, log_slot=log_slot, slot_ident=slot_ident, hidden=hidden,
                              aux_loss=aux, vocab_score=score), new_state
        if not normalize:
            score = OutputRows(self.decoder, hidden, F.logsigmoid(gen).squeeze(-1))
            return HeadOutput(None, log_slot=log_slot, slot_ident=slot_ident, hidden=hidden,
                              aux_loss=aux, vocab_score=score), new_state
        logits = self.decoder(hidden)  # (B, T, V)
        log_p_vocab = torch.log_softmax(logits, dim=-1)
        out = HeadOutput(log_vocab=F.logsigmoid(gen) + log_p_vocab, log_slot=log_slot,
                         slot_ident=slot_ident, hidden=hidden, aux_loss=aux,
                         log_norm=log_norm(logits, log_p_vocab))
        return out, new_state
