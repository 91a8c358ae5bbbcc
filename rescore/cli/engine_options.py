"""The NN LM scoring options of rescore-nbest: ``--model`` and the engine's settings.

Kept apart from rescore/cli/nbest.py so that command stays readable: it adds ``@engine_options``
and turns the values into a ``rescore.pipeline.ScoringOptions`` with ``scoring_options``.
"""

from __future__ import annotations

import click

# rescore.engine's names, from a module that does not import torch (`--help` stays instant).
from rescore.pipeline import ENGINES, MIX_CARRY, NORMALIZE, PRECISIONS, SCHEDULES, STATE_CARRY, ScoringOptions


class OovPenalty(click.ParamType):
    """A float, or 'auto' (resolved once the model and the training text are loaded)."""

    name = "NATS|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, float) or value == "auto":
            return value
        try:
            return float(value)
        except ValueError:
            self.fail(f"expected a number or 'auto', got {value!r}", param, ctx)

_OPTIONS = [
    click.option("--model", type=click.Path(dir_okay=False), multiple=True,
                 help="LM checkpoint (rescore-train-lm): score every hypothesis with it and write "
                      "OUT_DIR/lmwt.nn (Kaldi pytorchnn format) instead of reading --nn-costs. "
                      "Repeat it (--model A --model B) to interpolate several NN LMs with --mix: "
                      "each is scored on its own (its own vocabulary, body and OOV penalty) into "
                      "OUT_DIR/lmwt.nn.1 ... lmwt.nn.K, and lmwt.nn holds the mixed costs. "
                      "hf:DIR: a Hugging Face causal LM (save_pretrained's directory, local files "
                      "only; pip install 'rescore[hf]'), its subword costs summed per word."),
    click.option("--state-carry", type=click.Choice(STATE_CARRY), default="rescored",
                 help="Start each utterance from the LM state (and pointer history) after the "
                      "previous utterance's best hypothesis: by the final interpolated cost "
                      "(rescored), rank 1 (first-pass), or not at all (none). With several "
                      "models see --mix-carry; none and first-pass give exactly the mix of the "
                      "one-model runs."),
    click.option("--mix-carry", type=click.Choice(MIX_CARRY), default="mixed",
                 help="Several --model with --state-carry rescored: every model carries from the "
                      "best hypothesis by the mixed cost, the models scored in lockstep (mixed), "
                      "or each from the best under its own cost at the total weight, "
                      "fixed + w * l_k (own: each model's lmwt.nn.k is that of a one-model run)."),
    click.option("--device", default="auto",
                 help="auto (CUDA when present), cpu, cuda or cuda:N."),
    click.option("--max-tokens", type=int, default=2048,
                 help="Most token positions in one forward call (halved on CUDA out-of-memory)."),
    click.option("--engine", type=click.Choice(ENGINES), default="fast",
                 help="fast: prefix trie, conversations side by side; padded: one padded batch "
                      "per utterance (Kaldi's way); naive: one hypothesis at a time (reference)."),
    click.option("--oov-penalty", type=OovPenalty(), default="0",
                 help="Extra cost per out-of-vocabulary word, on its <unk> probability: a number "
                      "of nats, or 'auto' = ln(number of word types outside the model's vocabulary "
                      "among the --train-text words and the recognizer's words.txt, where there "
                      "is one), recommended unless the model's vocabulary is words.txt's."),
    click.option("--schedule", type=click.Choice(SCHEDULES), default="auto",
                 help="Fast engine's order of work (same costs): levels (trie level by level, "
                      "one-token rows), segments (branch-free chains as rows), tree (a whole "
                      "trie per row under a tree mask; Transformer + softmax head only) or "
                      "auto (segments for big states such as a KV cache, else levels)."),
    click.option("--precision", type=click.Choice(PRECISIONS), default="auto",
                 help="Matrix products of the LM: auto (bf16/fp16 autocast on CUDA, fp32 on "
                      "the CPU), fp32, or bf16 (also on a CPU with AVX512-BF16/AMX: faster, "
                      "costs move by a median ~0.05 nat per hypothesis)."),
    click.option("--normalize", type=click.Choice(NORMALIZE), default="exact",
                 help="exact: normalised log-probabilities; none: leave the softmax normaliser "
                      "out (only each target's row of the output layer is computed; for a "
                      "model trained with rescore-train-lm --self-norm); auto: none for a "
                      "self-normalised model, else exact."),
    click.option("--conv-batch", type=int, default=16,
                 help="Conversations the fast engine scores side by side (one block at a time)."),
    click.option("--split", "split_spec", metavar="K/N",
                 help="Score only job K of N (contiguous runs of --conv-batch blocks of "
                      "conversations); `cat` the jobs' lmwt.nn in job order to get exactly the "
                      "one-process file. A job parses only its conversations' entries (every "
                      "key and the data dir are still checked; a bad value is the error of the "
                      "job that owns it). Each job needs its own OUT_DIR (Kaldi's archives.JOB): "
                      "a dir that holds another job's outputs is refused."),
    # Neural cache (issue 5): a test-time wrapper of the loaded model, rescore.models.cache.
    click.option("--cache-window", type=int, default=0,
                 help="Neural cache (Grave et al. 2017) on --model: (hidden state, next word) "
                      "pairs kept, over the decoded history; 0: no cache."),
    click.option("--hf-context", type=int, default=512, show_default=True,
                 help="--model hf:DIR (a Hugging Face causal LM, save_pretrained's directory): "
                      "tokens of carried context, the last ones of the conversation's best "
                      "hypotheses so far."),
    click.option("--cache-theta", type=float, default=0.3, help="Neural cache flatness theta (> 0)."),
    click.option("--cache-lambda", type=float, default=0.1,
                 help="Neural cache interpolation weight lambda, in [0, 1)."),
]


def engine_options(f):
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def scoring_options(*, model, state_carry, device, max_tokens, engine, oov_penalty, conv_batch,
                    schedule, precision, normalize, cache_window, cache_theta,
                    cache_lambda, mix_carry="mixed", hf_context=512) -> ScoringOptions:
    """The options of ``@engine_options`` (but --split) as a checked ScoringOptions; model: the
    --model values (none, one or several)."""
    return ScoringOptions(model=tuple(model) if model else None, state_carry=state_carry, device=device, max_tokens=max_tokens,
                          engine=engine, oov_penalty=oov_penalty, conv_batch=conv_batch,
                          schedule=schedule, precision=precision, normalize=normalize,
                          cache_window=cache_window,
                          cache_theta=cache_theta, cache_lambda=cache_lambda, mix_carry=mix_carry,
                          hf_context=hf_context)
