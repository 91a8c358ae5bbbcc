"""The prefix forest of the fast engine (rescore.engine.fast): the tries of one micro-batch of
hypotheses, each distinct prefix once. Plain Python, no torch."""

from __future__ import annotations

from typing import Dict, List, Tuple

from rescore.engine.forward import Hyp


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
