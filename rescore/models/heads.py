"""Output heads: from the body output to the mixture of rescore.models.base.HeadOutput.

A head is a ``rescore.models.base.Part`` (an nn.Module) registered in ``HEADS`` under its name and built as
``HeadClass(config, decoder)``, where ``decoder`` is the output ``nn.Linear`` (V x H, weight tied
with the input embedding). It offers

* ``init_state(batch_size, device) -> dict[str, Tensor]``: its carried history, batch-first
  (e.g. ``hist_ident`` (B, L) int64 filled with EMPTY);
* ``forward(hidden (B, T, H), emb (B, T, E), ident (B, T), state, normalize=True)
  -> (HeadOutput, new state)``, where ``state`` is the model's whole state dict and the head
  reads and returns only its keys. With ``normalize=False`` the head leaves its V-sized
  normaliser out and computes no (B, T, V) tensor (``HeadOutput.vocab_score``); otherwise it
  returns ``HeadOutput.log_norm`` = log Z, which self-normalised training drives to 0.

A head with ``supports_class_output`` also takes a ``rescore.models.classes.ClassDecoder`` as
``decoder`` (``--output class``): its P_vocab is then the class-factored one, exact, given only
through ``HeadOutput.vocab_score`` (one target costs (C + |c(w)|) x H). The softmax head's
also self-normalises: ``log_norm`` is the class softmax's log Z, ``target_norm`` gives the
within-class one, and ``normalize=False`` reads the target's two rows only (2 x H).
``extra_classes``: rows the head adds to the class layer (the implicit pointer's history slots
are one more class).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescore.models.base import EMPTY, HeadOutput, Part
from rescore.models.classes import ClassDecoder
from rescore.models.history import slide

HEADS: Dict[str, type] = {}


def register_head(name: str) -> Callable[[type], type]:
    """Class decorator: make a head available as ``ModelConfig.head = name``."""

    def add(cls: type) -> type:
        if not issubclass(cls, Part):
            raise TypeError(f"head {name!r}: a rescore.models.base.Part (what it declares to the engine)")
        HEADS[name] = cls
        return cls

    return add


def log_norm(logits: Tensor, log_probs: Tensor) -> Tensor:
    """log Z of ``log_probs = logits - log Z`` ((..., V) each) -> (...,) float32.

    logits[k] - log_probs[k] for one k (column 0, ``<eos>``: frequent, so both terms are O(1)
    to O(10) and the difference is exact to rounding); its gradient is that of logsumexp,
    softmax(logits), without another pass over V in the forward."""
    return logits[..., 0].float() - log_probs[..., 0].float()


class OutputRows:
    """``HeadOutput.vocab_score`` of unnormalised output: for (E,) rows b, positions t and ids,
    W[ids] . hidden[b, t] + bias[ids] (+ offset[b, t]) in float32, (E,). Only the E rows of the
    output layer that are asked for are read: E x H multiply-adds, not (B x T) x V x H. (An
    object, not a closure, so that the engine can score the same rows with its kernel:
    rescore.engine.lstm_steps.rows_scorer.)"""

    def __init__(self, decoder: nn.Linear, hidden: Tensor, offset: Optional[Tensor] = None):
        self.decoder, self.hidden, self.offset = decoder, hidden, offset

    def __call__(self, b: Tensor, t: Tensor, ids: Tensor) -> Tensor:
        h = self.hidden[b, t].float()  # (E, H)
        s = torch.einsum("eh,eh->e", h, self.decoder.weight[ids].float()) + self.decoder.bias[ids].float()
        if self.offset is not None:
            s = s + self.offset[b, t].float()
        return s  # (E,)



@register_head("softmax")
class SoftmaxHead(Part):
    """y_t = softmax(W h_t + b): no history, no state. With a class decoder
    y_t(w) = softmax(U h_t + d)[c(w)] softmax_{c(w)}(W h_t + b)[w] (rescore.models.classes).
    The engine reads it through its own kernels (rescore.engine.lstm_steps.softmax_output)."""

    supports_class_output = True

    def __init__(self, config, decoder: nn.Linear):
        super().__init__()
        self.decoder = decoder

    @property
    def softmax_output(self) -> str:
        return "class" if isinstance(self.decoder, ClassDecoder) else "softmax"

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        return {}

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor, state: Dict[str, Tensor],
                normalize: bool = True) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        if isinstance(self.decoder, ClassDecoder):
            if not normalize:  # self-normalised: the target's class and word rows only
                return HeadOutput(None, hidden=hidden, vocab_score=self.decoder.raw_scorer(hidden)), {}
            cl = self.decoder.class_logits(hidden).float()  # (B, T, C)
            class_lp = F.log_softmax(cl, dim=-1)
            return HeadOutput(None, hidden=hidden, vocab_score=self.decoder.scorer(hidden, class_lp),
                              log_norm=log_norm(cl, class_lp),  # the class softmax's log Z
                              target_norm=self.decoder.scorer_with_norm(hidden, class_lp)), {}
        if not normalize:
            return HeadOutput(None, hidden=hidden, vocab_score=OutputRows(self.decoder, hidden)), {}
        logits = self.decoder(hidden)  # (B, T, V)
        log_vocab = F.log_softmax(logits, dim=-1)  # (B, T, V)
        return HeadOutput(log_vocab, hidden=hidden, log_norm=log_norm(logits, log_vocab)), {}


class JointLogSoftmax(torch.autograd.Function):
    """log_softmax over the concatenation [a ; b] of (..., V) and (..., L), returned as two parts.

    Same values and gradients as ``log_softmax(cat([a, b], -1))`` split in two, without building
    the (..., V + L) tensor: with V ~ 10^4 the copy of the largest tensor and of its gradient
    cost ~20 % of an LSTM training step. ``b`` may hold -inf (masked slots); ``a`` is finite.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
        if a.dtype in (torch.float16, torch.bfloat16):  # autocast: normalise in float32
            a, b = a.float(), b.float()
        log_q = F.log_softmax(a, dim=-1)  # fused kernel, one pass over the large part
        # logsumexp(a) = a[k] - log_q[k] for any k; at the argmax both are O(1): exact to rounding
        k = a.argmax(dim=-1, keepdim=True)
        lse_a = a.gather(-1, k) - log_q.gather(-1, k)  # (..., 1)
        log_z = torch.logaddexp(lse_a, torch.logsumexp(b, dim=-1, keepdim=True))  # (..., 1)
        out_a = log_q.add_(lse_a - log_z)
        out_b = b - log_z
        ctx.save_for_backward(out_a, out_b)
        return out_a, out_b

    @staticmethod
    def backward(ctx, g_a: Tensor, g_b: Tensor) -> Tuple[Tensor, Tensor]:
        out_a, out_b = ctx.saved_tensors
        if g_a is None:
            g_a = torch.zeros_like(out_a)
        if g_b is None:
            g_b = torch.zeros_like(out_b)
        # d log_softmax over both parts: g - y * (sum g_a + sum g_b). The fused kernel of
        # log_softmax's backward gives g_a - y_a * sum(g_a'); putting sum(g_b) into one entry j
        # of g_a' (and taking it out of the result) adds the slots' share without another
        # pass of exp over V.
        s_b = g_b.sum(-1, keepdim=True)  # (..., 1)
        j = torch.zeros_like(s_b, dtype=torch.long)
        g = g_a.clone()
        g.scatter_add_(-1, j, s_b)
        grad_a = torch._log_softmax_backward_data(g, out_a, -1, out_a.dtype)
        grad_a.scatter_add_(-1, j, -s_b)
        total = g_a.sum(-1, keepdim=True) + s_b
        grad_b = torch.addcmul(g_b, out_b.exp(), total, value=-1.0)
        return grad_a, grad_b


