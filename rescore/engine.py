"""The rescoring engine: NN LM costs of every N-best hypothesis, with state carried across a
conversation (design §6).

Each hypothesis ``w1 .. wn`` is scored as inputs ``<eos> w1 .. wn`` -> targets ``w1 .. wn <eos>``
(rescore.models.base conventions). Its NN cost is the list of per-token costs
``-ln P(target)``, end of sentence last: the lines of Kaldi's ``lmwt.nn``.

State carry (``state_carry``):

* ``none``        every utterance starts from ``model.initial_state`` (empty history);
* ``first-pass``  utterance k starts from the state after the last word of the first-pass best
                  (rank 1, the first hypothesis given) of utterance k-1 — what Kaldi's
                  ``steps/pytorchnn`` does, without its padding bug;
* ``rescored``    ... of the best hypothesis by the final interpolated cost
                  ``fixed + weight * sum(costs)`` (the default).

Several models (``score_nbest_mixed``) are scored in lockstep, one run per model driven by
``_lockstep``: at each carry point every model's run hands over its costs and all of them carry
from the same hypothesis, the best by the mixed cost ``fixed + weight * sum_m mix_m * sum(costs_m)``.

The state is reset at the start of every conversation. The pointer history lives in the
``LMState`` and is carried the same way, so the decoded history is the best hypotheses of earlier
utterances plus the current prefix.

Three engines give the same costs (the tests hold them to 1e-4 per hypothesis):

* ``naive``   one hypothesis at a time from its utterance's start state, explicit state passing.
              The reference.
* ``padded``  one padded batch per utterance, no prefix sharing, one conversation at a time (the
              way of Kaldi's pytorchnn scorer); the carried state is recomputed from the best
              hypothesis alone, so padding never enters it.
* ``fast``    a prefix trie per utterance, each distinct prefix computed once, with utterance
              k of all conversations (of a block of ``conv_batch``) side by side in the same
              calls. Schedules: level by level (one-token rows; small states such as an
              LSTM's), segments (branch-free chains as multi-token rows, equal lengths in
              one call; big states such as a Transformer's KV cache) or tree (every node of
              a trie in one row under a tree attention mask, sharing one copy of the carried
              KV cache; models with ``supports_tree``: a Transformer with a softmax head).
              See ``_Forest``.

              Micro-batches: the hypotheses of a wave are cut into groups of at most
              ``max_tokens`` hypotheses (a big N-best list into parts), which bounds every
              forward call and every level's states by ``max_tokens`` rows.

On CUDA the forward runs under autocast (bf16 where supported, else fp16) and a CUDA
out-of-memory error halves the rows per call and retries; costs are always accumulated in fp32.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from rescore.errors import RescoreError
from rescore.interp import mixed_nn_cost, total_cost
from rescore.models.base import HeadOutput, LanguageModel, LMState

log = logging.getLogger(__name__)

ENGINES = ("fast", "padded", "naive")
STATE_CARRY = ("none", "first-pass", "rescored")

Costs = List[float]  # per-token costs of one hypothesis, end of sentence last


@dataclass
class UttInput:
    """One utterance as the engine needs it.

    hyps:  hypotheses' word lists, in first-pass rank order (index 0 = rank 1).
    fixed: each hypothesis' fixed cost (``rescore.interp.fixed_cost``); the final interpolated
           cost is ``fixed + weight * sum(nn costs)``. Only used to pick the best hypothesis for
           ``state_carry="rescored"``.
    """

    hyps: List[List[str]]
    fixed: List[float]

    def __post_init__(self):
        if len(self.hyps) != len(self.fixed):
            raise ValueError(f"{len(self.hyps)} hypotheses but {len(self.fixed)} fixed costs")


@dataclass
class EngineStats:
    """What an engine run computed (for logs and benchmarks)."""

    hyps: int = 0            # hypotheses scored
    tokens: int = 0          # scored tokens (words + end of sentence), the useful work
    rows: int = 0            # token positions the model computed (padding and trie included)
    calls: int = 0           # forward calls
    oom_backoffs: int = 0    # times the rows per call were halved after an out-of-memory error


# --------------------------------------------------------------------------------------------
# Device and precision


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> cuda when available else cpu; ``cpu``; ``cuda`` (fails clearly without one)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cuda" and not torch.cuda.is_available():
        raise RescoreError("a CUDA device (--device cuda)", got="torch.cuda.is_available() False")
    if spec not in ("cpu", "cuda") and not spec.startswith("cuda:"):
        raise RescoreError("--device auto, cpu or cuda", got=spec)
    return torch.device(spec)


PRECISIONS = ("auto", "fp32", "bf16")


def autocast_for(device: torch.device, precision: str = "auto"):
    """The forward's autocast. ``auto``: on CUDA bf16 where the GPU has it, else fp16; on the
    CPU none (fp32: the engines agree to 1e-4). ``fp32``: none. ``bf16``: bf16 matrix products
    on either device (on a CPU with AVX512-BF16 or AMX about 3x the fp32 GEMM rate; costs move
    by a median ~0.05 nat per hypothesis, docs/benchmarks.md). Normalisers and costs stay fp32."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return contextlib.nullcontext()
    if device.type == "cuda":
        bf16 = precision == "bf16" or torch.cuda.is_bf16_supported()
        return torch.autocast("cuda", dtype=torch.bfloat16 if bf16 else torch.float16)
    return torch.autocast(device.type, dtype=torch.bfloat16)


