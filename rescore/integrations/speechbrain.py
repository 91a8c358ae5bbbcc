"""rescore's engine as one of SpeechBrain's rescorers (``speechbrain.decoders.scorer``, 1.1): an
object that its ``RescorerBuilder`` takes beside or instead of its RNNLM, Transformer and
Hugging Face LM rescorers (docs/ecosystems.md)::

    from speechbrain.decoders.scorer import RescorerBuilder
    from rescore.integrations.speechbrain import load_rescorer
    lm = load_rescorer("exp/lm.pt", state_carry="first-pass")     # or hf:DIR
    rescorer = RescorerBuilder(rescorers=[lm], weights={lm.weight_key: 0.5})
    hyps, scores = rescorer.rescore(topk_texts, topk_scores)      # per utterance, best first

What SpeechBrain's own rescorers do not: the hypotheses of an utterance share their prefixes
(rescore.engine's trie: each distinct prefix is computed once), the batch's utterances are scored
side by side, and ``state_carry="first-pass"`` scores the utterances as a stream: each starts from
the LM state after the first-pass best (its list's first hypothesis) of the one before, across
calls too, until ``reset()`` (the engine takes no start state from outside, so each call runs the
LM over the stream's earlier first-pass bests again: a call costs more as its stream grows). The
score of a hypothesis is the LM's log-probability of its words and the end of sentence (natural
log; the engine's costs summed and negated), which ``RescorerBuilder.rescore`` adds to the beam
search's score times the rescorer's weight, as it does for its own rescorers.

The weight key. ``RescorerBuilder`` names a rescorer's weight by its class name (``XRescorer`` ->
``x``) and refuses any name but those of its own rescorers (``rnnlm``, ``transformerlm``,
``huggingfacelm``). So the engine comes as three classes of those names, the same object but for
the name; ``load_rescorer`` picks the key of the model's kind. Use another key where the
builder holds SpeechBrain's rescorer of that kind too. SpeechBrain is not imported here: the
builder calls only ``rescore_hyps`` and ``to_device``, and each class has SpeechBrain's four
methods.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Optional, Sequence, Union

import torch

from rescore.engine.score import UttInput, resolve_device, score_nbest
from rescore.errors import OptionError
from rescore.jobs.scoring import load_model
from rescore.models.base import LanguageModel
from rescore.settings import TRANSFORMER_BODIES, EngineSettings

CARRY = ("none", "first-pass")  # ("rescored" needs the beam search's scores, which rescore_hyps is not given)


class EngineRescorer:
    """SpeechBrain's rescorer interface backed by rescore's engine; use one of the three named
    classes below (or load_rescorer), whose names give RescorerBuilder its weight key.

    model: a checkpoint of rescore-train-lm, ``hf:DIR`` (a Hugging Face causal LM, local files
        only, no code of the model dir run), or a LanguageModel already loaded.
    state_carry: none (each utterance on its own, as SpeechBrain's rescorers) or first-pass (a
        stream: module doc).
    normalize: the text of a hypothesis before scoring (e.g. ``str.lower`` for an LM of
        lower-case text and a recognizer of upper-case words); default: as it is.
    oov_penalty: nats added to the ``<unk>`` cost of a word outside the model's vocabulary.
    settings: the engine's other settings (rescore.settings.EngineSettings: engine, schedule,
        precision, max_tokens ...); state_carry, device and oov_penalty above replace its own.
    device: where the model runs (auto: CUDA when present); to_device moves it.
    """

    def __init__(self, model: Union[str, LanguageModel], *, state_carry: str = "none",
                 normalize: Optional[Callable[[str], str]] = None, oov_penalty: float = 0.0,
                 settings: Optional[EngineSettings] = None, device: str = "auto"):
        if state_carry not in CARRY:
            raise OptionError(f"one of {', '.join(CARRY)}", option="state_carry", got=str(state_carry))
        self.settings = replace(settings or EngineSettings(), state_carry=state_carry, device=str(device),
                                oov_penalty=oov_penalty)
        if isinstance(model, str):  # (rescore-nbest's loading: rescore.jobs.scoring.load_model)
            model, self.device, penalty = load_model(model, self.settings)
            self.settings = replace(self.settings, oov_penalty=penalty)
        else:
            self.device = resolve_device(device)
        self.default_device = self.device
        self.model = model
        self.normalize = normalize
        self.history: List[List[str]] = []  # the stream's first-pass bests so far (first-pass carry)

    @property
    def weight_key(self) -> str:
        """The key of this rescorer's weight in RescorerBuilder's ``weights``."""
        return type(self).__name__.lower().split("rescorer")[0]

    # ---- SpeechBrain's BaseRescorerInterface

    def normalize_text(self, text: str) -> str:
        return self.normalize(text) if self.normalize else text

    def preprocess_func(self, topk_hyps: Sequence[Sequence[str]]) -> List[List[UttInput]]:
        """The engine's conversations of a batch (``topk_hyps[i]``: utterance i's hypotheses,
        texts, best first): one utterance each without carry; with first-pass carry one stream,
        the earlier calls' first-pass bests first (one-hypothesis utterances)."""
        utts = []
        for i, hyps in enumerate(topk_hyps):
            if isinstance(hyps, str) or not hyps:
                raise ValueError(f"utterance {i} of the batch: a non-empty list of hypothesis texts, got {hyps!r}")
            words = [self.normalize_text(str(h)).split() for h in hyps]
            utts.append(UttInput(words, [0.0] * len(words)))
        if self.settings.state_carry == "none":
            return [[u] for u in utts]
        return [[UttInput([h], [0.0]) for h in self.history] + utts]

    @torch.no_grad()
    def rescore_hyps(self, topk_hyps: Sequence[Sequence[str]]) -> torch.Tensor:
        """(sum of the batch's hypotheses,) float64: the LM log-probability of each hypothesis, in
        the order of ``topk_hyps`` flattened (utterance by utterance), as RescorerBuilder reads it."""
        if not topk_hyps:
            return torch.zeros(0, dtype=torch.float64)
        convs = self.preprocess_func(topk_hyps)
        costs = score_nbest(self.model, convs, weight=1.0, settings=self.settings, progress=False,
                            device=self.device)
        skip = len(self.history) if self.settings.state_carry == "first-pass" else 0
        per_utt = [u for conv in costs for u in conv][skip:]
        if self.settings.state_carry == "first-pass":
            self.history += [u.hyps[0] for u in convs[0][skip:]]
        return torch.tensor([-sum(c) for utt in per_utt for c in utt], dtype=torch.float64)

    def to_device(self, device=None) -> None:
        """Run on ``device`` from now on (None: the one given when built), as RescorerBuilder's
        move_rescorers_to_device asks."""
        self.device = self.default_device if device is None else resolve_device(str(device))
        self.model.to(self.device)

    # ---- the stream

    def reset(self) -> None:
        """Start a new stream (first-pass carry): the next utterance starts from an empty history."""
        self.history = []


