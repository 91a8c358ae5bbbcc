"""The NN LM scoring engine's settings: one frozen dataclass, the one place each is spelled.

Each field carries its choices (or its lower bound), its default and its help text (field
metadata), so that rescore-nbest's options (rescore.cli.engine_options) are generated from it and
the engine (rescore.engine.score.score_nbest) takes one :class:`EngineSettings` whole. Also the
names of the model bodies (rescore.models.bodies registers a class under each; rescore-train-lm's
--arch offers them), the choices of the import commands and the rounds of rescore-tune's refining
tune. Torch-free: a command's ``--help`` and its option checks stay instant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional, Tuple, Union

from rescore.errors import check, check_device

# The model bodies by name: rescore.models.bodies registers one class under each name (and no
# other), rescore-train-lm's --arch offers them all.
RNN_BODIES = ("lstm", "gru")
TRANSFORMER_BODIES = ("transformer", "kaldi-transformer")  # --n-heads, --context, --positions, --ff-mult
BODY_NAMES = RNN_BODIES + TRANSFORMER_BODIES

ENGINES = ("fast", "padded", "naive")
STATE_CARRY = ("none", "first-pass", "rescored")
MIX_CARRY = ("mixed", "own")  # several models, carry rescored: from the mixed best, or each its own
SCHEDULES = ("auto", "levels", "segments", "tree")
PRECISIONS = ("auto", "fp32", "bf16", "int8")
NORMALIZE = ("exact", "none", "auto")

OOV_AUTO = "auto"  # --oov-penalty auto: ln(word types outside the model's vocabulary)
# The OOV penalty where neither a training text nor a words.txt is known (nothing to count).
OOV_NONE = 0.0
HF_PREFIX = "hf:"  # --model hf:DIR: a Hugging Face causal LM (rescore.models.hf)

# rescore-import-lm --dtype: the dtypes the imported weights may be written in (rescore.models.hf_import)
IMPORT_DTYPES = ("float32", "bfloat16", "float16")
# rescore-import-kaldi-lm --model-type: the models of Kaldi's steps/pytorchnn (rescore.models.kaldi_lm)
KALDI_MODEL_TYPES = ("LSTM", "GRU", "Transformer")

# rescore-tune --refine-model (rescore.jobs.refine): scorings per tuning set, by default and at most
REFINE_ROUNDS = 3
MAX_REFINE_ROUNDS = 20


def _setting(default, help: str, *, choices: Optional[Tuple[str, ...]] = None, low=None,
             show_default=None):
    """A field with its command-line description: choices (a click.Choice), or for a number its
    lower bound ``low`` (integers: >= low); ``show_default``: the default as --help shows it,
    where the field's default (None) is resolved later."""
    return field(default=default, metadata={"help": help, "choices": choices, "low": low,
                                            "show_default": show_default})


