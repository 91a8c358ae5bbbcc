"""NeuralLM: tied embedding -> body (LSTM or Transformer) -> head, behind LanguageModel."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from rescore.models.base import HeadOutput, Inference, LanguageModel, LMState
from rescore.models.bodies import BODIES
from rescore.models.classes import ClassDecoder, frequency_classes
from rescore.models.config import ModelConfig
from rescore.models.heads import HEADS, SoftmaxHead

OUTPUTS = ("softmax", "class")


def check_output(config: ModelConfig) -> None:
    """A ValueError naming --output / --classes when the output layer does not fit the config."""
    if config.output not in OUTPUTS:
        raise ValueError(f"--output {config.output!r}: one of {', '.join(OUTPUTS)}")
    if config.output != "class":
        if config.classes:
            raise ValueError(f"--classes {config.classes}: only with --output class")
        return
    V = config.vocab_size
    if isinstance(config.classes, bool) or not isinstance(config.classes, int) \
            or not 1 <= config.classes <= max(V, 1):
        raise ValueError(f"--classes {config.classes}: an integer from 1 to the vocabulary "
                         f"size {V} with --output class (about sqrt(V): {round(math.sqrt(V))})")
    if not getattr(HEADS[config.head], "supports_class_output", False):
        ok = sorted(n for n, h in HEADS.items() if getattr(h, "supports_class_output", False))
        raise ValueError(f"--output class: not with --head {config.head} (heads with a "
                         f"class-factored output: {', '.join(ok)})")
    if config.self_norm and config.head != "softmax":
        raise ValueError(f"--output class with --self-norm: only with --head softmax (not "
                         f"{config.head})")


class NeuralLM(LanguageModel):
    """A word LM: embedding (V x H, tied with the output layer), a body and a head.

    The state is the union of the body's state (``h``/``c`` or the KV cache) and the head's
    (``hist_ident``, ``hist_mem``, ...), all batch-first.
    """

    def __init__(self, config: ModelConfig, vocab, counts: Optional[Tensor] = None):
        """``counts`` ((V,) training counts) bins the classes of ``output="class"``; without
        them (a checkpoint about to load its own ``word_class``, or a test) ids are taken as
        ranks of frequency (a Vocabulary from a text is in that order) with Zipf counts 1/(id+1)."""
        super().__init__()
        if config.arch not in BODIES:
            raise ValueError(f"unknown arch {config.arch!r}; known: {sorted(BODIES)}")
        if config.head not in HEADS:
            raise ValueError(f"unknown head {config.head!r}; known: {sorted(HEADS)}")
        check_output(config)
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
        decoder = self.decoder
        if config.output == "class":
            if counts is None:
                counts = 1.0 / torch.arange(1, V + 1, dtype=torch.float64)
            head = HEADS[config.head]
            # nn.Module attribute (not self.decoder): the word rows stay the tied Linear's
            self.class_decoder = ClassDecoder(self.decoder, config.classes,
                                              frequency_classes(counts, config.classes),
                                              extra=getattr(head, "extra_classes", 0))
            decoder = self.class_decoder
        self.head = HEADS[config.head](config, decoder)

    def initial_state(self, batch_size: int, device=None) -> LMState:
        body = self.body.init_state(batch_size, device)
        head = self.head.init_state(batch_size, device)
        assert not set(body) & set(head), "body and head state names must differ"
        return LMState({**body, **head})

    supports_unnormalized = True  # every head takes normalize=False

    @property
    def self_norm(self) -> float:
        return self.config.self_norm

    @property
    def class_output(self) -> bool:
        return self.config.output == "class"

    @property
    def head_name(self) -> str:
        return self.config.head

    @property
    def hidden_size(self) -> int:
        return self.config.hidden
    takes_inference = True

    def lstm_levels(self) -> bool:
        return self.body.lstm_step and self.head.softmax_output is not None

    def forward(self, ids: Tensor, ident: Tensor, state: LMState, normalize: bool = True,
                inference: Optional[Inference] = None) -> Tuple[HeadOutput, LMState]:
        """LanguageModel.forward; with ``inference`` (the engine's paths) a one-token call at
        inference takes the engine's step of the body where it has one, and the head's output
        is read through the engine's kernels."""
        emb = self.drop(self.embedding(ids))  # (B, T, H)
        step = None
        if inference is not None and ids.shape[1] == 1 and not self.training and not torch.is_grad_enabled():
            step = inference.body_step(self.body, ids, self.embedding.weight, state.tensors)
        if step is not None:
            hidden, body_state = step
        else:
            hidden, body_state = self.body(emb, state.tensors)  # (B, T, H)
        hidden = self.drop(hidden)
        out, head_state = self._head(hidden, emb, ident, state.tensors, normalize, inference)
        return out, LMState({**body_state, **head_state})

    def _head(self, hidden: Tensor, emb: Optional[Tensor], ident: Optional[Tensor], state, normalize: bool,
              inference: Optional[Inference]):
        if inference is not None:
            return inference.head(self.head, hidden, emb, ident, state, normalize)
        return self.head(hidden, emb, ident, state, normalize=normalize)

    @property
    def supports_tree(self) -> bool:
        """``forward_tree`` works: a body with a tree forward and a head without history."""
        return hasattr(self.body, "forward_tree") and isinstance(self.head, SoftmaxHead)

    def forward_tree(self, ids: Tensor, ident: Tensor, depth: Tensor, ancestor: Tensor,
                     state: LMState, normalize: bool = True, inference: Optional[Inference] = None) -> HeadOutput:
        """The head output at every node of prefix trees (``TransformerBody.forward_tree``):
        node i's output equals that of ``forward`` on the path from the root to node i."""
        if not self.supports_tree:
            raise ValueError(f"no tree forward for {self.config.arch} with a "
                             f"{self.config.head} head")
        emb = self.drop(self.embedding(ids))  # (B, N, H)
        hidden = self.drop(self.body.forward_tree(emb, depth, ancestor, state.tensors))
        out, _ = self._head(hidden, emb, ident, state.tensors, normalize, inference)
        return out

