"""What a training run's ``last.pt`` keeps besides the weights and the optimizer state: the
``TrainState`` (the step, the learning rate and its annealing, the running sums of the epoch in
progress) and every process's RNG state, so that a resumed run continues bit for bit.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List

import torch


@dataclass
class TrainState:
    """The counters of a run, saved as ``last.pt``'s ``train_state`` (with the options, the
    optimizer, RNG and carried model state beside them)."""

    epoch: int = 0  # epochs finished
    step: int = 0  # optimizer steps taken: the data position too (chunk step % n_chunks)
    epoch_start: int = 0  # the step at which the current epoch began (a resumed epoch finishes it)
    lr: float = 0.0  # learning rate before warm-up (divided by the anneal factor on each stall)
    anneals: int = 0  # epochs whose validation loss did not improve on the best
    best: float = math.inf  # best validation loss so far (per token, natural log)
    records: List[Dict[str, Any]] = field(default_factory=list)  # one per finished epoch
    epoch_loss: float = 0.0  # sum of the batch losses of the epoch in progress
    epoch_tokens: int = 0  # target tokens of the epoch in progress, all processes
    epoch_seconds: float = 0.0  # wall time of the epoch in progress (its steps only)
    train_seconds: float = 0.0  # wall time of the finished epochs' steps (validation not counted)
    epoch_cpu_seconds: float = 0.0  # this process's CPU time of the epoch in progress
    cpu_seconds: float = 0.0  # this process's CPU time of the finished epochs' steps

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_saved(cls, saved: Dict[str, Any], lr: float) -> "TrainState":
        """The state in a ``last.pt``'s ``train_state`` (what it lacks: ``lr`` and the defaults)."""
        names = {f.name for f in fields(cls)}
        state = cls(**{"lr": lr, **{k: v for k, v in saved.items() if k in names}})
        if "train_seconds" not in saved:  # a last.pt from before --max-minutes
            state.train_seconds = sum(r["train_seconds"] for r in state.records)
        if "cpu_seconds" not in saved:  # before CPU budgets: wall time, an upper bound
            state.cpu_seconds = state.train_seconds
            state.epoch_cpu_seconds = state.epoch_seconds
        return state


def get_rng(device: torch.device) -> Dict[str, Any]:
    """This process's RNG states (torch, Python, CUDA on a GPU) as plain data."""
    rng = {"torch": torch.get_rng_state(), "python": list(_flatten(random.getstate()))}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def _flatten(state):
    """random.getstate() as plain data (a checkpoint holds no tuples of tuples it cannot load)."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def set_rng(rng: Dict[str, Any], device: torch.device) -> None:
    """Restore what ``get_rng`` saved."""
    torch.set_rng_state(rng["torch"])
    if "python" in rng:
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
