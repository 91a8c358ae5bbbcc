"""The level schedule of the fast engine (rescore.engine.fast), in arrays: the prefix tries of a
micro-batch built with numpy, then computed one depth level per forward call.

For a model with a small state (an LSTM's h, c) the engine runs every trie level by level: one
call per depth, one row per distinct prefix of that depth. ``PrefixForest`` does the same
node by node in Python; here the tries are built by sorting each part's hypotheses and
comparing neighbours (a hypothesis adds a node at every depth past its common prefix with the
one before it), and nodes are numbered level by level, so that a level is a range of node ids
and everything a call needs is an array slice: no Python work per node or per token. An LSTM
with a softmax head runs the levels through its level steps (rescore.engine.forward.LevelSteps), and
with the fused int8 kernels every level of the batch in one call (LevelSteps.whole).

Node ids: the roots (one per part, input ``<eos>``) are 0..P-1; then depth 1, depth 2, ...
Edge slots: node ``n`` > root is the edge that leads into it (its word, scored from its
parent's output), slot ``n``; the end of sentence after node ``n`` is slot ``N + n``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from rescore.engine.forward import Costs, Hyp, RunContext, target_log_prob
from rescore.models.base import HeadOutput, LMState


@dataclass
class LevelForest:
    """The tries of a micro-batch, nodes numbered level by level (module docstring)."""

    n_parts: int
    level_start: np.ndarray  # (D + 1,) first node id of each level; level d = [start[d], start[d+1])
    tok_id: np.ndarray       # (N,) input id of each node (<eos> at roots)
    tok_ident: np.ndarray    # (N,) input identity of each node
    parent: np.ndarray       # (N,) parent node, -1 at roots
    end_node: np.ndarray     # (H,) the node after each hypothesis' last word (its root if empty)
    ends: np.ndarray         # the distinct end nodes, sorted
    path: np.ndarray         # (sum of lengths + 1,) the edge slots of every hypothesis in turn,
    #                          each one's end of sentence last
    eos: int
    _edges: Optional[tuple] = field(default=None, repr=False, compare=False)  # edges(), once made

    @property
    def n_nodes(self) -> int:
        return len(self.tok_id)

    @classmethod
    def build(cls, parts: Sequence[Sequence[Hyp]], eos: int) -> "LevelForest":
        """The tries of ``parts`` (the hypotheses of each part, each part one trie)."""
        P = len(parts)
        hyps = [h for part in parts for h in part]
        H = len(hyps)
        part_of = np.repeat(np.arange(P), [len(p) for p in parts])
        lengths = np.fromiter((len(h.ident) for h in hyps), dtype=np.int64, count=H)
        D = int(lengths.max()) if H else 0
        ident = np.full((H, D), -1, dtype=np.int64)
        ids = np.zeros((H, D), dtype=np.int64)
        valid = np.arange(D) < lengths[:, None]  # (H, D)
        if valid.any():
            n = int(lengths.sum())
            ident[valid] = np.fromiter(itertools.chain.from_iterable(h.ident for h in hyps), np.int64, n)
            ids[valid] = np.fromiter(itertools.chain.from_iterable(h.ids for h in hyps), np.int64, n)
        # sort by part, then by the words (a padding -1 sorts before every word)
        order = np.lexsort([ident[:, d] for d in range(D - 1, -1, -1)] + [part_of])
        s_ident, s_ids, s_len, s_part = ident[order], ids[order], lengths[order], part_of[order]
        s_valid = valid[order]
        # the common prefix of each hypothesis with the one before it in its part
        lcp = np.zeros(H, dtype=np.int64)
        if H > 1 and D:
            same = (s_ident[1:] == s_ident[:-1]) & s_valid[1:]
            lcp[1:] = np.cumprod(same, axis=1).sum(axis=1)
            lcp[1:][s_part[1:] != s_part[:-1]] = 0
        new = s_valid & (np.arange(D) >= lcp[:, None])  # a node is new at (row, depth)
        # number the new nodes level by level: depth d's nodes follow depth d-1's
        d_new, r_new = np.nonzero(new.T)  # sorted by depth, then row
        node = np.full((H, D), -1, dtype=np.int64)
        node[r_new, d_new] = P + np.arange(len(r_new))
        # a cell that is not new is the node of the row above: the last new one in its column
        src = np.where(new, np.arange(H)[:, None], -1)
        src = np.maximum.accumulate(src, axis=0)
        node = np.where(s_valid, node[np.maximum(src, 0), np.arange(D)], -1)
        counts = np.bincount(d_new, minlength=D) if D else np.zeros(0, dtype=np.int64)
        level_start = np.concatenate([[0, P], P + np.cumsum(counts)]).astype(np.int64)
        N = P + len(r_new)
        tok_id = np.full(N, eos, dtype=np.int64)
        tok_ident = np.full(N, eos, dtype=np.int64)
        tok_id[P:] = s_ids[r_new, d_new]
        tok_ident[P:] = s_ident[r_new, d_new]
        parent = np.full(N, -1, dtype=np.int64)
        parent[P:] = np.where(d_new == 0, s_part[r_new],
                              node[r_new, np.maximum(d_new - 1, 0)])
        s_end = s_part.copy()  # an empty hypothesis ends at its root
        if D:
            s_end = np.where(s_len > 0, node[np.arange(H), np.maximum(s_len - 1, 0)], s_part)
        end_node = np.empty(H, dtype=np.int64)
        end_node[order] = s_end
        slots = np.empty((H, D + 1), dtype=np.int64)  # each row: its nodes, then its end
        slots[order, :D] = node
        slots[np.arange(H), lengths] = N + end_node
        path = slots[np.arange(D + 1) <= lengths[:, None]]  # row by row: hypothesis order
        return cls(P, level_start, tok_id, tok_ident, parent, end_node, np.unique(end_node), path, eos)

    def level_ends(self, d: int) -> np.ndarray:
        """The end nodes of level ``d``, sorted."""
        a, b = np.searchsorted(self.ends, self.level_start[d:d + 2])
        return self.ends[a:b]

    def edges(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every edge, sorted by the node whose output scores it: (node, target id, target
        identity, slot); kept."""
        if self._edges is None:
            N, P = self.n_nodes, self.n_parts
            child = np.arange(P, N)
            node = np.concatenate([self.parent[child], self.ends])
            tid = np.concatenate([self.tok_id[child], np.full(len(self.ends), self.eos)])
            tident = np.concatenate([self.tok_ident[child], np.full(len(self.ends), self.eos)])
            slot = np.concatenate([child, N + self.ends])
            by_node = np.argsort(node, kind="stable")
            self._edges = node[by_node], tid[by_node], tident[by_node], slot[by_node]
        return self._edges

    def level_edges(self, d: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The edges scored from level ``d``'s outputs, sorted by row: (row in the level, target
        id, target identity, slot)."""
        node, tid, tident, slot = self.edges()
        lo, hi = self.level_start[d], self.level_start[d + 1]
        a, b = np.searchsorted(node, [lo, hi])
        return node[a:b] - lo, tid[a:b], tident[a:b], slot[a:b]


def score_levels(ctx: RunContext, parts: List[Tuple[List[Hyp], int]], starts: LMState,
                 want_finals: bool = False
                 ) -> Tuple[List[Costs], List[Optional[Tuple[LMState, int]]]]:
    """Score the hypotheses of ``parts`` ((hypotheses, row of the start state in ``starts``)
    each): their costs per word, end of sentence last, in the order given, and (with
    ``want_finals``) the state after each one as (states, row), else None."""
    forest = LevelForest.build([hyps for hyps, _ in parts], ctx.eos)
    finals: List[Optional[Tuple[LMState, int]]] = [None] * len(forest.end_node)
    rows = ctx.tensor([row for _, row in parts])
    with ctx.forward.modes():
        levels = ctx.forward.level_steps(starts) or _ForwardLevels(ctx, starts)
        whole = getattr(levels, "whole", None)
        done = whole(forest, rows, want_finals) if whole is not None else None
        if done is None:
            lp = _level_by_level(ctx, forest, levels, rows, finals if want_finals else None)
    if done is not None:  # every level in one call
        lp, end_states = done
        if ctx.oov_penalty:  # (target_log_prob's penalty: the edges into OOV words)
            oov = torch.from_numpy(forest.tok_ident >= ctx.n_vocab).to(ctx.device)
            oov[:forest.n_parts] = False
            lp[:forest.n_nodes][oov] -= ctx.oov_penalty
        if want_finals:
            for h, j in enumerate(np.searchsorted(forest.ends, forest.end_node).tolist()):
                finals[h] = (end_states, j)
    values = (-lp[torch.from_numpy(forest.path).to(ctx.device)]).double().tolist()
    costs: List[Costs] = []
    pos = 0
    for hyps, _ in parts:
        for h in hyps:
            n = len(h.ids) + 1
            costs.append(values[pos:pos + n])
            pos += n
    return costs, finals


def _level_by_level(ctx: RunContext, forest: LevelForest, levels, rows: torch.Tensor,
                    finals: Optional[List[Optional[Tuple[LMState, int]]]]) -> torch.Tensor:
    """score_levels' calls, one per level: the log-probabilities of every edge slot; with
    ``finals``, each hypothesis' state after its last word put there."""
    N = forest.n_nodes
    lp = torch.zeros(2 * N, device=ctx.device)
    ends_at: Dict[int, List[int]] = {}  # end node -> the hypotheses that end there
    if finals is not None:
        for h, n in enumerate(forest.end_node.tolist()):
            ends_at.setdefault(n, []).append(h)
    n_levels = len(forest.level_start) - 1
    for d in range(n_levels):
        lo, hi = int(forest.level_start[d]), int(forest.level_start[d + 1])
        if hi == lo:
            break
        reduce = _level_reducer(ctx, lp, *forest.level_edges(d))
        levels.level(torch.from_numpy(forest.tok_id[lo:hi]).to(ctx.device), rows, reduce,
                     torch.from_numpy(forest.tok_ident[lo:hi]).to(ctx.device))
        ended = forest.level_ends(d) if finals is not None else ()
        if len(ended):
            kept = levels.states(torch.from_numpy(ended - lo).to(ctx.device))
            for j, n in enumerate(ended.tolist()):
                for h in ends_at[n]:
                    finals[h] = (kept, j)
        if d + 1 < n_levels and forest.level_start[d + 2] > hi:
            rows = torch.from_numpy(forest.parent[hi:forest.level_start[d + 2]] - lo).to(ctx.device)
    return lp