class RNNLMRescorer(EngineRescorer):
    """The engine under RescorerBuilder's weight key ``rnnlm``."""


class TransformerLMRescorer(EngineRescorer):
    """The engine under RescorerBuilder's weight key ``transformerlm``."""


class HuggingFaceLMRescorer(EngineRescorer):
    """The engine under RescorerBuilder's weight key ``huggingfacelm``."""


KEYS = {"rnnlm": RNNLMRescorer, "transformerlm": TransformerLMRescorer, "huggingfacelm": HuggingFaceLMRescorer}


def load_rescorer(model: Union[str, LanguageModel], weight_key: Optional[str] = None, **options) -> EngineRescorer:
    """The engine as a SpeechBrain rescorer of ``model`` (options: EngineRescorer's), under
    ``weight_key`` (one of KEYS), by default the model's kind: huggingfacelm for ``hf:DIR``,
    transformerlm for a Transformer, rnnlm for an LSTM or GRU."""
    if weight_key is not None and weight_key not in KEYS:
        raise OptionError(f"one of {', '.join(KEYS)} (the only keys RescorerBuilder takes)", option="weight_key",
                          got=str(weight_key))
    if weight_key is None:
        rescorer = RNNLMRescorer(model, **options)  # (loaded once: its kind is the model's)
        weight_key = ("huggingfacelm" if rescorer.model.scores_nbest else
                      "transformerlm" if rescorer.model.config.arch in TRANSFORMER_BODIES else "rnnlm")
        if weight_key == "rnnlm":
            return rescorer
        options = {**options, "device": rescorer.device, "oov_penalty": rescorer.settings.oov_penalty}
        model = rescorer.model
    return KEYS[weight_key](model, **options)
