"""The prefix forests of the fast engine (rescore.engine.fast): the tries of one micro-batch of
hypotheses, each distinct prefix once. ``PrefixForest`` node by node in plain Python (segments),
``LevelForest`` in numpy arrays numbered level by level (rescore.engine.levels); ``TokenTrie``,
the subword-token trie of the Hugging Face engine (rescore.engine.hf). No torch."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from rescore.engine.types import Hyp


class PrefixForest:
    """The prefix tries of one micro-batch (parts of utterances of one wave), as segments.

    A node is a distinct consumed prefix ``<eos> w1 .. wd`` of one utterance; its model output
    gives the log-probabilities of its edges (the distinct next targets: words or ``<eos>``).
    A segment is a maximal chain of nodes in which every node but the last has exactly one
    child; it runs as one multi-token forward call row from the state of the node before it::

        <eos> it is | a  cat          segments: [<eos> it is] [a cat] [was a cat] [the end]
                    \\ was a cat        calls:    round 0: T=3 x1 (roots of every utterance)
                                                 round 1: T=2 x1, T=3 x1 (by exact length)

    so every distinct prefix is computed once, no padding enters any row, and the model state
    is copied once per segment rather than once per token (a Transformer's KV cache is big).
    """

    def __init__(self):
        self.tok_id: List[int] = []       # node -> input token id
        self.tok_ident: List[int] = []    # node -> input identity
        self.children: List[List[int]] = []
        self.parent: List[int] = []       # node -> its parent, -1 for a root
        self.root_row: Dict[int, int] = {}  # root node -> row of the start states
        self.roots: List[int] = []
        self.node_edges: List[List[int]] = []  # node -> its edges
        self.e_id: List[int] = []         # edge -> target id
        self.e_ident: List[int] = []      # edge -> target identity
        self.hyp_edges: List[List[int]] = []  # hypothesis -> its edges, end of sentence last
        self.hyp_node: List[int] = []     # hypothesis -> the node of its last word (or root)
        self._child: Dict[Tuple[int, int], int] = {}
        self._edge: Dict[Tuple[int, int], int] = {}
        # (node, identity) -> (edge, child node): a shared prefix costs one lookup per token
        self._walk: Dict[Tuple[int, int], Tuple[int, int]] = {}

    def _node(self, parent: int, tok_id: int, tok_ident: int, root_row: int = -1) -> int:
        key = (parent, tok_ident) if parent >= 0 else (-1 - root_row, tok_ident)
        n = self._child.get(key)
        if n is None:
            n = self._child[key] = len(self.tok_id)
            self.tok_id.append(tok_id)
            self.tok_ident.append(tok_ident)
            self.children.append([])
            self.parent.append(parent)
            self.node_edges.append([])
            if parent >= 0:
                self.children[parent].append(n)
            else:
                self.root_row[n] = root_row
                self.roots.append(n)
        return n

    def _edge_of(self, node: int, tok_id: int, tok_ident: int) -> int:
        e = self._edge.get((node, tok_ident))
        if e is None:
            e = self._edge[(node, tok_ident)] = len(self.e_id)
            self.e_id.append(tok_id)
            self.e_ident.append(tok_ident)
            self.node_edges[node].append(e)
        return e

    def add(self, root_row: int, hyps: List[Hyp], eos: int) -> None:
        """Add one utterance (part) starting from row ``root_row`` of the start states."""
        walk, get = self._walk, self._walk.get
        root = self._node(-1, eos, eos, root_row)
        for h in hyps:
            node = root
            path = []
            for w_id, w_ident in zip(h.ids, h.ident):
                step = get((node, w_ident))
                if step is None:
                    step = walk[node, w_ident] = (self._edge_of(node, w_id, w_ident),
                                                  self._node(node, w_id, w_ident))
                path.append(step[0])
                node = step[1]
            path.append(self._edge_of(node, eos, eos))
            self.hyp_edges.append(path)
            self.hyp_node.append(node)

    def segment(self, start: int, chain: bool) -> List[int]:
        """The chain of nodes from ``start`` while each node has exactly one child (with
        ``chain``), else ``start`` alone: one-token rows, the tries computed level by level."""
        seg = [start]
        while chain and len(self.children[seg[-1]]) == 1:
            seg.append(self.children[seg[-1]][0])
        return seg


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


class TokenTrie:
    """The token trie of some hypotheses after one context (the Hugging Face engine,
    rescore.engine.hf): node n is a token (``tok[n]``) after its parent's prefix (-1: the
    context); ``path[h]`` the nodes of hypothesis h's tokens. Nodes are numbered as they are
    first met; hypotheses added in sorted order number them in depth-first preorder, which
    rescore.engine.hf's block-wise tree attention relies on (token_tries)."""

    def __init__(self):
        self.tok: List[int] = []
        self.parent: List[int] = []
        self.depth: List[int] = []
        self.child = {}
        self.hyps: List[int] = []          # the hypotheses' indexes in their utterance
        self.path: List[List[int]] = []

    def new_nodes(self, h: List[int]) -> int:
        """How many nodes adding ``h`` would make."""
        node = -1
        for j, t in enumerate(h):
            node = self.child.get((node, t))
            if node is None:
                return len(h) - j
        return 0

    def add(self, index: int, h: List[int]) -> None:
        node, path = -1, []
        for t in h:
            nxt = self.child.get((node, t))
            if nxt is None:
                nxt = self.child[node, t] = len(self.tok)
                self.tok.append(t)
                self.parent.append(node)
                self.depth.append(1 + (self.depth[node] if node >= 0 else 0))
            path.append(nxt)
            node = nxt
        self.hyps.append(index)
        self.path.append(path)

    def tok_of_paths(self) -> List[List[int]]:
        return [[self.tok[n] for n in path] for path in self.path]


def token_tries(hyps: List[List[int]], budget: int) -> List["TokenTrie"]:
    """The tries of an utterance's hypotheses, sorted (neighbours share prefixes), each of at most
    ``budget`` nodes (at least one hypothesis)."""
    parts = [TokenTrie()] if hyps else []
    for i in sorted(range(len(hyps)), key=lambda i: hyps[i]):
        if parts[-1].hyps and len(parts[-1].tok) + parts[-1].new_nodes(hyps[i]) > budget:
            parts.append(TokenTrie())
        parts[-1].add(i, hyps[i])
    return parts
