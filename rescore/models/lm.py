"""NeuralLM: tied embedding -> body (LSTM or Transformer) -> head, behind LanguageModel."""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from rescore.models.base import HeadOutput, LanguageModel, LMState
from rescore.models.bodies import BODIES
from rescore.models.config import ModelConfig
from rescore.models.heads import HEADS, SoftmaxHead


class NeuralLM(LanguageModel):
    """A word LM: embedding (V x H, tied with the output layer), a body and a head.

    The state is the union of the body's state (``h``/``c`` or the KV cache) and the head's
    (``hist_ident``, ``hist_mem``, ...), all batch-first.
    """

    def __init__(self, config: ModelConfig, vocab):
        super().__init__()
        if config.arch not in BODIES:
            raise ValueError(f"unknown arch {config.arch!r}; known: {sorted(BODIES)}")
        if config.head not in HEADS:
            raise ValueError(f"unknown head {config.head!r}; known: {sorted(HEADS)}")
        self.config = config
        self.vocab = vocab
        V, H = config.vocab_size, config.hidden
        self.embedding = nn.Embedding(V, H)
        self.decoder = nn.Linear(H, V)
        self.decoder.weight = self.embedding.weight  # tied (Press & Wolf 2017; Inan et al. 2017)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if config.self_norm > 0:
            # log Z starts at 0 instead of ln V: the same softmax (a constant shift of the
            # logits), so the cross-entropy trains alike; only the (log Z)^2 term is spared
            # the climb down from ~(ln V)^2 that would take the first steps' gradient.
            nn.init.constant_(self.decoder.bias, -math.log(V))
        self.drop = nn.Dropout(config.dropout)
        self.body = BODIES[config.arch](config)
        self.head = HEADS[config.head](config, self.decoder)

    def initial_state(self, batch_size: int, device=None) -> LMState:
        body = self.body.init_state(batch_size, device)
        head = self.head.init_state(batch_size, device)
        assert not set(body) & set(head), "body and head state names must differ"
        return LMState({**body, **head})

    supports_unnormalized = True  # every head takes normalize=False

    def forward(self, ids: Tensor, ident: Tensor, state: LMState,
                normalize: bool = True) -> Tuple[HeadOutput, LMState]:
        emb = self.drop(self.embedding(ids))  # (B, T, H)
        if (ids.shape[1] == 1 and not self.training and not torch.is_grad_enabled()
                and hasattr(self.body, "step_ids") and not torch.is_autocast_enabled(ids.device.type)):
            # one token per row at inference (the engine's trie levels): the body's fast step
            hidden, body_state = self.body.step_ids(ids, self.embedding.weight, state.tensors)
        else:
            hidden, body_state = self.body(emb, state.tensors)  # (B, T, H)
        hidden = self.drop(hidden)
        out, head_state = self.head(hidden, emb, ident, state.tensors, normalize=normalize)
        return out, LMState({**body_state, **head_state})

    @property
    def supports_tree(self) -> bool:
        """``forward_tree`` works: a body with a tree forward and a head without history."""
        return hasattr(self.body, "forward_tree") and isinstance(self.head, SoftmaxHead)

    def forward_tree(self, ids: Tensor, ident: Tensor, depth: Tensor, ancestor: Tensor,
                     state: LMState, normalize: bool = True) -> HeadOutput:
        """The head output at every node of prefix trees (``TransformerBody.forward_tree``):
        node i's output equals that of ``forward`` on the path from the root to node i."""
        if not self.supports_tree:
            raise ValueError(f"no tree forward for {self.config.arch} with a "
                             f"{self.config.head} head")
        emb = self.drop(self.embedding(ids))  # (B, N, H)
        hidden = self.drop(self.body.forward_tree(emb, depth, ancestor, state.tensors))
        out, _ = self.head(hidden, emb, ident, state.tensors, normalize=normalize)
        return out