NORMALIZE = ("exact", "none", "auto")


def resolve_normalize(model: LanguageModel, normalize: str) -> str:
    """``exact`` or ``none`` for ``--normalize``: ``auto`` is ``none`` for a self-normalised
    model (``config.self_norm > 0``: trained with alpha (log Z)^2), else ``exact``. A
    class-factored model (``config.output == "class"``) refuses ``none``: it scores exactly at
    (C + |c(w)|) x H per edge (``HeadOutput.vocab_score``, the same per-edge path)."""
    if normalize not in NORMALIZE:
        raise RescoreError(f"normalize one of {NORMALIZE}", got=normalize)
    if normalize == "auto":
        normalize = "none" if getattr(model.config, "self_norm", 0.0) > 0 else "exact"
    if normalize == "none" and getattr(getattr(model, "config", None), "output", "") == "class":
        raise RescoreError("normalize 'exact' (or auto) for a class-factored model (--output "
                           "class): its normalisers are exact at (C + class size) x H per edge "
                           "already, there is no unnormalised score to skip to", got="none")
    if normalize == "none" and not getattr(model, "supports_unnormalized", False):
        raise RescoreError("a model that can score without its normaliser (rescore.models) for "
                           "normalize 'none'", got=type(model).__name__)
    return normalize


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err)


