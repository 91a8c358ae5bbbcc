"""The fast engine of rescore.engine.score: a prefix trie per utterance (rescore.engine.forest), each distinct
prefix computed once, utterance k of all conversations of a block of ``conv_batch`` side by side.

Schedules (the same costs): level by level (one-token rows; small states such as an LSTM's),
segments (branch-free chains as multi-token rows, equal lengths in one call; big states such as
a Transformer's KV cache) or tree (every node of a trie in one row under a tree attention mask,
sharing one copy of the carried KV cache; models with ``supports_tree``).

Carry first-pass: the start states come from the rank-1 chain first, then the utterances of a
block are scored in waves as independent ones, whatever their conversation
(``_run_first_pass_block``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from rescore.engine.forest import PrefixForest
from rescore.engine.forward import RunContext, progress_bar, target_log_prob
from rescore.engine.types import Costs, Hyp
from rescore.engine.levels import score_levels
from rescore.models.base import HeadOutput, LMState


def run_fast(ctx: RunContext, encoded, fixed) -> List[List[List[Costs]]]:
    bar = progress_bar(ctx, sum(len(u) for c in encoded for u in c), "fast")
    result: List[List[List[Costs]]] = []
    for b in range(0, len(encoded), ctx.settings.conv_batch):
        block = slice(b, b + ctx.settings.conv_batch)
        if ctx.settings.state_carry == "first-pass" and not _side_by_side_fills(ctx, encoded[block]):
            result += _run_first_pass_block(ctx, encoded[block], bar)
        else:  # (first-pass: rank 1 is the carried hypothesis, its state from the trie)
            result += yield from _run_fast_block(ctx, encoded[block], fixed[block], bar)
    bar.close()
    return result


def _side_by_side_fills(ctx: RunContext, encoded) -> bool:
    """Whether utterance k of each conversation of a block, side by side, makes waves of at
    least half of max_tokens hypotheses on average. Then the first-pass carry needs no chain run
    of its own: each rank 1's end state comes from its utterance's trie, as the rescored carry
    takes its best's; fewer conversations (one per job of Kaldi's carry) make small waves, so
    the rank-1 chain runs first and waves then take utterances of every conversation."""
    utts = [u for conv in encoded for u in conv]
    if not utts:
        return True
    per_wave = len(encoded) * sum(len(u) for u in utts) / len(utts)
    return per_wave >= ctx.settings.max_tokens / 2


# An utterance of a wave: (its key, its hypotheses, the row of its start state)
Utt = Tuple[object, List[Hyp], int]
# A micro-batch: (utterance key, its hypotheses, the indexes of those scored, start row)
Item = Tuple[object, List[Hyp], List[int], int]


def _groups(ctx: RunContext, utts: List[Utt]) -> List[List[Item]]:
    """Micro-batches: whole utterances while they fit in max_tokens hypotheses; a bigger N-best
    list is cut into parts of sorted hypotheses (neighbours share most prefixes)."""
    cap = ctx.settings.max_tokens
    items: List[Item] = []
    for key, hyps, row in utts:
        order = list(range(len(hyps)))
        if len(hyps) > cap:
            order.sort(key=lambda i: hyps[i].words)
        for s in range(0, len(order), cap):
            items.append((key, hyps, order[s:s + cap], row))
    groups: List[List[Item]] = [[]]
    size = 0
    for it in items:
        if size + len(it[2]) > cap and groups[-1]:
            groups.append([])
            size = 0
        groups[-1].append(it)
        size += len(it[2])
    return groups


def _score_wave(ctx: RunContext, utts: List[Utt], starts: LMState, bar,
                finals: Optional[Dict[Tuple[object, int], Tuple[LMState, int]]] = None
                ) -> Dict[object, List[Optional[Costs]]]:
    """The costs of every hypothesis of utterances scored side by side, each from its row of
    ``starts``: {utterance key: costs per hypothesis}."""
    costs: Dict[object, List[Optional[Costs]]] = {key: [None] * len(hyps) for key, hyps, _ in utts}
    for group in _groups(ctx, utts):
        _score_group(ctx, group, starts, costs, finals)
        bar.update(sum(len(ix) for _, _, ix, _ in group))
    for _, hyps, _ in utts:
        ctx.count(hyps)
    return costs


def _set_rows(states: LMState, rows: List[int], new: LMState, ctx: RunContext) -> None:
    """Rows ``rows`` of ``states`` become the rows of ``new``, in place."""
    states.put(ctx.tensor(rows), new)


def _run_fast_block(ctx: RunContext, encoded, fixed, bar) -> List[List[List[Costs]]]:
    """Conversations side by side: wave k = utterance k of every conversation of the block."""
    result: List[List[List[Costs]]] = [[[] for _ in conv] for conv in encoded]
    n_waves = max((len(c) for c in encoded), default=0)
    # The state each conversation's next utterance starts from: one row per conversation.
    starts = ctx.model.initial_state(len(encoded), ctx.device)
    for k in range(n_waves):
        convs = [c for c in range(len(encoded)) if k < len(encoded[c])]
        # the state after each hypothesis, where the schedule forms it (levels): the carry then
        # needs no recomputation
        finals: Optional[Dict[Tuple[object, int], Tuple[LMState, int]]] = (
            {} if ctx.settings.state_carry != "none" else None)
        wave_costs = _score_wave(ctx, [(c, encoded[c][k], c) for c in convs], starts, bar, finals)
        for c in convs:
            result[c][k] = wave_costs[c]
        if ctx.settings.state_carry == "none":
            continue
        # Carry: the state after the best hypothesis of each conversation, from its start row.
        carried = [c for c in convs if encoded[c][k]]
        if carried:
            best = yield [(result[c][k], fixed[c][k]) for c in carried]  # (see _lockstep)
            if finals is not None and all((c, i) in finals for c, i in zip(carried, best)):
                ends = LMState.cat([finals[c, i][0].select(ctx.tensor([finals[c, i][1]]))
                                    for c, i in zip(carried, best)])
            else:
                ends = ctx.end_states(starts, carried,
                                      [encoded[c][k][i] for c, i in zip(carried, best)])
            ends = ctx.carried(ends, [(encoded[c][k], result[c][k], fixed[c][k], i)
                                      for c, i in zip(carried, best)])
            _set_rows(starts, carried, ends, ctx)
    return result


# first-pass carry: most bytes of start states held for one wave of utterances
FIRST_PASS_STATE_BYTES = 256 * 1024 * 1024


def _run_first_pass_block(ctx: RunContext, encoded, bar) -> List[List[List[Costs]]]:
    """Carry first-pass: every utterance's start state depends only on the rank-1 hypotheses
    before it, known in advance. The chain of rank-1 hypotheses runs first (utterance k of
    every conversation of the block side by side, states only); then the utterances are
    scored in waves as independent ones from their start states, up to max_tokens hypotheses
    (and FIRST_PASS_STATE_BYTES of start states) in a wave, whatever their conversation."""
    result: List[List[List[Costs]]] = [[[] for _ in conv] for conv in encoded]
    chain = ctx.model.initial_state(len(encoded), ctx.device)
    row_bytes = max(1, _state_bytes_per_row(chain))
    utts: List[Utt] = []
    rows: List[LMState] = []
    n_hyps = 0

    def flush():
        starts = LMState.cat(rows) if len(rows) > 1 else rows[0]
        for (c, k), costs in _score_wave(ctx, utts, starts, bar).items():
            result[c][k] = costs
        utts.clear()
        rows.clear()

    for k in range(max((len(c) for c in encoded), default=0)):
        convs = [c for c in range(len(encoded)) if k < len(encoded[c])]
        for c in convs:
            hyps = encoded[c][k]
            if utts and (n_hyps + len(hyps) > ctx.settings.max_tokens
                         or (len(utts) + 1) * row_bytes > FIRST_PASS_STATE_BYTES):
                flush()
                n_hyps = 0
            utts.append(((c, k), hyps, len(utts)))
            rows.append(chain.select(ctx.tensor([c])))
            n_hyps += len(hyps)
        carried = [c for c in convs if encoded[c][k]]
        if carried:  # the chain: the state after each rank-1 hypothesis
            _set_rows(chain, carried, ctx.end_states(chain, carried, [encoded[c][k][0] for c in carried]), ctx)
    if utts:
        flush()
    return result


SEGMENT_STATE_BYTES = 64 * 1024  # schedule "auto": segments above this state size per row


def _state_bytes_per_row(state: LMState) -> int:
    return sum(v[0].numel() * v.element_size() for v in state.tensors.values())


def _levels(ctx: RunContext, state: LMState) -> bool:
    """Whether the schedule is levels (one-token rows): asked for, or ``auto`` with a state of
    at most SEGMENT_STATE_BYTES per row (an LSTM's; a Transformer's KV cache goes by segments)."""
    schedule = ctx.settings.schedule
    return schedule == "levels" or (schedule == "auto" and _state_bytes_per_row(state) <= SEGMENT_STATE_BYTES)


def _score_group(ctx: RunContext, group: List[Item], starts: LMState,
                 wave_costs: Dict[object, List[Optional[Costs]]],
                 finals: Optional[Dict[Tuple[object, int], Tuple[LMState, int]]] = None) -> None:
    """Score one micro-batch: its tries' segments, round by round (a segment is ready once the
    node before it is computed), segments of equal length together in one forward call.

    Two schedules of the same computation: ``chain`` (segments: one state copy per segment;
    best for big states such as a Transformer's KV cache) or levels (one-token rows: fewer,
    bigger calls; best for small states such as an LSTM's, where copies are cheap). With levels,
    ``finals[(utterance key, hypothesis)]`` receives (states, row) of the state after each
    hypothesis' last word, for the carry."""
    tree = ctx.settings.schedule == "tree"
    chain = not _levels(ctx, starts)
    if not chain:  # levels: the tries as arrays (rescore.engine.levels)
        owners = [(key, i) for key, _, idx, _ in group for i in idx]
        costs, ends = score_levels(ctx, [([hyps[i] for i in idx], row) for _, hyps, idx, row in group],
                                   starts, want_finals=finals is not None)
        for (key, i), c, end in zip(owners, costs, ends):
            wave_costs[key][i] = c
            if finals is not None:
                finals[key, i] = end
        return
    forest = PrefixForest()
    owners: List[Tuple[object, int]] = []  # (utterance key, hypothesis index) per forest hypothesis
    for key, hyps, idx, row in group:
        forest.add(row, [hyps[i] for i in idx], ctx.eos)
        owners.extend((key, i) for i in idx)
    # (log-probabilities of every edge, filled by the calls; edge target ids; their identities)
    edges = (torch.empty(len(forest.e_id), device=ctx.device), ctx.tensor(forest.e_id),
             ctx.tensor(forest.e_ident))
    edge_lp = edges[0]
    ends_at: Dict[int, List[Tuple[object, int]]] = {}  # node -> hypotheses whose last word it is
    for owner, node in zip(owners, forest.hyp_node):
        ends_at.setdefault(node, []).append(owner)
    roots = forest.roots
    if tree:
        roots = _score_trees(ctx, forest, starts, *edges)
    # ready: (first node of a segment, row of its start state in `states`)
    ready = [(n, forest.root_row[n]) for n in roots]
    states = starts
    while ready:
        by_len: Dict[int, List[Tuple[List[int], int]]] = {}
        for start, row in ready:
            seg = forest.segment(start, chain)
            by_len.setdefault(len(seg), []).append((seg, row))
        next_ready, next_states = [], []
        n_next = 0
        for T in sorted(by_len):
            segs = by_len[T]
            end = _forward_segments(ctx, forest, segs, states, edges)
            if finals is not None and not chain:
                rows = [g for g, (seg, _) in enumerate(segs) if seg[-1] in ends_at]
                if rows:
                    kept = end.select(ctx.tensor(rows))
                    for j, g in enumerate(rows):
                        for owner in ends_at[segs[g][0][-1]]:
                            finals[owner] = (kept, j)
            # keep the end states of segments whose last node branches
            keep = [g for g, (seg, _) in enumerate(segs) if forest.children[seg[-1]]]
            if keep:
                next_states.append(end.select(ctx.tensor(keep)))
                for j, g in enumerate(keep):
                    next_ready += [(ch, n_next + j) for ch in forest.children[segs[g][0][-1]]]
                n_next += len(keep)
        ready = next_ready
        if next_states:
            states = LMState.cat(next_states) if len(next_states) > 1 else next_states[0]
    flat = [e for path in forest.hyp_edges for e in path]
    costs = (-edge_lp[ctx.tensor(flat)]).double().tolist()
    pos = 0
    for (c, i), path in zip(owners, forest.hyp_edges):
        wave_costs[c][i] = costs[pos:pos + len(path)]
        pos += len(path)


def _forward_segments(ctx: RunContext, forest: PrefixForest, segs: List[Tuple[List[int], int]],
                      states: LMState, edges: Tuple[Tensor, Tensor, Tensor]) -> LMState:
    """One forward call of segments of one length T: (node chain, row of its start state in
    ``states``) each; fills the log-probabilities of their nodes' edges (``edges[0]``) and
    returns the (G,) states after the segments."""
    ids = ctx.tensor([[forest.tok_id[n] for n in seg] for seg, _ in segs])  # (G, T)
    ident = ctx.tensor([[forest.tok_ident[n] for n in seg] for seg, _ in segs])
    # the edges of every node of these segments: (segment, position, edge)
    node_edges = forest.node_edges
    if ids.shape[1] == 1:  # levels: one node per row (comprehensions: this runs per trie node)
        ee = [e for seg, _ in segs for e in node_edges[seg[0]]]
        eb = [g for g, (seg, _) in enumerate(segs) for _ in node_edges[seg[0]]]
        et = [0] * len(ee)
    else:
        eb, et, ee = [], [], []
        for g, (seg, _) in enumerate(segs):
            for t, n in enumerate(seg):
                for e in node_edges[n]:
                    eb.append(g)
                    et.append(t)
                    ee.append(e)
    reduce = _edge_reducer(ctx, *edges, eb, et, ee)
    return ctx.forward(ids, ident, states, ctx.tensor([row for _, row in segs]), reduce)


def _edge_reducer(ctx: RunContext, edge_lp: Tensor, e_id_all: Tensor, e_ident_all: Tensor,
                  eb: List[int], et: List[int], ee: List[int]):
    """The ``reduce`` of a forward call whose rows carry edges: edge ``ee[j]`` is scored from
    row ``eb[j]``, position ``et[j]`` of the output; fills ``edge_lp``."""
    eb_t, et_t, ee_t = ctx.tensor(eb), ctx.tensor(et), ctx.tensor(ee)
    n_rows = max(eb, default=-1) + 1

    def reduce(out: HeadOutput, s: int, e: int) -> None:
        if s == 0 and e >= n_rows:  # the whole call in one chunk: every edge
            b, t, ed = eb_t, et_t, ee_t
        else:
            sel = ((eb_t >= s) & (eb_t < e)).nonzero().squeeze(1)
            b, t, ed = eb_t[sel] - s, et_t[sel], ee_t[sel]
        tid, tident = e_id_all[ed], e_ident_all[ed]
        edge_lp[ed] = target_log_prob(out, b, t, tid, tident, tident >= ctx.n_vocab,
                                      ctx.oov_penalty)

    return reduce


def _score_trees(ctx: RunContext, forest: PrefixForest, starts: LMState, edge_lp: Tensor,
                 e_id_all: Tensor, e_ident_all: Tensor) -> List[int]:
    """Score every trie of at most ``max_tokens`` nodes whole: one row per trie under a tree
    attention mask (``model.forward_tree``), tries of similar size side by side, rows padded
    to the largest (a padding node sees only itself; its output is not read). Fills
    ``edge_lp`` for their edges; returns the roots of the bigger tries, left to segments."""
    members: Dict[int, List[int]] = {r: [] for r in forest.roots}
    root_of: List[int] = []
    for n, p in enumerate(forest.parent):  # parents come before children
        root_of.append(n if p < 0 else root_of[p])
        members[root_of[n]].append(n)
    small = sorted((r for r in forest.roots if len(members[r]) <= ctx.settings.max_tokens),
                   key=lambda r: len(members[r]))
    batches: List[List[int]] = []
    for r in small:  # by size: rows of one call have similar sizes, little padding
        if batches and len(members[r]) * (len(batches[-1]) + 1) <= ctx.settings.max_tokens:
            batches[-1].append(r)
        else:
            batches.append([r])
    for batch in batches:
        N = max(len(members[r]) for r in batch)
        B = len(batch)
        ids = [[ctx.eos] * N for _ in batch]
        ident = [[ctx.eos] * N for _ in batch]
        depth = [[0] * N for _ in batch]
        parent = [[0] * N for _ in batch]  # local index; a root or padding node: itself
        eb, et, ee = [], [], []
        for b, r in enumerate(batch):
            pos = {n: i for i, n in enumerate(members[r])}
            for i, n in enumerate(members[r]):
                ids[b][i], ident[b][i] = forest.tok_id[n], forest.tok_ident[n]
                parent[b][i] = pos[forest.parent[n]] if n != r else i
                depth[b][i] = depth[b][parent[b][i]] + (n != r)
                for e in forest.node_edges[n]:
                    eb.append(b)
                    et.append(i)
                    ee.append(e)
            for i in range(len(members[r]), N):
                parent[b][i] = i
        depth_t, parent_t = torch.tensor(depth), torch.tensor(parent)
        # ancestor-or-self, one depth level at a time from the roots down
        ancestor = torch.eye(N, dtype=torch.bool).repeat(B, 1, 1)
        for d in range(1, int(depth_t.max()) + 1):
            bi, ii = (depth_t == d).nonzero(as_tuple=True)
            ancestor[bi, ii] |= ancestor[bi, parent_t[bi, ii]]

        reduce = _edge_reducer(ctx, edge_lp, e_id_all, e_ident_all, eb, et, ee)
        ctx.forward(ctx.tensor(ids), ctx.tensor(ident), starts,
                    ctx.tensor([forest.root_row[r] for r in batch]), reduce,
                    tree=(depth_t.to(ctx.device), ancestor.to(ctx.device)))
    done = set(small)
    return [r for r in forest.roots if r not in done]
