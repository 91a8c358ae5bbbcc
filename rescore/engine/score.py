"""The rescoring engine: NN LM costs of every N-best hypothesis, with state carried across a
conversation.

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

The engine takes its settings whole (rescore.settings.EngineSettings). Three engines give
the same costs (the tests hold them to 1e-4 per hypothesis); the two references are in
rescore.engine.reference:

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
              See rescore.engine.forest and rescore.engine.fast.

              With ``first-pass`` carry every utterance's start state depends only on the
              rank-1 hypotheses before it: the chain of rank-1 hypotheses runs first (states
              only), then the utterances of a block are scored side by side as independent
              ones from their start states, whatever their conversation (one conversation of
              a whole job's archive included), in waves of up to ``max_tokens`` hypotheses.

              Micro-batches: the hypotheses of a wave are cut into groups of at most
              ``max_tokens`` hypotheses (a big N-best list into parts), which bounds every
              forward call and every level's states by ``max_tokens`` rows.

On CUDA the forward runs under autocast (bf16 where supported, else fp16) and a CUDA
out-of-memory error halves the rows per call and retries; costs are always accumulated in fp32.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch

from rescore.bulk import gc_paused
from rescore.engine.fast import SEGMENT_STATE_BYTES, run_fast
from rescore.engine.reference import run_naive, run_padded
from rescore.errors import OptionError, RescoreError
from rescore.engine.hf import score_hf
from rescore.engine.forward import (Forward, RunContext, autocast_for, resolve_device, resolve_normalize,
                                    target_log_prob)
from rescore.engine.carry import carry_choice
from rescore.engine.types import Costs, EngineStats, Hyp
from rescore.models.base import LanguageModel, has_history
from rescore.settings import ENGINES, NORMALIZE, PRECISIONS, SCHEDULES, STATE_CARRY, EngineSettings

log = logging.getLogger(__name__)

# the engine's public names, wherever they live
__all__ = ["UttInput", "EngineStats", "EngineSettings", "score_nbest", "score_nbest_mixed", "resolve_device",
           "autocast_for", "resolve_normalize", "target_log_prob", "Costs", "ENGINES", "STATE_CARRY",
           "SCHEDULES", "PRECISIONS", "NORMALIZE", "SEGMENT_STATE_BYTES"]

_RUNS = {"fast": run_fast, "padded": run_padded, "naive": run_naive}


@dataclass
class UttInput:
    """One utterance as the engine needs it.

    hyps:  hypotheses' word lists, in first-pass rank order (index 0 = rank 1).
    fixed: each hypothesis' fixed cost (``rescore.nbest.interp.fixed_cost``); the final interpolated
           cost is ``fixed + weight * sum(nn costs)``. Only used to pick the best hypothesis for
           ``state_carry="rescored"``.
    """

    hyps: List[List[str]]
    fixed: List[float]

    def __post_init__(self):
        if len(self.hyps) != len(self.fixed):
            raise ValueError(f"{len(self.hyps)} hypotheses but {len(self.fixed)} fixed costs")



def _encode(vocab, conversations: Sequence[Sequence[UttInput]]) -> List[List[List[Hyp]]]:
    """Encode every hypothesis with the one Vocabulary object, in input order (OOV identities
    are then deterministic for a given input)."""
    out = []
    with gc_paused():  # (hundreds of thousands of lists that all survive: rescore.bulk)
        for conv in conversations:
            out.append([[Hyp(*vocab.encode(h), tuple(h)) for h in utt.hyps]
                        for utt in conv])
    return out


# --------------------------------------------------------------------------------------------
# Public entry point


def score_nbest(
    model: LanguageModel,
    conversations: Sequence[Sequence[UttInput]],
    *,
    weight: float,
    settings: Optional[EngineSettings] = None,
    stats: Optional[EngineStats] = None,
    progress: bool = True,
    **changes,
) -> List[List[List[Costs]]]:
    """NN LM costs of every hypothesis: ``result[c][u][h]`` is the per-token cost list
    (natural-log, negated; ``len(words) + 1`` values, end of sentence last) of hypothesis h of
    utterance u of conversation c.

    conversations: in order, each a list of utterances in order (one recording/article).
    weight: NN LM weight w of ``total = fixed + w * sum(costs)`` (best hypothesis for carry).
    settings: how to score (rescore.settings.EngineSettings; default: its defaults), with
        ``changes`` (settings' fields, e.g. ``engine="naive"``) applied on top and checked.
        Its oov_penalty is a number of nats here (``auto`` is the job's: rescore.jobs.scoring).

    What the settings do, beyond their --help: ``device`` also takes a torch.device, and the
    model is moved there; the engines (module docstring) agree to float rounding; blocks of
    ``conv_batch`` conversations are scored independently, so a job of ``split_slice(...,
    block=conv_batch)`` (rescore.jobs.nbest) computes exactly what one process computes for them
    (same batches, same floats). ``schedule`` tree: each trie of at most max_tokens nodes as
    one row under a tree mask, bigger ones by segments; ``auto``: segments when the model state
    exceeds SEGMENT_STATE_BYTES per row, else levels. On the CPU ``tree`` lost to ``segments``
    (8.1 s vs 7.0 s, docs/benchmarks.md): its attention is quadratic in the trie size; it makes
    10x fewer calls, which should matter on a GPU (not yet measured). ``normalize`` none leaves
    the head's normaliser Z out (costs -ln(P * Z)): only each edge's target row of the output
    layer is computed (~H per edge instead of V x H per node), exact for a self-normalised
    model to the extent its log Z is 0 (docs/benchmarks.md); every engine gives the same
    unnormalised costs.
    """
    if model.scores_nbest:  # a Hugging Face LM (rescore.models.hf): its own engine
        return score_hf(model, conversations, weight, *_settings(settings, changes), stats, progress)
    settings, device = _settings(settings, changes)
    ctx, run, encoded, fixed = _prepare(model, conversations, weight, settings, device,
                                        _penalty(settings.oov_penalty), stats, progress)
    with torch.inference_mode():
        result = _lockstep([run(ctx, encoded, fixed)], carry_choice(settings.state_carry, weight, (1.0,)))[0]
    _log_stats(ctx)
    return result


def score_nbest_mixed(
    models: Sequence[LanguageModel],
    conversations: Sequence[Sequence[UttInput]],
    *,
    weight: float,
    mix: Sequence[float],
    oov_penalties: Optional[Sequence[float]] = None,
    settings: Optional[EngineSettings] = None,
    stats: Optional[EngineStats] = None,
    progress: bool = True,
    **changes,
) -> List[List[List[List[Costs]]]]:
    """NN LM costs of every hypothesis by each of K models scored in lockstep: ``result[m]`` is
    what score_nbest gives for ``models[m]``, except that with ``state_carry`` rescored every
    model carries its state from the same hypothesis, the best by the mixed final cost
    ``fixed + weight * sum_m mix[m] * sum(costs_m)`` (rescore.nbest.interp.mixed_nn_cost). With
    ``none`` or ``first-pass`` the costs equal K separate score_nbest runs.

    Each model keeps its own vocabulary, body, OOV penalty (``oov_penalties[m]``, default the
    settings' for every model) and resolved normalisation; the settings (with ``changes``) are
    common to all, as in score_nbest.
    """
    settings, device = _settings(settings, changes)
    if len(models) != len(mix) or not models:
        raise RescoreError(f"one share per model ({len(models)} models)", got=f"{len(mix)} shares")
    if any(m.scores_nbest for m in models):
        raise RescoreError("--mix-carry own with an hf: model among several", got="lockstep")
    penalties = (list(oov_penalties) if oov_penalties is not None
                 else [_penalty(settings.oov_penalty)] * len(models))
    if len(penalties) != len(models):
        raise RescoreError(f"one OOV penalty per model ({len(models)} models)", got=f"{len(penalties)}")
    preps = [_prepare(m, conversations, weight, settings, device, p, stats, progress)
             for m, p in zip(models, penalties)]
    with torch.inference_mode():
        result = _lockstep([run(ctx, encoded, fixed) for ctx, run, encoded, fixed in preps],
                           carry_choice(settings.state_carry, weight, mix))
    for ctx, *_ in preps:
        _log_stats(ctx)
    return result


def _settings(settings: Optional[EngineSettings], changes: dict):
    """(settings with changes, the device spec): ``device`` may be a torch.device (a model
    already placed), which the settings, torch-free, do not hold."""
    device = changes.pop("device", None)
    if isinstance(device, torch.device):
        changes["device"] = "cuda" if device.type == "cuda" else "cpu"
    elif device is not None:
        changes["device"] = device
    settings = (settings or EngineSettings()).replace(**changes)
    return settings, device if isinstance(device, torch.device) else settings.device


def _penalty(oov_penalty) -> float:
    """The OOV penalty in nats: 0 where not set; 'auto' is resolved by the job per model."""
    if oov_penalty is None:
        return 0.0
    if isinstance(oov_penalty, str):
        raise RescoreError("an OOV penalty in nats (the job resolves 'auto' per model: rescore.jobs.scoring)",
                           got=oov_penalty)
    return float(oov_penalty)


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


def _log_stats(ctx: RunContext) -> None:
    stats = ctx.stats
    log.info("%d hypotheses, %d tokens: %d rows computed in %d forward calls", stats.hyps,
             stats.tokens, stats.rows, stats.calls)


def _prepare(model, conversations, weight: float, settings: EngineSettings, device, oov_penalty: float,
             stats: Optional[EngineStats], progress: bool):
    """Set up one model's run: (context, run function, encoded hypotheses, fixed costs);
    ``run(ctx, encoded, fixed)`` is a generator (_lockstep). device: the settings' spec or a
    torch.device."""
    if settings.schedule == "tree" and not model.supports_tree:
        raise RescoreError("a model with a tree forward for schedule 'tree' (a Transformer "
                           "with a softmax head)", got=type(model).__name__)
    if settings.history_min_posterior > 0 and not has_history(model.initial_state(1)):
        raise OptionError("a model with a word history (a pointer head, or --cache-window > 0)",
                          "--history-min-posterior",
                          got=f"head {model.head_name}")
    normalized = resolve_normalize(model, settings.normalize) == "exact"
    dev = resolve_device(device)
    stats = stats if stats is not None else EngineStats()
    vocab = model.vocab
    encoded = _encode(vocab, conversations)
    fixed = [[list(u.fixed) for u in conv] for conv in conversations]
    ctx = RunContext(model=model.to(dev).eval(), device=dev, weight=weight, settings=settings,
                     eos=vocab.eos_id, n_vocab=len(vocab), oov_penalty=oov_penalty,
                     forward=Forward(model, dev, settings.max_tokens, stats, settings.precision, normalized),
                     stats=stats, progress=progress)
    n_hyps = sum(len(u) for conv in encoded for u in conv)
    log.info("scoring %d hypotheses of %d utterances in %d conversations (engine %s, carry %s, "
             "device %s, %s)", n_hyps, sum(len(c) for c in encoded), len(encoded), settings.engine,
             settings.state_carry, dev, "normalised" if normalized else "unnormalised")
    return ctx, _RUNS[settings.engine], encoded, fixed