@register_head("pointer")
class PointerHead(Part):
    """The implicit cache pointer of Li, Povey and Khudanpur (Interspeech 2020).

    z_t = [W h_t + b ; W_p h_t + m_hist] over V + L, y_t = softmax(z_t); slot i of position t holds
    x_{t-L+1+i}. With memory augmentation, m_k = v . h_k is computed at every position k, carried
    in the history (``hist_mem``) and added to the logit of the slot holding x_k. Empty slots are
    masked out. Extra parameters: W_p (L x H) and v (H): (L + 1) * H.

    With a class decoder the L slots are class C + 1 of the class softmax: P(slot i) =
    P(ptr | h_t) softmax(slot logits)_i, P(w) = P(c(w) | h_t) P(w | c(w), h_t) (the joint V + L
    softmax factored, the slots one more class); while every slot is empty (a conversation's
    start) the pointer class is masked out, so P stays normalised. Extra parameters: + H + 1.
    """

    supports_class_output = True
    extra_classes = 1  # the pointer class

    def __init__(self, config, decoder: nn.Linear):
        super().__init__()
        if config.history < 1:
            raise ValueError("the pointer head needs history >= 1")
        self.decoder = decoder
        self.history = config.history
        self.memory_aug = config.memory_aug
        self.pointer = nn.Linear(config.hidden, config.history, bias=False)  # W_p
        self.memory = nn.Linear(config.hidden, 1, bias=False) if config.memory_aug else None  # v

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        L = self.history
        state = {"hist_ident": torch.full((batch_size, L), EMPTY, dtype=torch.long, device=device)}
        if self.memory_aug:
            state["hist_mem"] = torch.zeros(batch_size, L, device=device)
        return state

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor, state: Dict[str, Tensor],
                normalize: bool = True) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        slot_ident, new_ident = slide(state["hist_ident"], ident)  # (B, T, L), (B, L)
        new_state = {"hist_ident": new_ident}
        p = self.pointer(hidden)  # (B, T, L)
        if self.memory_aug:
            m = self.memory(hidden).squeeze(-1)  # (B, T): m_k = v . h_k
            slot_mem, new_mem = slide(state["hist_mem"].to(m.dtype), m)  # (B, T, L), (B, L)
            p = p + slot_mem
            new_state["hist_mem"] = new_mem
        empty = slot_ident == EMPTY
        if isinstance(self.decoder, ClassDecoder):
            return self._class_output(hidden, p.float(), empty, slot_ident), new_state
        p = p.masked_fill(empty, float("-inf"))
        if not normalize:  # exp(z) over V + L without the normaliser: the raw slot logits
            return HeadOutput(None, p.float(), slot_ident, hidden,
                              vocab_score=OutputRows(self.decoder, hidden)), new_state
        logits = self.decoder(hidden)  # (B, T, V)
        log_vocab, log_slot = JointLogSoftmax.apply(logits, p)  # (B,T,V), (B,T,L)
        out = HeadOutput(log_vocab, log_slot, slot_ident, hidden,
                         log_norm=log_norm(logits, log_vocab))  # log Z over V + L
        return out, new_state

    def _class_output(self, hidden: Tensor, p: Tensor, empty: Tensor,
                      slot_ident: Tensor) -> HeadOutput:
        """p (B, T, L) float32 slot logits, empty (B, T, L) bool: the factored mixture."""
        C = self.decoder.n_classes
        cl = self.decoder.class_logits(hidden).float()  # (B, T, C + 1)
        no_slot = empty.all(-1, keepdim=True)  # (B, T, 1)
        cl = cl.masked_fill(F.pad(no_slot, (C, 0)), float("-inf"))  # pointer class off
        class_lp = F.log_softmax(cl, dim=-1)
        # a finite fill keeps log_softmax (and its gradient) finite on rows without slots
        log_in = F.log_softmax(p.masked_fill(empty, torch.finfo(p.dtype).min), dim=-1)
        log_slot = (class_lp[..., C:] + log_in).masked_fill(empty, float("-inf"))
        return HeadOutput(None, log_slot, slot_ident, hidden,
                          vocab_score=self.decoder.scorer(hidden, class_lp))