@dataclass(frozen=True)
class EngineSettings:
    """How the engine scores (rescore.engine.score; ``rescore-nbest --help``). Checked when built: an
    OptionError names the option of a bad value (exit 2)."""

    state_carry: str = _setting(
        "rescored", choices=STATE_CARRY,
        help="Start each utterance from the LM state (and pointer history) after the "
             "previous utterance's best hypothesis: by the final interpolated cost "
             "(rescored), rank 1 (first-pass), or not at all (none). With several "
             "models see --mix-carry; none and first-pass give exactly the mix of the "
             "one-model runs.")
    mix_carry: str = _setting(
        "mixed", choices=MIX_CARRY,
        help="Several --model with --state-carry rescored: every model carries from the "
             "best hypothesis by the mixed cost, the models scored in lockstep (mixed), "
             "or each from the best under its own cost at the total weight, "
             "fixed + w * l_k (own: each model's lmwt.nn.k is that of a one-model run).")
    device: str = _setting("auto", help="auto (CUDA when present), cpu, cuda or cuda:N.")
    max_tokens: int = _setting(
        2048, low=1, help="Most token positions in one forward call (halved on CUDA out-of-memory).")
    engine: str = _setting(
        "fast", choices=ENGINES,
        help="fast: prefix trie, conversations side by side; padded: one padded batch "
             "per utterance (Kaldi's way); naive: one hypothesis at a time (reference).")
    # nats per OOV word, or "auto"; None: the job's default (auto where a training text or a
    # words.txt is known, else OOV_NONE: rescore.jobs.nbest.NbestJob)
    oov_penalty: Union[None, float, str] = _setting(
        None, low=0.0, show_default=f"{OOV_AUTO} with --train-text or a words.txt, else {OOV_NONE:g}",
        help="Extra cost per out-of-vocabulary word, on its <unk> probability: a number "
             "of nats, or 'auto' = ln(number of word types outside the model's vocabulary "
             "among the --train-text words and the recognizer's words.txt, where there "
             "is one), recommended unless the model's vocabulary is words.txt's.")
    schedule: str = _setting(
        "auto", choices=SCHEDULES,
        help="Fast engine's order of work (same costs): levels (trie level by level, "
             "one-token rows), segments (branch-free chains as rows), tree (a whole "
             "trie per row under a tree mask; Transformer + softmax head only) or "
             "auto (segments for big states such as a KV cache, else levels).")
    precision: str = _setting(
        "auto", choices=PRECISIONS,
        help="Matrix products of the LM: auto (bf16/fp16 autocast on CUDA, fp32 on "
             "the CPU), fp32, bf16 (also on a CPU with AVX512-BF16/AMX: faster, "
             "costs move by a median ~0.05 nat per hypothesis), or int8 (CPU only: "
             "int8 products of the LSTM step and the softmax output layer, fused "
             "kernels with one thread, else PyTorch's dynamic ones; about 2x the fp32 "
             "rate on AVX2; costs move a little).")
    normalize: str = _setting(
        "exact", choices=NORMALIZE,
        help="exact: normalised log-probabilities; none: leave the softmax normaliser "
             "out (only each target's row of the output layer is computed; for a "
             "model trained with rescore-train-lm --self-norm); auto: none for a "
             "self-normalised model, else exact.")
    conv_batch: int = _setting(
        16, low=1, help="Conversations the fast engine scores side by side (one block at a time).")
    # Neural cache: a test-time wrapper of the loaded model (rescore.models.cache); 0: none.
    cache_window: int = _setting(
        0, low=0, help="Neural cache (Grave et al. 2017) on --model: (hidden state, next word) "
                       "pairs kept, over the decoded history; 0: no cache.")
    cache_theta: float = _setting(0.3, help="Neural cache flatness theta (> 0).")
    cache_lambda: float = _setting(0.1, help="Neural cache interpolation weight lambda, in [0, 1).")
    history_min_posterior: float = _setting(
        0.0, help="Leave out of the carried word history (a pointer head's, the neural "
                  "cache's) each word of the decoded best hypothesis whose N-best posterior "
                  "is below this, so that a likely misrecognised word is not copied later; "
                  "0: keep every word, which measured best (docs/models.md). Needs "
                  "--state-carry rescored.")
    hf_context: int = _setting(
        512, low=1, help="--model hf:DIR (a Hugging Face causal LM): at most this many tokens of "
                         "carried context, the last ones of the conversation's best hypotheses so "
                         "far; past it the oldest quarter of the window is dropped at once.")

    def __post_init__(self):
        check_device(self.device)
        for f in fields(self):
            value, choices, low = getattr(self, f.name), f.metadata["choices"], f.metadata["low"]
            option = option_name(f.name)
            if choices is not None:
                check(value in choices, f"one of {', '.join(choices)}", option, value)
            elif isinstance(low, int):
                check(not isinstance(value, bool) and isinstance(value, int) and value >= low,
                      f"an integer >= {low}", option, value)
        penalty = self.oov_penalty
        if penalty is not None and penalty != OOV_AUTO:
            check(isinstance(penalty, (int, float)) and not isinstance(penalty, bool)
                  and math.isfinite(penalty) and penalty >= 0,
                  f"a finite number of nats >= 0, or '{OOV_AUTO}'", "--oov-penalty", penalty)
        check(math.isfinite(self.cache_theta) and self.cache_theta > 0, "a finite number > 0",
              "--cache-theta", self.cache_theta)
        check(math.isfinite(self.cache_lambda) and 0.0 <= self.cache_lambda < 1.0, "a number in [0, 1)",
              "--cache-lambda", self.cache_lambda)

        check(math.isfinite(self.history_min_posterior) and 0.0 <= self.history_min_posterior <= 1.0,
              "a posterior in [0, 1]", "--history-min-posterior", self.history_min_posterior)
        check(self.history_min_posterior == 0 or self.state_carry == "rescored",
              "--state-carry rescored with --history-min-posterior (the posteriors are the "
              "rescored costs')", "--state-carry", self.state_carry)

    def replace(self, **changes) -> "EngineSettings":
        """These settings with some changed (checked again)."""
        return replace(self, **changes) if changes else self

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def is_hf_spec(spec) -> bool:
    """Whether a ``--model`` value names a Hugging Face model directory (``hf:DIR``)."""
    return str(spec).startswith(HF_PREFIX)


def option_name(name: str) -> str:
    """The command-line option of a setting: state_carry -> --state-carry."""
    return "--" + name.replace("_", "-")
