"""Bodies: from input embeddings (B, T, H) to hidden states (B, T, H) with a carried state.

Every body offers ``init_state(batch_size, device) -> dict[str, Tensor]`` (batch-first, fixed
shapes) and ``forward(x, state) -> (hidden, new state)``; forward on T tokens equals T calls on
one token each (the rescoring engine relies on it).
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BODIES: Dict[str, type] = {}


def register_body(name: str):
    def add(cls: type) -> type:
        BODIES[name] = cls
        return cls

    return add


@register_body("lstm")
class LSTMBody(nn.Module):
    """Multi-layer LSTM; state h, c: (B, layers, H) float."""

    def __init__(self, config):
        super().__init__()
        self.layers, self.hidden = config.layers, config.hidden
        self.rnn = nn.LSTM(config.hidden, config.hidden, config.layers, batch_first=True,
                           dropout=config.dropout if config.layers > 1 else 0.0)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        z = torch.zeros(batch_size, self.layers, self.hidden, device=device)
        return {"h": z, "c": z.clone()}

    def forward(self, x: Tensor, state: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        # nn.LSTM keeps its state layer-first: (layers, B, H)
        h0 = state["h"].transpose(0, 1).contiguous().to(x.dtype)
        c0 = state["c"].transpose(0, 1).contiguous().to(x.dtype)
        out, (h, c) = self.rnn(x, (h0, c0))  # (B, T, H)
        return out, {"h": h.transpose(0, 1), "c": c.transpose(0, 1)}


def sinusoidal(pos: Tensor, dim: int) -> Tensor:
    """Sinusoidal position embeddings (Vaswani et al. 2017, §3.5): (...) int64 -> (..., dim)."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=pos.device) / half)
    angle = pos.unsqueeze(-1).float() * freq  # (..., half)
    pe = torch.cat([angle.sin(), angle.cos()], dim=-1)
    return F.pad(pe, (0, dim - 2 * half))


class Block(nn.Module):
    """Pre-LayerNorm Transformer block with windowed causal self-attention over a KV cache."""

    def __init__(self, config):
        super().__init__()
        H = config.hidden
        if H % config.n_heads:
            raise ValueError("hidden must be divisible by n_heads")
        self.n_heads = config.n_heads
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
        """x (B, T, H); cache_k/v (B, W, H); allowed (B, T, W + T) bool; dist (T, W + T) int64.

        Returns the new x and the keys/values of all W + T positions (B, W + T, H).
        """
        B, T, H = x.shape
        nh, d = self.n_heads, H // self.n_heads
        q, k, v = self.qkv(self.ln1(x)).split(H, dim=-1)  # (B, T, H) each
        K = torch.cat([cache_k.to(k.dtype), k], dim=1)  # (B, S, H), S = W + T
        Vv = torch.cat([cache_v.to(v.dtype), v], dim=1)
        S = K.shape[1]
        qh = q.view(B, T, nh, d).transpose(1, 2)  # (B, nh, T, d)
        kh = K.view(B, S, nh, d).transpose(1, 2)  # (B, nh, S, d)
        vh = Vv.view(B, S, nh, d).transpose(1, 2)
        att = qh @ kh.transpose(-1, -2) / math.sqrt(d)  # (B, nh, T, S)
        if self.rel_bias is not None:
            att = att + self.rel_bias[:, dist.clamp(0, self.rel_bias.shape[1] - 1)]  # (nh, T, S)
        att = att.masked_fill(~allowed.unsqueeze(1), float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ vh).transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        x = x + self.drop(self.proj(y))
        x = x + self.drop(self.mlp(self.ln2(x)))
        return x, K, Vv


@register_body("transformer")
class TransformerBody(nn.Module):
    """Causal Transformer whose state is a KV cache of the last W = context tokens.

    Each token attends to itself and the W - 1 tokens before it (a sliding window), so the
    result does not depend on how the stream is cut into calls. State:
    ``kv_k``/``kv_v`` (B, layers, W, H), ``kv_valid`` (B, W) bool, and for sinusoidal
    positions ``pos`` (B,) int64, the stream position of the next token.
    """

    def __init__(self, config):
        super().__init__()
        if config.positions not in ("learned", "sinusoidal", "none"):
            raise ValueError(f"unknown positions {config.positions!r}")
        self.config = config
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden)

    def init_state(self, batch_size: int, device=None) -> Dict[str, Tensor]:
        c = self.config
        kv = torch.zeros(batch_size, c.layers, c.context, c.hidden, device=device)
        state = {"kv_k": kv, "kv_v": kv.clone(),
                 "kv_valid": torch.zeros(batch_size, c.context, dtype=torch.bool, device=device)}
        if c.positions == "sinusoidal":
            state["pos"] = torch.zeros(batch_size, dtype=torch.long, device=device)
        return state

    def forward(self, x: Tensor, state: Dict[str, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        B, T, H = x.shape
        W = self.config.context
        new_state = {}
        if "pos" in state:
            pos = state["pos"].unsqueeze(1) + torch.arange(T, device=x.device)  # (B, T)
            x = x + sinusoidal(pos, H).to(x.dtype)
            new_state["pos"] = state["pos"] + T
        # key s of [cache (W) ; current (T)] sits at stream offset s - W; query t sees the keys
        # at distance t - (s - W) in [0, W)
        t = torch.arange(T, device=x.device).unsqueeze(1)
        s = torch.arange(W + T, device=x.device).unsqueeze(0)
        dist = t - s + W  # (T, W + T)
        window = (dist >= 0) & (dist < W)
        valid = torch.cat([state["kv_valid"],
                           torch.ones(B, T, dtype=torch.bool, device=x.device)], dim=1)  # (B, S)
        allowed = window.unsqueeze(0) & valid.unsqueeze(1)  # (B, T, S)
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            x, K, Vv = block(x, state["kv_k"][:, i], state["kv_v"][:, i], allowed, dist)
            ks.append(K[:, -W:])
            vs.append(Vv[:, -W:])
        new_state["kv_k"] = torch.stack(ks, dim=1)  # (B, layers, W, H)
        new_state["kv_v"] = torch.stack(vs, dim=1)
        new_state["kv_valid"] = valid[:, -W:]
        return self.ln_f(x), new_state
