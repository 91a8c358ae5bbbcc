"""The engine's plain types: a hypothesis as the engine reads it, its costs, and what a run
computed. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

Costs = List[float]  # per-token costs of one hypothesis, end of sentence last


@dataclass
class Hyp:
    ids: List[int]      # vocabulary ids of w1..wn
    ident: List[int]    # identities of w1..wn
    words: Tuple[str, ...] = ()  # the words (a sort key that does not depend on OOV numbering)


@dataclass
class EngineStats:
    """What an engine run computed (for logs and benchmarks)."""

    hyps: int = 0            # hypotheses scored
    tokens: int = 0          # scored tokens (words + end of sentence), the useful work
    rows: int = 0            # token positions the model computed (padding and trie included)
    calls: int = 0           # forward calls
    oom_backoffs: int = 0    # times the rows per call were halved after an out-of-memory error
