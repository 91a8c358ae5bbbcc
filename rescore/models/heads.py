"""Output heads: from the body output to the mixture of rescore.models.base.HeadOutput.

A head is an ``nn.Module`` registered in ``HEADS`` under its name and built as
``HeadClass(config, decoder)``, where ``decoder`` is the output ``nn.Linear`` (V x H, weight tied
with the input embedding). It offers

* ``init_state(batch_size, device) -> dict[str, Tensor]``: its carried history, batch-first
  (e.g. ``hist_ident`` (B, L) int64 filled with EMPTY);
* ``forward(hidden (B, T, H), emb (B, T, E), ident (B, T), state) -> (HeadOutput, new state)``,
  where ``state`` is the model's whole state dict and the head reads and returns only its keys.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescore.models.base import EMPTY, HeadOutput
from rescore.models.history import slide

HEADS: Dict[str, type] = {}


def register_head(name: str) -> Callable[[type], type]:
    """Class decorator: make a head available as ``ModelConfig.head = name``."""

    def add(cls: type) -> type:
        HEADS[name] = cls
        return cls

    return add


@register_head("softmax")
class SoftmaxHead(nn.Module):
    """y_t = softmax(W h_t + b): no history, no state."""

    def __init__(self, config, decoder: nn.Linear):
        super().__init__()
        self.decoder = decoder

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        return {}

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor,
                state: Dict[str, Tensor]) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        log_vocab = F.log_softmax(self.decoder(hidden), dim=-1)  # (B, T, V)
        return HeadOutput(log_vocab, hidden=hidden), {}


@register_head("pointer")
class PointerHead(nn.Module):
    """The implicit cache pointer of Li, Povey and Khudanpur (Interspeech 2020), design §4.2.

    z_t = [W h_t + b ; W_p h_t + m_hist] over V + L, y_t = softmax(z_t); slot i of position t holds
    x_{t-L+1+i}. With memory augmentation, m_k = v . h_k is computed at every position k, carried
    in the history (``hist_mem``) and added to the logit of the slot holding x_k. Empty slots are
    masked out. Extra parameters: W_p (L x H) and v (H): (L + 1) * H.
    """

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

    def forward(self, hidden: Tensor, emb: Tensor, ident: Tensor,
                state: Dict[str, Tensor]) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        V = self.decoder.out_features
        slot_ident, new_ident = slide(state["hist_ident"], ident)  # (B, T, L), (B, L)
        new_state = {"hist_ident": new_ident}
        p = self.pointer(hidden)  # (B, T, L)
        if self.memory_aug:
            m = self.memory(hidden).squeeze(-1)  # (B, T): m_k = v . h_k
            slot_mem, new_mem = slide(state["hist_mem"].to(m.dtype), m)  # (B, T, L), (B, L)
            p = p + slot_mem
            new_state["hist_mem"] = new_mem
        p = p.masked_fill(slot_ident == EMPTY, float("-inf"))
        z = torch.cat([self.decoder(hidden), p], dim=-1)  # (B, T, V + L)
        logy = F.log_softmax(z, dim=-1)
        out = HeadOutput(logy[..., :V], logy[..., V:], slot_ident, hidden)
        return out, new_state
