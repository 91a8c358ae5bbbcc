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

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from rescore.engine.forest import LevelForest
from rescore.engine.forward import RunContext, target_log_prob
from rescore.engine.types import Costs, Hyp
from rescore.models.base import HeadOutput, LMState


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
        done = levels.whole(forest, rows, want_finals) if levels.whole is not None else None
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

    whole = None  # (no call that runs every level at once: LevelSteps.whole)

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