class _ForwardLevels:
    """The levels through ``ctx.forward`` (a model without level steps): LevelSteps' calls."""

    def __init__(self, ctx: RunContext, starts: LMState):
        self.ctx, self.last = ctx, starts

    def level(self, ids: torch.Tensor, parents: torch.Tensor, reduce, ident: torch.Tensor) -> None:
        self.last = self.ctx.forward(ids.view(-1, 1), ident.view(-1, 1), self.last, parents, reduce)

    def states(self, rows: torch.Tensor) -> LMState:
        return self.last.select(rows)


def _level_reducer(ctx: RunContext, lp: torch.Tensor, e_row: np.ndarray, e_id: np.ndarray,
                   e_ident: np.ndarray, e_slot: np.ndarray):
    """The ``reduce`` of one level's forward call: edge j is scored from row ``e_row[j]`` of the
    output (sorted); fills ``lp[e_slot]``."""
    dev = ctx.device
    row_t, id_t = torch.from_numpy(e_row).to(dev), torch.from_numpy(e_id).to(dev)
    ident_t, slot_t = torch.from_numpy(e_ident).to(dev), torch.from_numpy(e_slot).to(dev)

    def reduce(out: HeadOutput, s: int, e: int) -> None:
        a, b = (int(i) for i in np.searchsorted(e_row, [s, e]))
        if a == b:
            return
        r = row_t[a:b] - s
        t = torch.zeros_like(r)
        tident = ident_t[a:b]
        lp[slot_t[a:b]] = target_log_prob(out, r, t, id_t[a:b], tident, tident >= ctx.n_vocab,
                                          ctx.oov_penalty)

    return reduce