class _Forward:
    """Calls the model on row chunks of at most ``max_tokens`` token positions (at least one
    row); halves the budget and retries on an out-of-memory error.

    Rows are independent, so chunking changes nothing but memory and speed.
    """

    def __init__(self, model: LanguageModel, device: torch.device, max_tokens: int,
                 stats: EngineStats, precision: str = "auto", normalize: bool = True):
        self.model = model
        self.device = device
        self.precision = precision
        self.max_tokens = max(1, max_tokens)
        self.stats = stats
        self.normalize = normalize
        self.can_skip = getattr(model, "supports_unnormalized", False)

    def __call__(self, ids: Tensor, ident: Tensor, state: LMState, rows: Tensor,
                 reduce: Callable[[HeadOutput, int, int], None],
                 tree: Optional[Tuple[Tensor, Tensor]] = None,
                 outputs: bool = True) -> Optional[LMState]:
        """Consume ``ids``/``ident`` ((B, T) int64) from ``state.select(rows)`` ((B,) int64).

        ``reduce(out, start, stop)`` consumes each chunk's HeadOutput (rows start..stop-1), which
        is freed afterwards: the (B, T, V) output never exists at once. Returns the (B,) states
        after the last position; with ``tree`` = (depth (B, T), ancestor (B, T, T)) each row is
        a prefix tree (``model.forward_tree``) and nothing is returned. ``outputs=False``: only
        the states are wanted, so a model that can skips its normaliser.
        """
        B, T = ids.shape
        kw = {} if (self.normalize and outputs) or not self.can_skip else {"normalize": False}
        states: List[LMState] = []
        start = 0
        while start < B:
            n = max(1, self.max_tokens // T)
            stop = min(B, start + n)
            try:
                with autocast_for(self.device, self.precision):
                    if tree is None:
                        out, st = self.model(ids[start:stop], ident[start:stop],
                                             state.select(rows[start:stop]), **kw)
                    else:
                        st = None
                        out = self.model.forward_tree(
                            ids[start:stop], ident[start:stop], tree[0][start:stop],
                            tree[1][start:stop], state.select(rows[start:stop]), **kw)
                reduce(out, start, stop)
            except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError
                if not _is_oom(err) or n == 1:
                    raise
                del err
                self.max_tokens = max(1, (n // 2) * T)
                self.stats.oom_backoffs += 1
                log.warning("out of memory on %d x %d tokens; going on with %d tokens per call",
                            stop - start, T, self.max_tokens)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            self.stats.calls += 1
            self.stats.rows += (stop - start) * T
            states.append(st)
            start = stop
        if tree is not None:
            return None
        return states[0] if len(states) == 1 else LMState.cat(states)


def target_log_prob(out: HeadOutput, b: Tensor, t: Tensor, tid: Tensor, tident: Tensor,
                    oov: Tensor, oov_penalty: float) -> Tensor:
    """log P of targets at chosen positions, with the OOV penalty on the vocabulary part.

    b, t: (E,) int64 row and position in ``out``; tid, tident: (E,) target ids / identities;
    oov: (E,) bool, target outside the vocabulary. Returns (E,) float32.
    An OOV target scores as ``P(<unk>) * exp(-oov_penalty)`` plus the copy mass of the history
    slots holding the same identity (design §4.2): the mixture of ``HeadOutput.log_prob``.
    """
    lv = out.vocab_at(b, t, tid).float()  # (E,)
    if oov_penalty:
        lv = lv - oov_penalty * oov.to(lv.dtype)
    if out.log_slot is None:
        return lv
    E = b.shape[0]
    gathered = HeadOutput(
        log_vocab=lv.view(E, 1, 1),
        log_slot=out.log_slot[b, t].float().unsqueeze(1),      # (E, 1, L)
        slot_ident=out.slot_ident[b, t].unsqueeze(1),          # (E, 1, L)
    )
    return gathered.log_prob(torch.zeros(E, 1, dtype=torch.long, device=b.device),
                             tident.view(E, 1)).view(E)


# --------------------------------------------------------------------------------------------
# Encoding


@dataclass
class _Hyp:
    ids: List[int]      # vocabulary ids of w1..wn
    ident: List[int]    # identities of w1..wn
    words: Tuple[str, ...] = ()  # the words (a sort key that does not depend on OOV numbering)


def _encode(vocab, conversations: Sequence[Sequence[UttInput]]) -> List[List[List[_Hyp]]]:
    """Encode every hypothesis with the one Vocabulary object, in input order (OOV identities
    are then deterministic for a given input)."""
    out = []
    for conv in conversations:
        out.append([[_Hyp(*map(list, vocab.encode(list(h))), tuple(h)) for h in utt.hyps]
                    for utt in conv])
    return out


# --------------------------------------------------------------------------------------------
# Public entry point


def score_nbest(
    model: LanguageModel,
    conversations: Sequence[Sequence[UttInput]],
    *,
    weight: float,
    state_carry: str = "rescored",
    device: str | torch.device = "auto",
    max_tokens: int = 2048,
    engine: str = "fast",
    oov_penalty: float = 0.0,
    conv_batch: int = 16,
    schedule: str = "auto",
    precision: str = "auto",
    normalize: str = "exact",
    stats: Optional[EngineStats] = None,
    progress: bool = True,
) -> List[List[List[Costs]]]:
    """NN LM costs of every hypothesis: ``result[c][u][h]`` is the per-token cost list
    (natural-log, negated; ``len(words) + 1`` values, end of sentence last) of hypothesis h of
    utterance u of conversation c.

    conversations: in order, each a list of utterances in order (one recording/article).
    weight: NN LM weight w of ``total = fixed + w * sum(costs)`` (best hypothesis for carry).
    state_carry: none | first-pass | rescored (module docstring).
    device: auto | cpu | cuda[:n] or a torch.device; the model is moved there.
    max_tokens: most token positions in one forward call (and hypotheses in one fast group).
    engine: fast | padded | naive (module docstring); they agree to float rounding.
    oov_penalty: extra cost per out-of-vocabulary word, on its ``<unk>`` part.
    conv_batch: conversations the fast engine scores side by side. Blocks of conv_batch
        conversations are scored independently, so a job of ``split_slice(..., block=
        conv_batch)`` (rescore.pipeline) computes exactly what one process computes for them (same batches, same
        floats).
    schedule: fast engine's order of work, the same costs: ``levels`` (one-token rows, trie
        level by level), ``segments`` (branch-free chains as multi-token rows), ``tree`` (each
        trie of at most max_tokens nodes as one row under a tree mask, bigger ones by
        segments; models with ``supports_tree``) or ``auto`` (segments when the model state
        exceeds SEGMENT_STATE_BYTES per row, else levels). On the CPU ``tree`` lost to
        ``segments`` (8.1 s vs 7.0 s, docs/benchmarks.md): its attention is quadratic in the
        trie size; it makes 10x fewer calls, which should matter on a GPU (not yet measured).
    precision: auto | fp32 | bf16, the forward's autocast (``autocast_for``).
    normalize: exact | none | auto (``resolve_normalize``). ``none`` leaves the head's
        normaliser Z out (costs -ln(P * Z)): only each edge's target row of the output layer is
        computed (~H per edge instead of V x H per node), exact for a self-normalised model
        to the extent its log Z is 0 (docs/benchmarks.md). Every engine gives the same
        unnormalised costs.
    """
    if getattr(model, "scores_nbest", False):  # a Hugging Face LM (rescore.models.hf, rescore.hf_engine)
        return model.score_nbest(conversations, weight=weight, state_carry=state_carry, device=device,
                                 max_tokens=max_tokens, engine=engine, oov_penalty=oov_penalty,
                                 conv_batch=conv_batch, schedule=schedule, precision=precision,
                                 normalize=normalize, stats=stats, progress=progress)
    ctx, run, encoded, fixed = _prepare(model, conversations, weight=weight, state_carry=state_carry,
                                        device=device, max_tokens=max_tokens, engine=engine,
                                        oov_penalty=oov_penalty, conv_batch=conv_batch,
                                        schedule=schedule, precision=precision, normalize=normalize,
                                        stats=stats, progress=progress)
    with torch.inference_mode():
        result = _lockstep([run(ctx, encoded, fixed)], _carry_choice(state_carry, weight, (1.0,)))[0]
    _log_stats(ctx)
    return result


def score_nbest_mixed(
    models: Sequence[LanguageModel],
    conversations: Sequence[Sequence[UttInput]],
    *,
    weight: float,
    mix: Sequence[float],
    oov_penalties: Optional[Sequence[float]] = None,
    state_carry: str = "rescored",
    engine: str = "fast",
    **options,
) -> List[List[List[List[Costs]]]]:
    """NN LM costs of every hypothesis by each of K models scored in lockstep: ``result[m]`` is
    what score_nbest gives for ``models[m]``, except that with ``state_carry`` rescored every
    model carries its state from the same hypothesis, the best by the mixed final cost
    ``fixed + weight * sum_m mix[m] * sum(costs_m)`` (rescore.interp.mixed_nn_cost). With
    ``none`` or ``first-pass`` the costs equal K separate score_nbest runs.

    Each model keeps its own vocabulary, body, OOV penalty (``oov_penalties[m]``, default 0)
    and resolved normalisation; ``options`` (device, max_tokens, conv_batch, schedule,
    precision, normalize, progress) are those of score_nbest, common to all.
    """
    if len(models) != len(mix) or not models:
        raise RescoreError(f"one share per model ({len(models)} models)", got=f"{len(mix)} shares")
    if any(getattr(m, "scores_nbest", False) for m in models):
        raise RescoreError("--mix-carry own with an hf: model among several", got="lockstep")
    penalties = list(oov_penalties) if oov_penalties is not None else [0.0] * len(models)
    if len(penalties) != len(models):
        raise RescoreError(f"one OOV penalty per model ({len(models)} models)", got=f"{len(penalties)}")
    preps = [_prepare(m, conversations, weight=weight, state_carry=state_carry, engine=engine,
                      oov_penalty=p, **options) for m, p in zip(models, penalties)]

    with torch.inference_mode():
        result = _lockstep([run(ctx, encoded, fixed) for ctx, run, encoded, fixed in preps],
                           _carry_choice(state_carry, weight, mix))
    for ctx, *_ in preps:
        _log_stats(ctx)
    return result


def _carry_choice(state_carry: str, weight: float, mix: Sequence[float]) -> Callable:
    """The ``choose`` of _lockstep: the carried hypothesis of each conversation, rank 1
    (first-pass) or the best by ``fixed + weight * sum_m mix[m] * sum(costs_m)`` (one model:
    mix (1.0,), its own cost exactly)."""
    def choose(wants):  # wants[m][j] = (costs of conversation j's utterance by model m, fixed)
        if state_carry == "first-pass":
            return [0] * len(wants[0])
        out = []
        for j, (_, fixed) in enumerate(wants[0]):
            totals = [total_cost(f, mixed_nn_cost([sum(w[j][0][h]) for w in wants], mix), weight)
                      for h, f in enumerate(fixed)]
            out.append(min(range(len(totals)), key=totals.__getitem__))
        return out

    return choose


class _Done:
    def __init__(self, value):
        self.value = value


def _lockstep(runs, choose: Callable) -> list:
    """Drive engine runs (generators, one per model) in step: at each carry point every run
    yields what it wants to choose from, [(costs, fixed) per conversation it carries], and
    gets back ``choose(wants of every run)``, the index of each conversation's carried
    hypothesis. Returns each run's result."""
    def step(run, value):
        try:
            return run.send(value)
        except StopIteration as e:
            return _Done(e.value)

    wants = [step(r, None) for r in runs]
    while True:
        done = [isinstance(w, _Done) for w in wants]
        if all(done):
            return [w.value for w in wants]
        if any(done) or len({len(w) for w in wants}) != 1:
            raise RuntimeError("engine runs out of step (the models were given different N-best sets)")
        chosen = choose(wants)
        wants = [step(r, chosen) for r in runs]


def _log_stats(ctx: "_Context") -> None:
    stats = ctx.stats
    log.info("%d hypotheses, %d tokens: %d rows computed in %d forward calls", stats.hyps,
             stats.tokens, stats.rows, stats.calls)


def _prepare(model, conversations, *, weight, state_carry="rescored", device="auto", max_tokens=2048,
             engine="fast", oov_penalty=0.0, conv_batch=16, schedule="auto", precision="auto",
             normalize="exact", stats=None, progress=True):
    """Check score_nbest's options and set up one model's run: (context, run function,
    encoded hypotheses, fixed costs); ``run(ctx, encoded, fixed)`` is a generator (_lockstep)."""
    if engine not in ENGINES:
        raise RescoreError(f"engine one of {ENGINES}", got=engine)
    if state_carry not in STATE_CARRY:
        raise RescoreError(f"state carry one of {STATE_CARRY}", got=state_carry)
    if schedule not in SCHEDULES:
        raise RescoreError(f"schedule one of {SCHEDULES}", got=schedule)
    if precision not in PRECISIONS:
        raise RescoreError(f"precision one of {PRECISIONS}", got=precision)
    if schedule == "tree" and not getattr(model, "supports_tree", False):
        raise RescoreError("a model with a tree forward for schedule 'tree' (a Transformer "
                           "with a softmax head)", got=type(model).__name__)
    normalized = resolve_normalize(model, normalize) == "exact"
    if conv_batch < 1:
        raise RescoreError("conv_batch >= 1", got=str(conv_batch))
    if max_tokens < 1:
        raise RescoreError("max_tokens >= 1", got=str(max_tokens))
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    stats = stats if stats is not None else EngineStats()
    vocab = model.vocab
    encoded = _encode(vocab, conversations)
    fixed = [[list(u.fixed) for u in conv] for conv in conversations]
    ctx = _Context(model=model.to(dev).eval(), device=dev, weight=weight, state_carry=state_carry,
                   eos=vocab.eos_id, n_vocab=len(vocab), oov_penalty=oov_penalty,
                   forward=_Forward(model, dev, max_tokens, stats, precision, normalized),
                   stats=stats,
                   max_tokens=max_tokens, conv_batch=conv_batch, schedule=schedule,
                   progress=progress)
    n_hyps = sum(len(u) for conv in encoded for u in conv)
    log.info("scoring %d hypotheses of %d utterances in %d conversations (engine %s, carry %s, "
             "device %s, %s)", n_hyps, sum(len(c) for c in encoded), len(encoded), engine,
             state_carry, dev, "normalised" if normalized else "unnormalised")
    run = {"fast": _run_fast, "padded": _run_padded, "naive": _run_naive}[engine]
    return ctx, run, encoded, fixed


@dataclass
class _Context:
    model: LanguageModel
    device: torch.device
    weight: float
    state_carry: str
    eos: int
    n_vocab: int
    oov_penalty: float
    forward: _Forward
    stats: EngineStats
    max_tokens: int
    conv_batch: int
    schedule: str
    progress: bool

    def tensor(self, x) -> Tensor:
        return torch.as_tensor(x, dtype=torch.long, device=self.device)

    def io(self, hyp: _Hyp) -> Tuple[List[int], List[int], List[int], List[int]]:
        """Inputs ``<eos> w1..wn`` and targets ``w1..wn <eos>`` (ids, identities)."""
        return ([self.eos] + hyp.ids, [self.eos] + hyp.ident,
                hyp.ids + [self.eos], hyp.ident + [self.eos])

    def end_states(self, roots: LMState, root_rows: List[int], hyps: List[_Hyp]) -> LMState:
        """States after ``<eos> w1..wn`` of each hypothesis from its root row, without padding:
        hypotheses of equal length go together in one multi-token forward call."""
        out: Dict[int, LMState] = {}
        by_len: Dict[int, List[int]] = {}
        for i, h in enumerate(hyps):
            by_len.setdefault(len(h.ids), []).append(i)
        for n, idx in by_len.items():
            ids = self.tensor([[self.eos] + hyps[i].ids for i in idx])
            ident = self.tensor([[self.eos] + hyps[i].ident for i in idx])
            st = self.forward(ids, ident, roots, self.tensor([root_rows[i] for i in idx]),
                              lambda *a: None, outputs=False)
            for j, i in enumerate(idx):
                out[i] = st.select(self.tensor([j]))
        return LMState.cat([out[i] for i in range(len(hyps))])

    def count(self, hyps: List[_Hyp]):
        self.stats.hyps += len(hyps)
        self.stats.tokens += sum(len(h.ids) + 1 for h in hyps)


def _progress(ctx: _Context, total: int, desc: str):
    from rescore.progress import progress  # a bar on a terminal, log lines in a log

    return progress(total=total, desc=desc, unit="hyp", enabled=ctx.progress)


# --------------------------------------------------------------------------------------------
# naive: the reference


def _run_naive(ctx: _Context, encoded, fixed) -> List[List[List[Costs]]]:
    result = []
    bar = _progress(ctx, sum(len(u) for c in encoded for u in c), "naive")
    for conv, conv_fixed in zip(encoded, fixed):
        start = ctx.model.initial_state(1, ctx.device)
        conv_costs = []
        for hyps, fx in zip(conv, conv_fixed):
            costs, ends = [], []
            for h in hyps:
                inp, inp_ident, tgt, tgt_ident = ctx.io(h)
                T = len(inp)
                got: List[Tensor] = []

                def reduce(out, s, e, tgt=tgt, tgt_ident=tgt_ident, T=T):
                    z = ctx.tensor([0] * T)
                    got.append(target_log_prob(
                        out, z, ctx.tensor(range(T)), ctx.tensor(tgt), ctx.tensor(tgt_ident),
                        ctx.tensor(tgt_ident) >= ctx.n_vocab, ctx.oov_penalty))

                ends.append(ctx.forward(ctx.tensor([inp]), ctx.tensor([inp_ident]), start,
                                        ctx.tensor([0]), reduce))
                costs.append((-got[0]).double().tolist())
                bar.update()
            ctx.count(hyps)
            conv_costs.append(costs)
            if ctx.state_carry == "none":
                start = ctx.model.initial_state(1, ctx.device)
            elif hyps:
                start = ends[(yield [(costs, fx)])[0]]  # the carried best (see _lockstep)
        result.append(conv_costs)
    bar.close()
    return result


# --------------------------------------------------------------------------------------------
# padded: one padded batch per utterance (Kaldi pytorchnn's way, with a correct carry)


def _run_padded(ctx: _Context, encoded, fixed) -> List[List[List[Costs]]]:
    result = []
    bar = _progress(ctx, sum(len(u) for c in encoded for u in c), "padded")
    for conv, conv_fixed in zip(encoded, fixed):
        start = ctx.model.initial_state(1, ctx.device)
        conv_costs = []
        for hyps, fx in zip(conv, conv_fixed):
            if not hyps:
                conv_costs.append([])
                continue
            T = max(len(h.ids) for h in hyps) + 1
            pad = lambda seq: seq + [ctx.eos] * (T - len(seq))  # noqa: E731
            ios = [ctx.io(h) for h in hyps]
            ids = ctx.tensor([pad(x[0]) for x in ios])
            ident = ctx.tensor([pad(x[1]) for x in ios])
            tid = ctx.tensor([pad(x[2]) for x in ios])
            tident = ctx.tensor([pad(x[3]) for x in ios])
            lp = torch.empty(len(hyps), T, device=ctx.device)

            def reduce(out, s, e):
                B = e - s
                b = torch.arange(B, device=ctx.device).repeat_interleave(T)
                t = torch.arange(T, device=ctx.device).repeat(B)
                ti, tn = tid[s:e].reshape(-1), tident[s:e].reshape(-1)
                lp[s:e] = target_log_prob(out, b, t, ti, tn, tn >= ctx.n_vocab,
                                          ctx.oov_penalty).view(B, T)

            ctx.forward(ids, ident, start, ctx.tensor([0] * len(hyps)), reduce)
            lp_rows = (-lp).double().tolist()
            costs = [row[: len(h.ids) + 1] for row, h in zip(lp_rows, hyps)]
            ctx.count(hyps)
            bar.update(len(hyps))
            conv_costs.append(costs)
            if ctx.state_carry == "none":
                continue
            # The batch's end state of a shorter hypothesis has consumed padding: recompute the
            # carried state from the best hypothesis alone.
            best = (yield [(costs, fx)])[0]  # the carried best (see _lockstep)
            start = ctx.end_states(start, [0], [hyps[best]])
        result.append(conv_costs)
    bar.close()
    return result


# --------------------------------------------------------------------------------------------
# fast: prefix tries cut into segments, conversations side by side


class _Forest:
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

    def add(self, root_row: int, hyps: List[_Hyp], eos: int) -> None:
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


def _run_fast(ctx: _Context, encoded, fixed) -> List[List[List[Costs]]]:
    bar = _progress(ctx, sum(len(u) for c in encoded for u in c), "fast")
    result: List[List[List[Costs]]] = []
    for b in range(0, len(encoded), ctx.conv_batch):
        block = slice(b, b + ctx.conv_batch)
        result += yield from _run_fast_block(ctx, encoded[block], fixed[block], bar)
    bar.close()
    return result


def _run_fast_block(ctx: _Context, encoded, fixed, bar) -> List[List[List[Costs]]]:
    """Conversations side by side: wave k = utterance k of every conversation of the block."""
    result: List[List[List[Costs]]] = [[[] for _ in conv] for conv in encoded]
    n_waves = max((len(c) for c in encoded), default=0)
    # The state each conversation's next utterance starts from: one row per conversation.
    starts = ctx.model.initial_state(len(encoded), ctx.device)
    for k in range(n_waves):
        convs = [c for c in range(len(encoded)) if k < len(encoded[c])]
        # Micro-batches: whole utterances while they fit in max_tokens hypotheses; a bigger
        # N-best list is cut into parts of sorted hypotheses (neighbours share most prefixes).
        items: List[Tuple[int, List[int]]] = []  # (conversation, hypothesis indexes)
        for c in convs:
            hyps = encoded[c][k]
            order = list(range(len(hyps)))
            if len(hyps) > ctx.max_tokens:
                order.sort(key=lambda i: hyps[i].words)
            for s in range(0, len(order), ctx.max_tokens):
                items.append((c, order[s:s + ctx.max_tokens]))
        groups: List[List[Tuple[int, List[int]]]] = [[]]
        size = 0
        for it in items:
            if size + len(it[1]) > ctx.max_tokens and groups[-1]:
                groups.append([])
                size = 0
            groups[-1].append(it)
            size += len(it[1])
        wave_costs: Dict[int, List[Optional[Costs]]] = {c: [None] * len(encoded[c][k]) for c in convs}
        # the state after each hypothesis, where the schedule forms it (levels): the carry then
        # needs no recomputation
        finals: Optional[Dict[Tuple[int, int], Tuple[LMState, int]]] = (
            {} if ctx.state_carry != "none" else None)
        for group in groups:
            _score_group(ctx, encoded, k, group, starts, wave_costs, finals)
            bar.update(sum(len(ix) for _, ix in group))
        for c in convs:
            result[c][k] = wave_costs[c]
            ctx.count(encoded[c][k])
        if ctx.state_carry == "none":
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
            idx = ctx.tensor(carried)
            for key, v in starts.tensors.items():
                v = v.clone()  # under autocast the end states may be in a lower precision
                v.index_copy_(0, idx, ends.tensors[key].to(v.dtype))
                starts.tensors[key] = v
    return result


SEGMENT_STATE_BYTES = 64 * 1024  # schedule "auto": segments above this state size per row
SCHEDULES = ("auto", "levels", "segments", "tree")


def _state_bytes_per_row(state: LMState) -> int:
    return sum(v[0].numel() * v.element_size() for v in state.tensors.values())


def _score_group(ctx: _Context, encoded, k: int, group, starts: LMState,
                 wave_costs: Dict[int, List[Optional[Costs]]],
                 finals: Optional[Dict[Tuple[int, int], Tuple[LMState, int]]] = None) -> None:
    """Score one micro-batch: its tries' segments, round by round (a segment is ready once the
    node before it is computed), segments of equal length together in one forward call.

    Two schedules of the same computation: ``chain`` (segments: one state copy per segment;
    best for big states such as a Transformer's KV cache) or levels (one-token rows: fewer,
    bigger calls; best for small states such as an LSTM's, where copies are cheap). With levels,
    ``finals[(conversation, hypothesis)]`` receives (states, row) of the state after each
    hypothesis' last word, for the carry."""
    tree = ctx.schedule == "tree"
    chain = tree or ctx.schedule == "segments" or (
        ctx.schedule == "auto" and _state_bytes_per_row(starts) > SEGMENT_STATE_BYTES)
    forest = _Forest()
    owners: List[Tuple[int, int]] = []  # (conversation, hypothesis index) per forest hypothesis
    for c, idx in group:
        hyps = encoded[c][k]
        forest.add(c, [hyps[i] for i in idx], ctx.eos)
        owners.extend((c, i) for i in idx)
    edge_lp = torch.empty(len(forest.e_id), device=ctx.device)
    e_id_all, e_ident_all = ctx.tensor(forest.e_id), ctx.tensor(forest.e_ident)
    ends_at: Dict[int, List[Tuple[int, int]]] = {}  # node -> hypotheses whose last word it is
    for owner, node in zip(owners, forest.hyp_node):
        ends_at.setdefault(node, []).append(owner)
    roots = forest.roots
    if tree:
        roots = _score_trees(ctx, forest, starts, edge_lp, e_id_all, e_ident_all)
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
            ids = ctx.tensor([[forest.tok_id[n] for n in seg] for seg, _ in segs])  # (G, T)
            ident = ctx.tensor([[forest.tok_ident[n] for n in seg] for seg, _ in segs])
            # the edges of every node of these segments: (segment, position, edge)
            node_edges = forest.node_edges
            if T == 1:  # levels: one node per row (comprehensions: this runs per trie node)
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
            reduce = _edge_reducer(ctx, edge_lp, e_id_all, e_ident_all, eb, et, ee)
            end = ctx.forward(ids, ident, states, ctx.tensor([row for _, row in segs]), reduce)
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


def _edge_reducer(ctx: _Context, edge_lp: Tensor, e_id_all: Tensor, e_ident_all: Tensor,
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


def _score_trees(ctx: _Context, forest: _Forest, starts: LMState, edge_lp: Tensor,
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
    small = sorted((r for r in forest.roots if len(members[r]) <= ctx.max_tokens),
                   key=lambda r: len(members[r]))
    batches: List[List[int]] = []
    for r in small:  # by size: rows of one call have similar sizes, little padding
        if batches and len(members[r]) * (len(batches[-1]) + 1) <= ctx.max_tokens:
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
