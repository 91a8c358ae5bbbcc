"""NN LM costs of a loaded N-best set (rescore.nbest.sets.NbestSet) by one or several checkpoints:
loading each (its device, neural cache and OOV penalty) and running the engine (rescore.engine.score)
on the set's conversations. Torch is imported only when a model is loaded or scored.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import Dict, List, Optional, Sequence

from rescore.nbest.interp import Params
from rescore.settings import OOV_AUTO, EngineSettings, is_hf_spec

log = logging.getLogger(__name__)


def auto_oov_penalty(vocab, train_counts=None, lexicon=()) -> float:
    """ln(number of word types that ``<unk>`` stands for): the training word types outside
    ``vocab``, with the recognizer's words outside it (``lexicon``: the N-best set's words.txt
    words, where there is one). It spreads the ``<unk>`` probability evenly over them, so that the
    NN LM does not favour hypotheses with words it never saw (found on the mini recipe and the
    dev benchmark: docs/benchmarks.md). The lexicon matters for a model with every training word:
    there no training type is outside, yet the recognizer still has words the model never saw.

    vocab: a Vocabulary (``.words``); train_counts: Counter of the LM training text's words (or
    None without one); lexicon: the recognizer's words (NbestJob.lexicon).
    """
    known = set(vocab.words)
    unseen = {w for w in (train_counts or ()) if w not in known and w != "<unk>"}
    unseen.update(w for w in lexicon if w not in known)
    return math.log(max(1, len(unseen)))


def load_model(path: str, settings: EngineSettings, train_counts=None, lexicon=()):
    """(model on its device, device, OOV penalty in nats) of one checkpoint for scoring, with the
    settings' neural cache; the OOV penalty 'auto' is the model's own (auto_oov_penalty of
    train_counts and the recognizer's lexicon)."""
    from rescore.engine.score import resolve_device  # (lazy: keeps torch out until a model is scored)
    from rescore.models import load_checkpoint  # (lazy: keeps torch out until a model is scored)

    dev = resolve_device(settings.device)
    if is_hf_spec(path):  # a Hugging Face causal LM
        from rescore.models.hf import load_for_scoring  # (lazy: keeps torch out until a model is scored)

        return load_for_scoring(path, dev, settings)
    lm = load_checkpoint(path, dev)
    if dev.type == "cpu":
        from rescore.engine.kernels import native  # (lazy: keeps torch out until a model is scored)

        log.info(native.describe())
    if settings.cache_window > 0:
        from rescore.models.cache import with_cache  # (lazy: keeps torch out until a model is scored)

        lm = with_cache(lm, settings.cache_window, settings.cache_theta, settings.cache_lambda)
        log.info("neural cache: window %d, theta %g, lambda %g", settings.cache_window,
                 settings.cache_theta, settings.cache_lambda)
    penalty = settings.oov_penalty
    if penalty == OOV_AUTO:
        penalty = auto_oov_penalty(lm.vocab, train_counts, lexicon)
        log.info("OOV penalty (auto): %.3f nats per out-of-vocabulary word", penalty)
    return lm, dev, float(penalty or 0.0)


def engine_inputs(nbest, fixed: Optional[Sequence[float]] = None, params: Optional[Params] = None):
    """The engine's conversations (rescore.engine.score.UttInput: words and fixed costs) of a set;
    fixed: (num_hyps,) the fixed costs in the set's order (combine.CostArrays.fixed), else
    those of params."""
    from rescore.engine.score import UttInput  # (lazy: keeps torch out until a model is scored)

    if fixed is None:
        from rescore.nbest.combine import CostArrays  # (lazy: keeps numpy out of rescore-tune's start-up)

        fixed = CostArrays(nbest).fixed(params)
    fixed = list(map(float, fixed))
    out, i = [], 0
    for c in nbest.conversations:
        conv = []
        for u in c.utterances:
            conv.append(UttInput([h.words for h in u.hyps], fixed[i:i + len(u.hyps)]))
            i += len(u.hyps)
        out.append(conv)
    return out


def by_key(nbest, costs) -> Dict[str, List[float]]:
    """The engine's result[c][u][h] as key -> costs, in the set's order."""
    out: Dict[str, List[float]] = {}
    for conv, conv_costs in zip(nbest.conversations, costs):
        for utt, utt_costs in zip(conv.utterances, conv_costs):
            for hyp, c in zip(utt.hyps, utt_costs):
                out[hyp.key] = c
    return out


def score_nbest_set(model, nbest, params: Params, settings: Optional[EngineSettings] = None,
                    **changes) -> Dict[str, List[float]]:
    """Per-token NN costs of every hypothesis of a loaded N-best set by one model, keyed by
    hypothesis key, in the set's order (conversations, utterances, ranks): the lines of
    ``lmwt.nn``. ``params`` gives the fixed costs and the weight that pick the carried best
    hypothesis; ``settings`` and ``changes`` (stats, progress, settings' fields) go to
    ``rescore.engine.score.score_nbest``."""
    from rescore.engine.score import score_nbest  # (lazy: keeps torch out until a model is scored)

    return by_key(nbest, score_nbest(model, engine_inputs(nbest, params=params), weight=params.weight,
                                     settings=settings, **changes))


def score_models(nbest, params: Params, models: Sequence[str], settings: EngineSettings,
                 fixed: Sequence[float], train_counts=None, lexicon=(), cascade=None) -> List[list]:
    """The engine's costs, result[c][u][h], of every hypothesis by each checkpoint of models.
    Every checkpoint is loaded (and checked) first. Several models with carry rescored and
    mix-carry mixed are scored in lockstep (each carries from the best by the mixed cost under
    params); else one at a time, each carrying from the best under its own cost at the total
    weight. With a cascade (rescore.nbest.cascade.Cascade, two models): score_cascade."""
    return score_sets([(nbest, fixed)], params, models, settings, train_counts, lexicon, cascade)[0]


def score_cascade(loaded: list, convs: list, params: Params, settings: EngineSettings, cascade) -> list:
    """[cheap costs, expensive costs] of a cascade (rescore.nbest.cascade, its module doc has the
    rule): the cheap model (loaded[0]) scores every hypothesis of ``convs`` (engine inputs),
    carrying from its own best; the expensive one (loaded[1]) only each utterance's survivors,
    carrying from the cascade's final choice among them (the best by the mixed total; with
    --mix-carry own, by its own). A hypothesis that did not survive gets the cheap model's
    costs in the expensive model's place. Returns (results, rank, gap, scored): results as
    score_sets' of one set, the rest (num_hyps,) arrays in the conversations' order."""
    import numpy as np

    from rescore.engine.score import UttInput, score_nbest  # (lazy: keeps torch out until a model is scored)
    from rescore.nbest.cascade import rank_and_gap, survivors

    w, (s1, s2) = params.weight, params.mix
    lm, dev, penalty = loaded[0]
    log.info("cascade: model 1 (cheap) scores every hypothesis")
    cheap = score_nbest(lm, convs, weight=w, settings=settings, device=dev, oov_penalty=penalty)
    utts = [(u, c) for conv, conv_costs in zip(convs, cheap) for u, c in zip(conv, conv_costs)]
    fixed = np.array([f for u, _ in utts for f in u.fixed], dtype=np.float64)
    lcheap = np.array([sum(r) for _, c in utts for r in c], dtype=np.float64)
    starts = np.cumsum([0] + [len(u.hyps) for u, _ in utts[:-1]]).astype(np.int64) if utts else np.zeros(0, np.int64)
    rank, gap = rank_and_gap(fixed + w * lcheap, starts)
    keep = survivors(rank, gap, cascade)
    mixed_carry = settings.mix_carry == "mixed"
    # The expensive model's carry: argmin fixed' + w' * l_exp over the survivors is the cascade's
    # final choice, fixed + w * (s1 * l_cheap + s2 * l_exp), with fixed' = fixed + w s1 l_cheap and
    # w' = w s2 (mixed); its own best, fixed + w * l_exp (own).
    carry_fixed = fixed + w * s1 * lcheap if mixed_carry else fixed
    sub, i = [], 0
    for conv in convs:
        out = []
        for u in conv:
            idx = [j for j in range(len(u.hyps)) if keep[i + j]]
            out.append(UttInput([u.hyps[j] for j in idx], [float(carry_fixed[i + j]) for j in idx]))
            i += len(u.hyps)
        sub.append(out)
    n_keep = int(keep.sum())
    log.info("cascade: model 2 (expensive) scores %d of the %d hypotheses (%.1f %%; %s)", n_keep, len(keep),
             100.0 * n_keep / max(len(keep), 1), ", ".join(f"{k} {v}" for k, v in cascade.as_dict().items()))
    lm, dev, penalty = loaded[1]
    part = score_nbest(lm, sub, weight=w * s2 if mixed_carry else w, settings=settings, device=dev,
                       oov_penalty=penalty)
    expensive, i = [], 0
    for conv, conv_part, conv_cheap in zip(convs, part, cheap):
        out = []
        for u, u_part, u_cheap in zip(conv, conv_part, conv_cheap):
            scored = iter(u_part)
            out.append([next(scored) if keep[i + j] else u_cheap[j] for j in range(len(u.hyps))])
            i += len(u.hyps)
        expensive.append(out)
    return [cheap, expensive], rank, gap, keep


def score_sets(sets: Sequence[tuple], params: Params, models: Sequence[str], settings: EngineSettings,
               train_counts=None, lexicon=(), cascade=None) -> List[List[list]]:
    """score_models of several N-best sets (``sets``: (set, its fixed costs) each, e.g. the jobs
    of rescore-nbest --jobs) in one engine run per model: every model is loaded once, the sets'
    conversations are scored as one list (so that the forward calls batch across sets), and the
    results are split back: ``out[i]`` is score_models' result for set i. The costs equal those
    of one run per set up to float rounding (other batches)."""
    import torch  # (lazy: keeps torch out until a model is scored)

    from rescore.engine.score import score_nbest, score_nbest_mixed  # (lazy: keeps torch out until a model is scored)

    loaded = [load_model(m, settings, train_counts, lexicon) for m in models]
    per_set = [engine_inputs(nbest, fixed) for nbest, fixed in sets]
    convs = [c for s in per_set for c in s]
    if len(sets) > 1:
        log.info("%d sets, %d conversations, scored together; %d torch threads (OMP_NUM_THREADS, else "
                 "torch's default)", len(sets), len(convs), torch.get_num_threads())
    ranks = None
    if cascade is not None and cascade.on:
        results, *ranks = score_cascade(loaded, convs, params, settings, cascade)
    elif len(models) > 1 and settings.state_carry == "rescored" and settings.mix_carry == "mixed":
        log.info("%d models in lockstep, each carrying from the best by the mixed cost", len(models))
        results = score_nbest_mixed([lm for lm, _, _ in loaded], convs, weight=params.weight, mix=params.mix,
                                    oov_penalties=[p for _, _, p in loaded], settings=settings,
                                    device=loaded[0][1])
    else:
        results = []
        for k, model in enumerate(models):
            if len(models) > 1:
                log.info("model %d of %d: %s", k + 1, len(models), model)
            lm, dev, penalty = loaded[k]
            loaded[k] = None  # freed once scored
            results.append(score_nbest(lm, convs, weight=params.weight, settings=settings, device=dev,
                                       oov_penalty=penalty))
            del lm
    out, start = [], 0
    for s in per_set:
        out.append([r[start:start + len(s)] for r in results])
        start += len(s)
    if ranks is not None:  # (the cascade's ranking, in the sets' order: each set's share of it)
        sizes = [sum(len(u.hyps) for c in s for u in c) for s in per_set]
        bounds = [0, *itertools.accumulate(sizes)]
        out = [CascadeScored(r, *(a[b:e] for a in ranks)) for r, b, e in zip(out, bounds, bounds[1:])]
    return out


class CascadeScored(list):
    """score_sets' result of one set under a cascade: the per-model costs (a list, as without a
    cascade) with the cascade's ``rank``, ``gap`` and ``scored`` arrays (score_cascade)."""

    def __init__(self, results, rank, gap, scored):
        super().__init__(results)
        self.rank, self.gap, self.scored = rank, gap, scored
