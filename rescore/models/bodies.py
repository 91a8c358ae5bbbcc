"""Bodies: from input embeddings (B, T, H) to hidden states (B, T, H) with a carried state.

Every body offers ``init_state(batch_size, device) -> dict[str, Tensor]`` (batch-first, fixed
shapes) and ``forward(x, state) -> (hidden, new state)``; forward on T tokens equals T calls on
one token each (the rescoring engine relies on it). The engine's faster inference paths of a
body (an LSTM's one-token step, its int8 and fused kernels) are the engine's
(rescore.engine.lstm_steps), not the body's.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescore.models.base import Part
from rescore.settings import BODY_NAMES

BODIES: Dict[str, type] = {}


def register_body(name: str):
    """Register a body class under ``name``, one of rescore.settings.BODY_NAMES (the torch-free
    list that rescore-train-lm's --arch offers)."""
    if name not in BODY_NAMES:
        raise ValueError(f"body {name!r} is not declared in rescore.settings.BODY_NAMES")

    def add(cls: type) -> type:
        if not issubclass(cls, Part):
            raise TypeError(f"body {name!r}: a rescore.models.base.Part (what it declares to the engine)")
        BODIES[name] = cls
        return cls

    return add


def _stacked(rnn: type, config) -> nn.Module:
    """config.layers layers of rnn (nn.LSTM or nn.GRU) of width config.hidden, batch first,
    config.dropout between layers."""
    return rnn(config.hidden, config.hidden, config.layers, batch_first=True,
               dropout=config.dropout if config.layers > 1 else 0.0)


def _layer_first(state: Tensor, dtype: torch.dtype) -> Tensor:
    """A (B, layers, H) state as nn.LSTM / nn.GRU keep it: (layers, B, H), contiguous, in dtype."""
    return state.transpose(0, 1).contiguous().to(dtype)


@register_body("lstm")
class LSTMBody(Part):
    """Multi-layer LSTM; state h, c: (B, layers, H) float."""

    lstm_step = True

    def __init__(self, config):
        super().__init__()
        self.layers, self.hidden = config.layers, config.hidden
        self.rnn = _stacked(nn.LSTM, config)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        z = torch.zeros(batch_size, self.layers, self.hidden, device=device)
        return {"h": z, "c": z.clone()}

    def forward(self, x: Tensor, state: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # oneDNN's LSTM fails ("could not create a primitive descriptor") when CPU autocast
            # casts fp32 inputs itself on a CPU without native bf16 (AVX2); cast them here.
            x = x.to(torch.get_autocast_dtype("cpu"))
        out, (h, c) = self.rnn(x, (_layer_first(state["h"], x.dtype), _layer_first(state["c"], x.dtype)))  # (B, T, H)
        return out, {"h": h.transpose(0, 1), "c": c.transpose(0, 1)}


@register_body("gru")
class GRUBody(Part):
    """Multi-layer GRU (Cho et al. 2014), as Kaldi's steps/pytorchnn offers; state h: (B, layers,
    H) float."""

    def __init__(self, config):
        super().__init__()
        self.layers, self.hidden = config.layers, config.hidden
        self.rnn = _stacked(nn.GRU, config)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        return {"h": torch.zeros(batch_size, self.layers, self.hidden, device=device)}

    def forward(self, x: Tensor, state: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        out, h = self.rnn(x, _layer_first(state["h"], x.dtype))  # (B, T, H)
        return out, {"h": h.transpose(0, 1)}


def sinusoidal(pos: Tensor, dim: int) -> Tensor:
    """Sinusoidal position embeddings (Vaswani et al. 2017, §3.5): (...) int64 -> (..., dim)."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=pos.device) / half)
    angle = pos.unsqueeze(-1).float() * freq  # (..., half)
    pe = torch.cat([angle.sin(), angle.cos()], dim=-1)
    return F.pad(pe, (0, dim - 2 * half))


def _n_heads(config) -> int:
    """config.n_heads, checked to divide config.hidden."""
    if config.hidden % config.n_heads:
        raise ValueError("hidden must be divisible by n_heads")
    return config.n_heads


def _cached_attention(qkv: Tensor, cache_k: Tensor, cache_v: Tensor, allowed: Tensor, n_heads: int,
                      drop: nn.Module, rel_bias: Optional[Tensor] = None,
                      dist: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """Self-attention of T new positions over a KV cache and themselves: qkv (B, T, 3H) the
    [q; k; v] projections, cache_k/v (B, nh, W, d), allowed (B, T, W + T) bool; rel_bias (nh, W)
    adds one bias per head and distance dist ((T, W + T) or (B, T, W + T) int64).

    Returns the attended values (B, T, H), before the output projection, and the keys/values of
    the T new positions (B, nh, T, d). The scores over the cache and over the new keys are
    computed apart, so [cache ; new] is never copied, and the head-major cache goes into the
    batched matmuls as it is.
    """
    B, T, H = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
    W = cache_k.shape[2]
    nh, d = n_heads, H // n_heads
    q, k, v = qkv.split(H, dim=-1)  # (B, T, H) each
    heads = lambda z: z.reshape(B, T, nh, d).transpose(1, 2)  # noqa: E731
    qh = heads(q) / math.sqrt(d)  # (B, nh, T, d)
    ck, cv = cache_k.to(q.dtype), cache_v.to(q.dtype)  # (B, nh, W, d)
    kh, vh = heads(k), heads(v)  # (B, nh, T, d)
    att = torch.cat([qh @ ck.transpose(-1, -2), qh @ kh.transpose(-1, -2)], dim=-1)
    if rel_bias is not None:  # (B, nh, T, S), S = W + T
        bias = rel_bias[:, dist.clamp(0, rel_bias.shape[1] - 1)]  # (nh, [B,] T, S)
        att = att + (bias.transpose(0, 1) if dist.dim() == 3 else bias)
    att = att.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    att = drop(F.softmax(att, dim=-1))
    y = att[..., :W] @ cv + att[..., W:] @ vh  # (B, nh, T, d)
    return y.transpose(1, 2).reshape(B, T, H), kh, vh


class Block(nn.Module):
    """Pre-LayerNorm Transformer block with windowed causal self-attention over a KV cache."""

    def __init__(self, config):
        super().__init__()
        H = config.hidden
        self.n_heads = _n_heads(config)
        self.ln1 = nn.LayerNorm(H)
        self.qkv = nn.Linear(H, 3 * H)
        self.proj = nn.Linear(H, H)
        self.ln2 = nn.LayerNorm(H)
        self.mlp = nn.Sequential(nn.Linear(H, config.ff_mult * H), nn.GELU(),
                                 nn.Linear(config.ff_mult * H, H))
        self.drop = nn.Dropout(config.dropout)
        # learned relative position: one bias per head and distance 0..W-1 (T5-style, Raffel et
        # al. 2020); relative so that it works on unbounded streams with a sliding window
        self.rel_bias = (nn.Parameter(torch.zeros(config.n_heads, config.context))
                         if config.positions == "learned" else None)

    def forward(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, allowed: Tensor,
                dist: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """x (B, T, H); cache_k/v (B, nh, W, d); allowed (B, T, W + T) bool; dist (T, W + T)
        or (B, T, W + T) int64, the distance of each key from each query.

        Returns the new x and the keys/values of the T new positions (B, nh, T, d)
        (:func:`_cached_attention`).
        """
        y, kh, vh = _cached_attention(self.qkv(self.ln1(x)), cache_k, cache_v, allowed, self.n_heads, self.drop,
                                      self.rel_bias, dist)
        x = x + self.drop(self.proj(y))
        x = x + self.drop(self.mlp(self.ln2(x)))
        return x, kh, vh


@register_body("transformer")
class TransformerBody(Part):
    """Causal Transformer whose state is a KV cache of the last W = context tokens.

    Each token attends to itself and the W - 1 tokens before it (a sliding window), so the
    result does not depend on how the stream is cut into calls. State:
    ``kv_k<i>``/``kv_v<i>`` (B, n_heads, W, H / n_heads) for layer i (head-major: the layout
    attention reads), ``kv_valid`` (B, W) bool, and for sinusoidal
    positions ``pos`` (B,) int64, the stream position of the next token.
    """

    def __init__(self, config):
        super().__init__()
        if config.positions not in ("learned", "sinusoidal", "none"):
            raise ValueError(f"unknown positions {config.positions!r}")
        self.config = config
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden)

    def inputs(self, x: Tensor, pos: Optional[Tensor]) -> Tensor:
        """The first block's input from the embeddings x (B, T, H), with the stream positions pos
        (B, T) int64 when the positions are sinusoidal (else None)."""
        return x if pos is None else x + sinusoidal(pos, x.shape[-1]).to(x.dtype)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        c = self.config
        shape = (batch_size, c.n_heads, c.context, c.hidden // c.n_heads)
        state = {"kv_valid": torch.zeros(batch_size, c.context, dtype=torch.bool, device=device)}
        for i in range(c.layers):
            state[f"kv_k{i}"] = torch.zeros(shape, device=device)
            state[f"kv_v{i}"] = torch.zeros(shape, device=device)
        if c.positions == "sinusoidal":
            state["pos"] = torch.zeros(batch_size, dtype=torch.long, device=device)
        return state

    def forward(self, x: Tensor, state: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        B, T, H = x.shape
        W = self.config.context
        new_state = {}
        pos = None
        if "pos" in state:
            pos = state["pos"].unsqueeze(1) + torch.arange(T, device=x.device)  # (B, T)
            new_state["pos"] = state["pos"] + T
        x = self.inputs(x, pos)
        # key s of [cache (W) ; current (T)] sits at stream offset s - W; query t sees the keys
        # at distance t - (s - W) in [0, W)
        t = torch.arange(T, device=x.device).unsqueeze(1)
        s = torch.arange(W + T, device=x.device).unsqueeze(0)
        dist = t - s + W  # (T, W + T)
        window = (dist >= 0) & (dist < W)
        valid = torch.cat([state["kv_valid"],
                           torch.ones(B, T, dtype=torch.bool, device=x.device)], dim=1)  # (B, S)
        allowed = window.unsqueeze(0) & valid.unsqueeze(1)  # (B, T, S)
        keep = max(W - T, 0)  # old positions still in the window
        for i, block in enumerate(self.blocks):
            old_k, old_v = state[f"kv_k{i}"], state[f"kv_v{i}"]
            x, k, v = block(x, old_k, old_v, allowed, dist)
            # the new cache: the last W of [old cache ; T new], written once into its place
            for name, old, cur in ((f"kv_k{i}", old_k, k), (f"kv_v{i}", old_v, v)):
                new = cur.new_empty(old.shape)
                new[:, :, :keep] = old[:, :, W - keep:]
                new[:, :, keep:] = cur[:, :, T - (W - keep):]
                new_state[name] = new
        new_state["kv_valid"] = valid[:, -W:]
        return self.ln_f(x), new_state

    def forward_tree(self, x: Tensor, depth: Tensor, ancestor: Tensor,
                     state: Dict[str, Tensor]) -> Tensor:
        """Every node of a prefix tree at once: row b holds a tree of N nodes in any order.

        x (B, N, H): the embedding of each node's input token; depth (B, N) int64: 0 for the
        root (the first input after ``state``); ancestor (B, N, N) bool: [b, i, j] when node j
        is node i or an ancestor of it. Node i attends to the cache and to its ancestors exactly
        as the last token of its path would in ``forward`` on that path (same distances, same
        window), so its output equals that path's. Returns the hidden states (B, N, H); the
        states after the nodes are not formed (the tree shares one copy of ``state``'s cache).
        """
        B, N, H = x.shape
        W = self.config.context
        x = self.inputs(x, state["pos"].unsqueeze(1) + depth if "pos" in state else None)
        d_cache = depth.unsqueeze(-1) + W - torch.arange(W, device=x.device)  # (B, N, W)
        d_tree = depth.unsqueeze(-1) - depth.unsqueeze(-2)  # (B, N, N)
        dist = torch.cat([d_cache, d_tree], dim=-1)  # (B, N, W + N)
        allowed = torch.cat([state["kv_valid"].unsqueeze(1) & (d_cache < W),
                             ancestor & (d_tree < W)], dim=-1)
        for i, block in enumerate(self.blocks):
            x, _, _ = block(x, state[f"kv_k{i}"], state[f"kv_v{i}"], allowed, dist)
        return self.ln_f(x)


def interleaved_sinusoidal(pos: Tensor, dim: int) -> Tensor:
    """Vaswani et al.'s position encoding laid out as pytorch/examples (and so Kaldi's
    steps/pytorchnn model.py) builds it: sin at even, cos at odd dims, computed the same way in
    float32. (...) int64 -> (..., dim); dim must be even."""
    div = torch.exp(torch.arange(0, dim, 2, device=pos.device).float() * (-math.log(10000.0) / dim))
    angle = pos.unsqueeze(-1).float() * div  # (..., dim / 2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # sin, cos, sin, cos...


class PostNormBlock(nn.Module):
    """torch.nn.TransformerEncoderLayer (post-LayerNorm, GELU), the layer of Kaldi's
    steps/pytorchnn TransformerModel, over the KV cache of ``Block``'s interface.

    Parameter names follow that layer (self_attn in/out projections, linear1/2, norm1/2), so a
    Kaldi state_dict maps onto it name by name (rescore.models.kaldi_lm).
    """

    def __init__(self, config):
        super().__init__()
        H = config.hidden
        self.n_heads = _n_heads(config)
        self.in_proj = nn.Linear(H, 3 * H)  # rows [q; k; v], as MultiheadAttention.in_proj_weight
        self.out_proj = nn.Linear(H, H)
        self.linear1 = nn.Linear(H, config.ff_mult * H)
        self.linear2 = nn.Linear(config.ff_mult * H, H)
        self.norm1 = nn.LayerNorm(H)
        self.norm2 = nn.LayerNorm(H)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, allowed: Tensor,
                dist: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """As ``Block.forward``; ``dist`` is unused (positions enter at the input only)."""
        y, kh, vh = _cached_attention(self.in_proj(x), cache_k, cache_v, allowed, self.n_heads, self.drop)
        x = self.norm1(x + self.drop(self.out_proj(y)))
        x = self.norm2(x + self.drop(self.linear2(self.drop(F.gelu(self.linear1(x))))))
        return x, kh, vh


@register_body("kaldi-transformer")
class KaldiTransformerBody(TransformerBody):
    """The Transformer of Kaldi's steps/pytorchnn (model.py TransformerModel, as
    compute_sentence_scores.py builds it): the embedding times sqrt(H) plus the interleaved
    sinusoidal encoding of the absolute position, post-LayerNorm GELU layers of feed-forward
    width ff_mult * H, no final LayerNorm. Kaldi's causal mask is this body's window: exact for a
    sentence of up to ``context`` tokens; the carried state (a KV cache, as ``TransformerBody``)
    goes past what Kaldi does, which starts every sentence at position 0.
    """

    def __init__(self, config):
        nn.Module.__init__(self)
        if config.hidden % 2:
            raise ValueError("kaldi-transformer needs an even hidden size")
        if config.positions != "sinusoidal":  # the next token's position is part of the state
            raise ValueError("kaldi-transformer needs positions='sinusoidal'")
        self.config = config
        self.blocks = nn.ModuleList(PostNormBlock(config) for _ in range(config.layers))
        self.ln_f = nn.Identity()

    def inputs(self, x: Tensor, pos: Optional[Tensor]) -> Tensor:
        H = x.shape[-1]
        return x * math.sqrt(H) + interleaved_sinusoidal(pos, H).to(x.dtype)
