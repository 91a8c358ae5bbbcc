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

log = logging.getLogger("rescore-nbest")

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
    click.option("--oov-penalty", type=float, default=0.0,
                 help="Extra cost per out-of-vocabulary word, on its <unk> probability."),
    click.option("--conv-batch", type=int, default=16,
                 help="Conversations the fast engine scores side by side (one block at a time)."),
    click.option("--split", "split_spec", metavar="K/N",
                 help="Score only job K of N (contiguous runs of --conv-batch blocks of "
                      "conversations); `cat` the jobs' lmwt.nn in job order to get exactly the "
                      "one-process file."),
]


def engine_options(f):
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def apply_engine_options(nbest, params, out_dir, nn_costs, *, model, state_carry, device,
                         max_tokens, engine, oov_penalty, conv_batch, split_spec):
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
    costs = score_nbest_set(lm, nbest, params, state_carry=state_carry, device=dev,
                            max_tokens=max_tokens, engine=engine, oov_penalty=oov_penalty,
                            conv_batch=conv_batch)
    path = Path(out_dir) / "lmwt.nn"
    write_nn_costs(path, costs)
    log.info("wrote %s (%d hypotheses)", path, len(costs))
    return nbest, costs, str(path)
