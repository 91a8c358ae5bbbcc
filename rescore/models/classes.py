"""The class-factored output layer (Goodman 2001; Mikolov et al. 2011, "Extensions of recurrent
neural network language model", §3): ``--output class --classes C``.

Every word w belongs to one class c(w), and

    log P(w | h) = log softmax(U h + d)[c(w)] + log softmax_{v in c(w)}(W_v . h + b_v)[w]

with U (C x H) the class layer and W (V x H) the word output rows, tied with the input
embedding (the rows of ``NeuralLM.decoder``, read through an index, never copied). Both
factors are exact softmaxes, so P is normalised over the vocabulary; computing it for one target
costs (C + |c(w)|) x H multiply-adds instead of V x H. A head with history slots (the implicit
pointer) adds ``extra`` classes: its L slots are one more class, normalised within
(``PointerHead``).

Classes are binned by training frequency (``frequency_classes``) and stored in the checkpoint as
two (V,) int64 buffers, ``word_class`` (w -> c(w)) and ``word_pos`` (w -> its index within its
class), so scoring needs no training text.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor, nn


def frequency_classes(counts: Tensor, n_classes: int) -> Tensor:
    """(V,) int64 class of each word from (V,) training counts: C bins of about equal unigram
    mass, each at most ceil(2V / C) words.

    Words are taken in order of decreasing count (ties by id) and a class is closed once the
    cumulative count reaches the next multiple of total / C (Mikolov et al. 2011's frequency
    binning): every class then holds ~1/C of the training tokens, so the expected within-class
    cost of a token is ~V/C rows and a token costs ~(C + V/C) x H, smallest near C = sqrt(V).
    Plain mass binning puts the rare tail into huge classes (the last 1/C of the mass of a
    33k-word vocabulary is thousands of words), and the largest class M bounds the per-edge
    cost of the rescoring engine and the (C x M) table of the full distribution, so a class is
    also closed at ceil(2V / C) words: M <= 2V/C, i.e. at most twice the mean class size. A
    class is never closed by mass while the words left would not fit the classes left, and the
    last classes take one word each when words run short, so all C classes are non-empty.
    """
    V = counts.numel()
    if not 1 <= n_classes <= V:
        raise ValueError(f"--classes {n_classes}: between 1 and the vocabulary size {V}")
    counts = counts.double().clamp(min=0).tolist()
    order = sorted(range(V), key=lambda w: (-counts[w], w))
    cap = math.ceil(2 * V / n_classes)
    total = sum(counts) or 1.0
    word_class = [0] * V
    c, size, cum = 0, 0, 0.0
    for i, w in enumerate(order):
        word_class[w] = c
        size += 1
        cum += counts[w]
        words_left, classes_left = V - i - 1, n_classes - c - 1
        if classes_left == 0:
            continue  # the last class takes the rest (the cap keeps it <= cap, see below)
        full = size >= cap or words_left <= classes_left  # one word per class from here
        by_mass = cum >= total * (c + 1) / n_classes and words_left <= classes_left * cap
        if full or by_mass:
            c, size = c + 1, 0
    return torch.tensor(word_class, dtype=torch.long)


def class_positions(word_class: Tensor, n_classes: int) -> Tensor:
    """(V,) int64 index of each word within its class (in id order)."""
    V = word_class.numel()
    pos = torch.empty(V, dtype=torch.long)
    seen = [0] * n_classes
    for w, c in enumerate(word_class.tolist()):
        pos[w] = seen[c]
        seen[c] += 1
    return pos


class ClassDecoder(nn.Module):
    """The class-factored output layer: class rows U (C + extra, H), the tied word rows and the
    word -> class index. Heads with ``supports_class_output`` take it in place of the
    ``nn.Linear`` decoder (rescore.models.heads).

    Buffers (in the state dict, so in the checkpoint): ``word_class`` (V,) int64 and
    ``word_pos`` (V,) int64. Derived after building and after every ``load_state_dict``:
    ``perm`` (V,) the words sorted by (class, position), so class c is ``perm[start[c]:start[c+1]]``.
    """

    def __init__(self, words: nn.Linear, n_classes: int, word_class: Tensor, extra: int = 0):
        super().__init__()
        V, H = words.weight.shape
        self.words = words  # tied: weight (V, H) is the embedding matrix
        self.n_classes = n_classes  # C
        self.classes = nn.Linear(H, n_classes + extra)  # U, d; the extra rows: a head's own
        self.register_buffer("word_class", word_class.clone())
        self.register_buffer("word_pos", class_positions(word_class, n_classes))
        self._index()
        self.register_load_state_dict_post_hook(lambda module, keys: module._index())

    def _index(self) -> None:
        """Check the buffers and derive the member table from them."""
        wc, pos, C = self.word_class.cpu(), self.word_pos.cpu(), self.n_classes
        V = self.words.weight.shape[0]
        if wc.shape != (V,) or pos.shape != (V,) or wc.dtype != torch.long \
                or bool((wc < 0).any()) or bool((wc >= C).any()):
            raise ValueError(f"a word -> class index of {V} words into {C} classes")
        sizes = torch.bincount(wc, minlength=C)
        if bool((sizes == 0).any()):
            raise ValueError(f"{int((sizes == 0).sum())} empty classes")
        key = wc * V + pos  # (class, position) order; positions 0..size-1 within each class
        perm = torch.argsort(key)
        start = torch.zeros(C + 1, dtype=torch.long)
        start[1:] = torch.cumsum(sizes, 0)
        if not torch.equal(pos[perm], torch.arange(V) - start[wc[perm]]):
            raise ValueError("within-class positions 0 .. size - 1 in every class")
        self.register_buffer("perm", perm.to(self.word_class.device), persistent=False)
        self.starts = start.tolist()  # class c: perm[starts[c]:starts[c + 1]]
        self.max_class = int(sizes.max())  # M

    def class_logits(self, hidden: Tensor) -> Tensor:
        """(..., H) -> (..., C + extra): U h + d."""
        return self.classes(hidden)

    def within(self, h: Tensor, ids: Tensor, with_norm: bool = False):
        """log softmax over the members of c(w) of W h + b, at w: (E, H) float, (E,) int64 ->
        (E,) float32. |c(w)| x H per row; rows are grouped by class, one product per class.
        ``with_norm``: also the (E,) log-normaliser of each row's class (the within-class log Z
        that self-normalised training drives to 0), as a pair."""
        W, b = self.words.weight, self.words.bias
        cls = self.word_class[ids]  # (E,)
        order = torch.argsort(cls)
        present, n_per = torch.unique_consecutive(cls[order], return_counts=True)
        n_per = n_per.tolist()
        # rows sorted by class and split: one gather and one split (whose backward is one
        # concatenation), not an indexing per class (each would backpropagate a full zero
        # gradient: C x (E x H), and C x (V x H) for the weights)
        hs = h[order].split(n_per)
        ps = self.word_pos[ids][order].split(n_per)
        if torch.is_grad_enabled() and W.requires_grad:  # training: the rows in class order
            sizes = [e - s for s, e in zip(self.starts[:-1], self.starts[1:])]
            Ws, bs = W[self.perm].split(sizes), b[self.perm].split(sizes)
        parts, norms = [], []
        for c, hc, pc in zip(present.tolist(), hs, ps):
            if torch.is_grad_enabled() and W.requires_grad:
                Wc, bc = Ws[c], bs[c]  # (|c|, H), (|c|,)
            else:  # scoring: only the classes asked for
                members = self.perm[self.starts[c]:self.starts[c + 1]]
                Wc, bc = W.index_select(0, members), b.index_select(0, members)
            logits = torch.addmm(bc.to(hc.dtype), hc, Wc.t().to(hc.dtype)).float()  # (n, |c|)
            lse = torch.logsumexp(logits, dim=1)
            parts.append(logits.gather(1, pc.unsqueeze(1)).squeeze(1) - lse)
            norms.append(lse)
        if not parts:
            empty = h.new_zeros(0, dtype=torch.float32)
            return (empty, empty) if with_norm else empty
        back = torch.argsort(order)
        out = torch.cat(parts)[back]  # from class order back to the rows' order
        return (out, torch.cat(norms)[back]) if with_norm else out

    def scorer(self, hidden: Tensor, class_lp: Tensor,
               offset: Optional[Tensor] = None) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """``HeadOutput.vocab_score``, exact: for (E,) rows b, positions t and ids, log P(w) =
        class_lp[b, t, c(w)] + within(hidden[b, t], w) (+ offset[b, t]), (E,) float32.
        hidden (B, T, H); class_lp (B, T, >= C) the class log-probs (computed once per
        position); offset (B, T) a head's gate."""

        def score(b: Tensor, t: Tensor, ids: Tensor) -> Tensor:
            s = class_lp[b, t, self.word_class[ids]].float() + self.within(hidden[b, t], ids)
            if offset is not None:
                s = s + offset[b, t].float()
            return s

        return score

    def scorer_with_norm(self, hidden: Tensor,
                         class_lp: Tensor) -> Callable[[Tensor, Tensor, Tensor], Tuple[Tensor, Tensor]]:
        """For self-normalised training: (b, t, ids) -> (log P(w), the within-class log Z of
        c(w)), each (E,) float32, in one pass (``scorer`` without an offset, and the
        normaliser that a (B, T) ``HeadOutput.log_norm`` cannot hold: it depends on the target)."""

        def score(b: Tensor, t: Tensor, ids: Tensor) -> Tuple[Tensor, Tensor]:
            within, log_z = self.within(hidden[b, t], ids, with_norm=True)
            return class_lp[b, t, self.word_class[ids]].float() + within, log_z

        return score

    def raw_scorer(self, hidden: Tensor) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """``HeadOutput.vocab_score`` without either normaliser (``--normalize none`` of a model
        trained with ``--self-norm``): (U h + d)[c(w)] + (W h + b)[w], the two rows a target
        needs and nothing else, 2 x H multiply-adds per target instead of (C + |c(w)|) x H."""
        U, d = self.classes.weight, self.classes.bias
        W, bw = self.words.weight, self.words.bias

        def score(b: Tensor, t: Tensor, ids: Tensor) -> Tensor:
            h = hidden[b, t].float()  # (E, H)
            c = self.word_class[ids]
            return (torch.einsum("eh,eh->e", h, U[c].float()) + d[c].float()
                    + torch.einsum("eh,eh->e", h, W[ids].float()) + bw[ids].float())

        return score

    def full_log_probs(self, hidden: Tensor, class_lp: Tensor) -> Tensor:
        """All V log-probs: (..., H), (..., >= C) -> (..., V) float32. V x H plus a (C x M)
        table per position: for perplexity-style uses and tests, not the hot paths."""
        logits = self.words(hidden).float()  # (..., V)
        C, M, V = self.n_classes, self.max_class, logits.shape[-1]
        table = torch.full((C, M), V, dtype=torch.long, device=logits.device)  # V: padding
        table[self.word_class, self.word_pos] = torch.arange(V, device=logits.device)
        padded = torch.cat([logits, logits.new_full(logits.shape[:-1] + (1,), float("-inf"))], -1)
        lse = torch.logsumexp(padded[..., table], dim=-1)  # (..., C)
        return class_lp[..., self.word_class].float() + logits - lse[..., self.word_class]
