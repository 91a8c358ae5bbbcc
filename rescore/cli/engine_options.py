"""The NN LM scoring options of rescore-nbest (issue 4): ``--model`` and the engine's settings.

Kept apart from rescore/cli/nbest.py so that command stays readable: it adds
``@engine_options`` and calls ``apply_engine_options`` after loading the N-best set.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

# Copies of rescore.engine's names, so that `--help` does not import torch (a test checks them).
ENGINES = ("fast", "padded", "naive")
STATE_CARRY = ("none", "first-pass", "rescored")
SCHEDULES = ("auto", "levels", "segments", "tree")
PRECISIONS = ("auto", "fp32", "bf16")
NORMALIZE = ("exact", "none", "auto")

log = logging.getLogger("rescore-nbest")


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
    click.option("--model", type=click.Path(dir_okay=False),
                 help="LM checkpoint (rescore-train-lm): score every hypothesis with it and write "
                      "OUT_DIR/lmwt.nn (Kaldi pytorchnn format) instead of reading --nn-costs."),
    click.option("--state-carry", type=click.Choice(STATE_CARRY), default="rescored",
                 help="Start each utterance from the LM state (and pointer history) after the "
                      "previous utterance's best hypothesis: by the final interpolated cost "
                      "(rescored), rank 1 (first-pass), or not at all (none)."),
    click.option("--device", default="auto",
                 help="auto (CUDA when present), cpu, cuda or cuda:N."),
    click.option("--max-tokens", type=int, default=2048,
                 help="Most token positions in one forward call (halved on CUDA out-of-memory)."),
    click.option("--engine", type=click.Choice(ENGINES), default="fast",
                 help="fast: prefix trie, conversations side by side; padded: one padded batch "
                      "per utterance (Kaldi's way); naive: one hypothesis at a time (reference)."),
    click.option("--oov-penalty", type=OovPenalty(), default="0",
                 help="Extra cost per out-of-vocabulary word, on its <unk> probability: a number "
                      "of nats, or 'auto' = ln(number of --train-text word types outside the "
                      "model's vocabulary), recommended when the vocabulary is capped."),
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
                      "one-process file."),
    # Neural cache (issue 5): a test-time wrapper of the loaded model, rescore.models.cache.
    click.option("--cache-window", type=click.IntRange(min=0), default=0,
                 help="Neural cache (Grave et al. 2017) on --model: (hidden state, next word) "
                      "pairs kept, over the decoded history; 0: no cache."),
    click.option("--cache-theta", type=float, default=0.3, help="Neural cache flatness theta."),
    click.option("--cache-lambda", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1,
                 help="Neural cache interpolation weight lambda."),
]


def engine_options(f):
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def apply_engine_options(nbest, params, out_dir, nn_costs, *, model, state_carry, device,
                         max_tokens, engine, oov_penalty, conv_batch, split_spec,
                         schedule="auto", precision="auto", normalize="exact",
                         cache_window=0, cache_theta=0.3,
                         cache_lambda=0.1, train_counts=None):
    """(N-best set to rescore, NN costs or None, their source path) after --split and --model."""
    from rescore.engine import parse_split, score_nbest_set, split_slice

    if split_spec:
        k, n = parse_split(split_spec)
        part = nbest.conversations[split_slice(len(nbest.conversations), k, n, conv_batch)]
        nbest = nbest.subset([c.id for c in part])
        log.info("job %d of %d: %d of the %d conversations", k, n, len(part),
                 len(nbest.conversations))
        if not part:
            log.warning("job %d of %d has no conversations (fewer blocks of --conv-batch %d "
                        "than jobs)", k, n, conv_batch)
    if model is None:
        return nbest, None, nn_costs
    if nn_costs:
        raise click.UsageError("--model and --nn-costs exclude each other")
    from rescore.engine import resolve_device
    from rescore.io.kaldi import write_nn_costs
    from rescore.models import load_checkpoint

    dev = resolve_device(device)
    lm = load_checkpoint(model, dev)
    if cache_window > 0:
        from rescore.models.cache import with_cache

        lm = with_cache(lm, cache_window, cache_theta, cache_lambda)
        log.info("neural cache: window %d, theta %g, lambda %g", cache_window, cache_theta,
                 cache_lambda)
    if oov_penalty == "auto":
        if train_counts is None:
            raise click.UsageError("--oov-penalty auto needs --train-text (the LM training text)")
        from rescore.engine import auto_oov_penalty

        oov_penalty = auto_oov_penalty(lm.vocab, train_counts)
        log.info("OOV penalty (auto): %.3f nats per out-of-vocabulary word", oov_penalty)
    costs = score_nbest_set(lm, nbest, params, state_carry=state_carry, device=dev,
                            max_tokens=max_tokens, engine=engine, oov_penalty=oov_penalty,
                            conv_batch=conv_batch, schedule=schedule, precision=precision,
                            normalize=normalize)
    path = Path(out_dir) / "lmwt.nn"
    write_nn_costs(path, costs)
    log.info("wrote %s (%d hypotheses)", path, len(costs))
    return nbest, costs, str(path)
