"""The one configuration of every rescore language model, saved in its checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Dict

from rescore.errors import RescoreError


RETIRED_FIELDS = ("cache_theta", "cache_lambda")


@dataclass
class ModelConfig:
    arch: str = "lstm"  # body: a name in rescore.settings.BODY_NAMES (lstm, gru, transformer, ...)
    head: str = "softmax"  # output head: a name in rescore.models.HEADS (softmax, pointer, ...)
    vocab_size: int = 0  # V, filled in from the vocabulary by build_model
    hidden: int = 256  # H: hidden size = embedding size (input and output embeddings are tied)
    layers: int = 2  # LSTM layers or Transformer blocks
    dropout: float = 0.2  # dropout on embeddings, between layers and on the body output
    history: int = 100  # L: history slots of pointer/cache heads (the last L tokens)
    memory_aug: bool = False  # pointer: add m_k = v . h_k to the logit of the slot holding x_k
    n_heads: int = 4  # Transformer: attention heads (H must be divisible by it)
    context: int = 100  # Transformer: attention window W = KV-cache capacity, in tokens
    positions: str = "learned"  # Transformer: "learned" (relative bias), "sinusoidal" or "none"
    ff_mult: int = 4  # Transformer: feed-forward width = ff_mult * H
    coverage: bool = False  # pointer-generator: coverage vector c_i fed to the attention
    coverage_weight: float = 1.0  # pointer-generator: lambda of the coverage loss term
    # self-normalisation (Devlin et al. 2014, eq. 4; Chen et al. 2015): alpha of the training
    # term alpha * (log Z)^2, Z the head's large normaliser (HeadOutput.log_norm); 0: off.
    # A model trained with it can be scored without normalising (rescore-nbest --normalize).
    self_norm: float = 0.0
    # output layer: "softmax" (one softmax over V) or "class" (class-factored, Mikolov et al.
    # 2011: P(c(w)|h) P(w|c(w),h), exact at ~(C + V/C) x H per token; rescore.models.classes)
    output: str = "softmax"
    classes: int = 0  # C, word classes of output "class" (binned by training frequency)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any], path=None) -> "ModelConfig":
        # Fields of older checkpoints that no model reads any more: dropped on load, so those
        # checkpoints still load (the neural cache's theta/lambda are rescore-nbest options).
        d = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise RescoreError("a model config with known fields", path=path, got=", ".join(unknown))
        return cls(**d)
