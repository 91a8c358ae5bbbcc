"""The one interface every language model of rescore offers, and the state it carries.

Training (rescore.train.loop), perplexity (rescore.train.ppl) and the rescoring engine (rescore.engine.score) use
only what is defined here, so a new body or head needs no special case anywhere else.

Conventions
-----------
* Tokens come in two parallel int64 tensors of the same shape:
  ``ids``   vocabulary ids (an out-of-vocabulary word has the id of ``<unk>``);
  ``ident`` word identities: any int64 that is equal for equal words and different for different
  words, also for words outside the vocabulary (see ``Vocabulary.encode``). Pointer heads compare
  identities, never vocabulary ids, so an OOV word in the history can still be copied.
* A sentence is scored as ``<eos> w1 ... wn`` -> ``w1 ... wn <eos>``: one boundary symbol that is
  both the first input and the last target (the PyTorch word-LM convention). The state carried to
  the next utterance is the state after consuming ``wn``; the next utterance starts with ``<eos>``
  as its first input, exactly as in training on concatenated sentences.
* Every head gives, for each position t, the probability of a target ``w`` as a mixture

      P(w) = exp(log_vocab[t, id(w)]) + sum_{i : slot_ident[t, i] == ident(w)} exp(log_slot[t, i])

  (softmax: no slots; implicit pointer: the V + L softmax of Li et al. 2020; PSMM, neural cache
  and pointer-generator: gate * P_vocab and (1 - gate) * attention). ``HeadOutput.log_prob``
  computes that for the targets; training minimises its negative mean, which for the implicit
  pointer is exactly the at-least-one-hot loss -log(y . s).
* ``LMState`` holds batch-first tensors of fixed shape per model (LSTM (h, c); Transformer a
  key/value cache of fixed capacity with a validity mask; the pointer history of the last L
  tokens), so states of different sequences can be gathered (``select``) and stacked (``cat``)
  without any model-specific code. Empty history slots have identity ``EMPTY`` and never match.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Protocol, Tuple

import torch
from torch import Tensor, nn

EMPTY = -1  # identity of a history slot that holds no token (start of a conversation)
# State tensors that hold the identities of the latest inputs, (B, L) int64, slot L - 1 the latest
# (a pointer head's history; the neural cache's own pairs since its utterance began): what
# forget_inputs empties.
HISTORY_IDENT_KEYS = ("hist_ident", "ncache_ident")


@dataclass
class HeadOutput:
    """What a model predicts at each position of a (B, T) input.

    log_vocab:  (B, T, V) float, log of the vocabulary part of the mixture (already gated).
    log_slot:   (B, T, L) float or None, log of the copy weight of each history slot.
    slot_ident: (B, T, L) int64 or None, identity of the token in each slot (EMPTY = none).
    hidden:     (B, T, H) float or None, the body output the head saw (the neural cache of
                rescore.models uses it as its query; Grave et al. 2017).
    aux_loss:   (B, T) float or None, an extra per-position training loss of the head (the
                pointer-generator's coverage term, See et al. 2017 eq. 13); training adds it to
                -log P(target) before averaging; perplexity ignores it.
    log_norm:   (B, T) float or None, log Z: the log of the normaliser of the head's V-sized
                softmax (softmax: over V; implicit pointer: over V + L; PSMM and the
                pointer-generator: P_vocab's, over V). Self-normalised training adds
                alpha * log_norm^2 (Devlin et al. 2014); unnormalised scoring leaves Z out.
    vocab_score: with unnormalised output (``forward(..., normalize=False)``) ``log_vocab``
                is None and ``vocab_score(b, t, ids)`` ((E,) int64 each -> (E,) float32) gives
                log_vocab[b, t, ids] without Z: the target rows of the output layer only, ~H
                per target instead of V x H per position. ``log_slot`` is then unnormalised
                too (implicit pointer: the raw slot logits; PSMM / pointer-generator keep their
                exact L-way attention, only P_vocab is left unnormalised).
                A class-factored output layer (``--output class``, rescore.models.classes)
                also gives ``log_vocab`` None and ``vocab_score``, normalised: (C + |c(w)|) x H
                per target; with the softmax head its ``log_norm`` is the class softmax's log Z
                (else None), and ``normalize=False`` gives the two raw rows, 2 x H per target.
    target_norm: the class-factored softmax head only: ``target_norm(b, t, ids)`` -> (log P(w),
                log Z of c(w)'s within-class softmax), (E,) float32 each, in one pass; that
                normaliser depends on the target, so ``log_norm`` cannot hold it. Self-normalised
                training adds alpha * its square too.
    """

    log_vocab: Optional[Tensor]
    log_slot: Optional[Tensor] = None
    slot_ident: Optional[Tensor] = None
    hidden: Optional[Tensor] = None
    aux_loss: Optional[Tensor] = None
    log_norm: Optional[Tensor] = None
    vocab_score: Optional[Callable[[Tensor, Tensor, Tensor], Tensor]] = None
    target_norm: Optional[Callable[[Tensor, Tensor, Tensor], Tuple[Tensor, Tensor]]] = None

    def vocab_at(self, b: Tensor, t: Tensor, ids: Tensor) -> Tensor:
        """log_vocab[b, t, ids] for (E,) int64 rows, positions and ids -> (E,) float."""
        if self.log_vocab is None:
            return self.vocab_score(b, t, ids)
        return self.log_vocab[b, t, ids]

    def log_prob(self, target_ids: Tensor, target_ident: Tensor) -> Tensor:
        """log P(target) at each position: (B, T) int64 ids and identities -> (B, T) float.

        With unnormalised output, the same mixture without the normaliser Z."""
        if self.log_vocab is None:
            b, t = positions(target_ids)
            lp = self.vocab_score(b, t, target_ids.reshape(-1)).view(target_ids.shape)
        else:
            lp = self.log_vocab.gather(-1, target_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
        if self.log_slot is None:
            return lp
        match = self.slot_ident == target_ident.unsqueeze(-1)  # (B, T, L)
        copy = self.log_slot.masked_fill(~match, float("-inf"))
        return torch.logsumexp(torch.cat([lp.unsqueeze(-1), copy], dim=-1), dim=-1)

    def log_prob_and_norm(self, target_ids: Tensor) -> Tuple[Tensor, Tensor]:
        """With ``target_norm`` (the class-factored softmax head): log P(target) and the
        within-class log Z of its class at each position, (B, T) float each, in one pass."""
        b, t = positions(target_ids)
        lp, log_z = self.target_norm(b, t, target_ids.reshape(-1))
        return lp.view(target_ids.shape), log_z.view(target_ids.shape)


class Part(nn.Module):
    """A body or a head of a NeuralLM (rescore.models.bodies, rescore.models.heads), and what it
    declares to the scoring engine, whose own inference paths (rescore.engine.lstm_steps) may run
    it in place of its forward. The engine asks these, never a part's class."""

    # A body: a stacked nn.LSTM ``rnn`` of ``layers`` x ``hidden``, state ``h`` and ``c`` (B,
    # layers, H): the engine may take its one-token steps from a (V, 4H) table (over trie
    # levels too) and its fused kernels.
    lstm_step = False
    # A head: one softmax over its ``decoder`` and no history or state, read for the targets
    # only: "softmax" (``decoder`` an nn.Linear (V, H)) or "class" (a class-factored
    # rescore.models.classes.ClassDecoder); None: a head the engine runs through its forward.
    softmax_output: Optional[str] = None


class Inference(Protocol):
    """What the scoring engine hands a model's forward (``inference=``) at inference, so that the
    engine, not the model, chooses how each part runs (its kernels, precision and the outputs it
    reads: the targets only): rescore.engine.lstm_steps.InferencePaths. A model that takes it
    declares ``takes_inference``; without it (training, perplexity, a test) every part runs its
    own forward in PyTorch."""

    def body_step(self, body: nn.Module, ids: Tensor, embedding: Tensor,
                  state: Dict[str, Tensor]) -> Optional[Tuple[Tensor, Dict[str, Tensor]]]:
        """The body's one-token step ((B, 1) ids; (hidden (B, 1, H), new body state)), or None:
        then the body's forward."""

    def head(self, head: nn.Module, hidden: Tensor, emb: Optional[Tensor], ident: Optional[Tensor],
             state: Dict[str, Tensor], normalize: bool) -> Tuple["HeadOutput", Dict[str, Tensor]]:
        """The head's output and new head state, read for its targets only."""


def positions(ids: Tensor) -> Tuple[Tensor, Tensor]:
    """The (row, position) of every entry of a (B, T) tensor, row-major: two (B * T,) int64."""
    B, T = ids.shape
    return (torch.arange(B, device=ids.device).repeat_interleave(T),
            torch.arange(T, device=ids.device).repeat(B))


@dataclass
class LMState:
    """Everything a model carries from one call to the next, as batch-first tensors.

    ``tensors`` maps a name to a tensor whose dim 0 is the batch; its other dims are fixed for a
    given model (no ragged caches), so ``select`` and ``cat`` work for every model alike.

    ``stores`` holds rows that many states share (a neural cache's history before the current
    utterance: megabytes per row, the same for every node of an utterance's trie): for a name
    in ``stores``, ``tensors[name]`` is each state's row of ``stores[name]`` ((B,) int64), so
    ``select`` copies row numbers, not rows. ``cat`` and ``put`` merge different stores, keeping
    only the rows still referred to.
    """

    tensors: Dict[str, Tensor] = field(default_factory=dict)
    stores: Dict[str, Tensor] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return next(iter(self.tensors.values())).shape[0]

    def select(self, index: Tensor) -> "LMState":
        """Rows ``index`` ((N,) int64) of every tensor: expand a trie level, pick best hyps."""
        return LMState({k: v.index_select(0, index) for k, v in self.tensors.items()}, dict(self.stores))

    @staticmethod
    def cat(states: Iterable["LMState"]) -> "LMState":
        states = list(states)
        keys = states[0].tensors.keys()
        out = LMState({k: torch.cat([s.tensors[k] for s in states], dim=0) for k in keys
                       if k not in states[0].stores})
        for name in states[0].stores:
            out.stores[name], out.tensors[name] = _merged([s.stores[name] for s in states],
                                                          [s.tensors[name] for s in states])
        return out

    def put(self, index: Tensor, new: "LMState") -> None:
        """Rows ``index`` ((N,) int64) become the rows of ``new``, in place (the tensors are
        replaced, not written into: others may share them)."""
        for key, v in self.tensors.items():
            if key in self.stores:
                continue
            v = v.clone()  # under autocast the new states may be in a lower precision
            v.index_copy_(0, index, new.tensors[key].to(v.dtype))
            self.tensors[key] = v
        for name, store in self.stores.items():
            same = new.stores[name] is store
            refs = self.tensors[name].clone()
            refs.index_copy_(0, index, new.tensors[name] + (0 if same else len(store)))
            self.tensors[name] = refs
            if not same:  # one store of the rows still referred to
                self.stores[name], self.tensors[name] = _merged(
                    [torch.cat([store, new.stores[name].to(store.dtype)])], [refs], compact=True)

    def detach(self) -> "LMState":
        return LMState({k: v.detach() for k, v in self.tensors.items()},
                       {k: v.detach() for k, v in self.stores.items()})


def _merged(stores: List[Tensor], refs: List[Tensor], compact: bool = False) -> Tuple[Tensor, Tensor]:
    """One store and the (B,) row numbers into it for states with ``stores`` and ``refs``: the
    one store where all share it (no copy) unless ``compact``, else the rows referred to,
    gathered."""
    if not compact and all(s is stores[0] for s in stores):
        return stores[0], torch.cat(refs) if len(refs) > 1 else refs[0]
    parts, out = [], []
    offset = 0
    for store, r in zip(stores, refs):
        rows, inv = compact_store(store, r)
        parts.append(rows.to(stores[0].dtype))
        out.append(inv + offset)
        offset += len(rows)
    return (torch.cat(parts) if len(parts) > 1 else parts[0]), (torch.cat(out) if len(out) > 1 else out[0])


def compact_store(store: Tensor, refs: Tensor) -> Tuple[Tensor, Tensor]:
    """(the rows of ``store`` that ``refs`` refer to, the refs into them)."""
    uniq, inv = torch.unique(refs, return_inverse=True)
    return store.index_select(0, uniq), inv


def has_history(state: LMState) -> bool:
    """Whether a model's state holds a word history (a pointer head, a neural cache)."""
    return any(k in state.tensors for k in HISTORY_IDENT_KEYS)


def forget_inputs(state: LMState, drop: List[List[bool]]) -> None:
    """Empty history slots of the latest inputs: ``drop[b][i]`` True empties the slot
    of row b's i-th of its last ``len(drop[b])`` inputs (the words of the hypothesis it has just
    consumed). The slot then never matches a target: the word can no longer be copied, while the
    body's state (and every other slot) stays as it is. The tensors are replaced, not written
    into: others may share them."""
    for key in HISTORY_IDENT_KEYS:
        if key not in state.tensors:
            continue
        ident = state.tensors[key] = state.tensors[key].clone()
        L = ident.shape[1]
        for b, flags in enumerate(drop):
            n = min(L, len(flags))
            cols = [L - n + i for i, f in enumerate(flags[len(flags) - n:]) if f]
            if cols:
                ident[b, cols] = EMPTY


class LanguageModel(nn.Module):
    """Base class: a body (LSTM or Transformer) and a head, behind one call.

    Subclasses set ``self.config`` (their @dataclass) and ``self.vocab`` and implement
    ``initial_state`` and ``forward``.
    """

    config: object
    vocab: object

    def initial_state(self, batch_size: int, device=None) -> LMState:
        """The state at the start of a conversation (zero body state, empty history)."""
        raise NotImplementedError

    def forward(self, ids: Tensor, ident: Tensor, state: LMState) -> tuple[HeadOutput, LMState]:
        """Consume inputs ``ids``/``ident`` ((B, T) int64) from ``state``.

        Returns the head output for the next-token prediction at each of the T positions and the
        state after the last position. Calling it on T tokens at once must equal calling it T
        times on one token (the engine relies on it; the tests check it).

        A model with ``supports_unnormalized`` also takes ``normalize=False``: the head output
        then leaves out the normaliser Z (``HeadOutput.vocab_score``).
        """
        raise NotImplementedError

    # What the engine reads of a model besides its forward: declared here with the defaults of a
    # plain softmax model; a model whose config says otherwise overrides them.
    @property
    def self_norm(self) -> float:
        """The weight alpha of the (log Z)^2 penalty it was trained with (0: not self-normalised)."""
        return 0.0

    @property
    def class_output(self) -> bool:
        """Its output layer is class-factored (it forms no (rows, V) softmax)."""
        return False

    @property
    def head_name(self) -> str:
        """The name of its output head, for messages."""
        return type(self).__name__

    @property
    def hidden_size(self) -> int:
        """H of the ``HeadOutput.hidden`` (B, T, H) its forward returns: the query a neural cache
        (rescore.models.cache) keys on. A model that returns none has no hidden size."""
        raise ValueError(f"{type(self).__name__} returns no hidden states (no hidden size) for a neural cache")

    supports_tree = False  # ``forward_tree`` (all nodes of prefix trees in one call) works
    supports_unnormalized = False  # ``forward(..., normalize=False)`` works
    takes_inference = False  # ``forward(..., inference=...)`` (and forward_tree's) works: Inference
    scores_nbest = False  # scored by a scorer of its own, not through forward (rescore.models.hf.HfLM)

    def lstm_levels(self) -> bool:
        """Whether the engine may run the model over the levels of prefix tries by its own
        one-token steps (rescore.engine.lstm_steps.LSTMLevels): a ``body`` that declares
        ``Part.lstm_step`` under an ``embedding``, a ``head`` that declares
        ``Part.softmax_output`` and a ``drop`` between them."""
        return False

    def score(self, ids: Tensor, ident: Tensor, target_ids: Tensor, target_ident: Tensor,
              state: LMState) -> tuple[Tensor, LMState]:
        """log P of each target ((B, T) float) and the state after the inputs."""
        out, new_state = self(ids, ident, state)
        return out.log_prob(target_ids, target_ident), new_state
