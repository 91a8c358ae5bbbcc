"""NN LM costs of a loaded N-best set (rescore.nbest.sets.NbestSet) by one or several checkpoints:
loading each (its device, neural cache and OOV penalty) and running the engine (rescore.engine.score)
on the set's conversations. Torch is imported only when a model is loaded or scored.
"""

from __future__ import annotations

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
                 fixed: Sequence[float], train_counts=None, lexicon=()) -> List[list]:
    """The engine's costs, result[c][u][h], of every hypothesis by each checkpoint of models.
    Every checkpoint is loaded (and checked) first. Several models with carry rescored and
    mix-carry mixed are scored in lockstep (each carries from the best by the mixed cost under
    params); else one at a time, each carrying from the best under its own cost at the total
    weight."""
    return score_sets([(nbest, fixed)], params, models, settings, train_counts, lexicon)[0]


def score_sets(sets: Sequence[tuple], params: Params, models: Sequence[str], settings: EngineSettings,
               train_counts=None, lexicon=()) -> List[List[list]]:
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
    if len(models) > 1 and settings.state_carry == "rescored" and settings.mix_carry == "mixed":
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
    return out
