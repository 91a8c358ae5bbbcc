"""A cascade of two NN LMs: a cheap one scores every hypothesis, an expensive one only each
utterance's survivors under the cheap one.

The rule (rescore-nbest --cascade-top K / --cascade-margin M, with two --model, cheap first):

1. The cheap model scores every hypothesis (carrying from its own best, as a one-model run).
2. Each utterance's hypotheses are ranked by the cheap model's interpolated total,
   ``fixed + w * l_cheap`` under the run's setting (ties: the better first-pass rank first).
   Its survivors are the top K of that ranking (rank <= K) whose total is within M nats of the
   utterance's best (gap <= M); with only one of the two options, only that limit applies.
   The best hypothesis under the cheap model always survives.
3. The expensive model scores the survivors only, carrying from the cascade's final choice (the
   best survivor by the mixed total ``fixed + w * (s1 * l_cheap + s2 * l_expensive)``; with
   ``--mix-carry own``, from the best survivor by ``fixed + w * l_expensive``).
4. A hypothesis that did not survive keeps the cheap model's cost in place of the expensive
   one's (lmwt.nn.2), and it cannot win: the 1-best, the report and rescore-tune choose among
   survivors only (their total is taken as +inf), and in lmwt.interp, written for Kaldi's own
   scoring, its graph cost carries OUT_OF_CASCADE nats more.

OUT_DIR/lmwt.cascade records the ranking of step 2 (``key rank gap scored``: the rank, 1 the
best, the gap to the best in nats, 1 where the expensive model scored it, else 0), so that
rescore-tune can sweep smaller K and M from one scoring at the largest (a smaller K or M keeps a
subset of the scored hypotheses; the ranking stays that of the scoring run, as the state carry
stays that of the run's setting when rescore-tune sweeps the weight).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np

from rescore.errors import RescoreError, check
from rescore.io.files import read_json

PathLike = Union[str, Path]

# Extra graph cost (nats) of a hypothesis outside the cascade in lmwt.interp: far above any
# difference of costs within an N-best list, so that Kaldi's scoring never picks it either.
OUT_OF_CASCADE = 10000.0
CASCADE_FILE = "lmwt.cascade"


@dataclass(frozen=True)
class Cascade:
    """Which hypotheses the expensive (last) model scores: the top ``top`` of each utterance by
    the cheap model's total and those within ``margin`` nats of its best (module doc). top 0
    and margin None: no limit of that kind; both so: no cascade."""

    top: int = 0  # K: at most this many survivors per utterance; 0: no limit by rank
    margin: Optional[float] = None  # M: survivors within M nats of the best; None: no limit by cost

    def __post_init__(self):
        check(not isinstance(self.top, bool) and isinstance(self.top, int) and self.top >= 0,
              "an integer >= 1 (hypotheses per utterance; 0: no limit by rank)", "--cascade-top", self.top)
        if self.margin is not None:
            check(isinstance(self.margin, (int, float)) and not isinstance(self.margin, bool)
                  and math.isfinite(self.margin) and self.margin >= 0,
                  "a finite number of nats >= 0", "--cascade-margin", self.margin)

    @property
    def on(self) -> bool:
        return self.top > 0 or self.margin is not None

    def as_dict(self) -> dict:
        return {"top": self.top or None, "margin": self.margin}

    @classmethod
    def from_params(cls, path: PathLike) -> Optional["Cascade"]:
        """The cascade a --params file records (rescore-tune --params-out after a sweep with
        --cascade: ``"cascade": {"top": K or null, "margin": M or null}``), checked; None where
        it records none."""
        d = read_json(path)
        c = d.get("cascade") if isinstance(d, dict) else None
        if c is None:
            return None
        expected = "'cascade': {\"top\": an integer >= 1 or null, \"margin\": a number of nats >= 0 or null}"
        if not isinstance(c, dict) or set(c) - {"top", "margin"}:
            raise RescoreError(expected, path=path, got=json.dumps(c))
        top, margin = c.get("top"), c.get("margin")
        try:
            cascade = cls(0 if top is None else top, margin)
        except RescoreError:
            raise RescoreError(expected, path=path, got=json.dumps(c)) from None
        if (top is not None and top < 1) or not cascade.on:
            raise RescoreError(expected, path=path, got=json.dumps(c))
        return cascade


def rank_and_gap(totals: np.ndarray, starts: np.ndarray):
    """Each hypothesis' rank within its utterance (1 = lowest total; ties: the earlier, i.e. the
    better first-pass rank, first) and its gap to the utterance's lowest total.

    totals: (num_hyps,) float64 the cheap model's interpolated totals, utterance blocks starting
    at ``starts`` (U,) int64. Returns (rank (num_hyps,) int64, gap (num_hyps,) float64)."""
    n = len(totals)
    rank = np.zeros(n, dtype=np.int64)
    gap = np.zeros(n, dtype=np.float64)
    ends = np.append(starts[1:], n) if len(starts) else starts
    for s, e in zip(starts.tolist(), ends.tolist()):
        block = totals[s:e]
        order = np.argsort(block, kind="stable")
        rank[s + order] = np.arange(1, e - s + 1)
        gap[s:e] = block - block.min()
    return rank, gap


def survivors(rank: np.ndarray, gap: np.ndarray, cascade: Cascade) -> np.ndarray:
    """(num_hyps,) bool: the hypotheses that survive the cascade's limits (module doc)."""
    keep = np.ones(len(rank), dtype=bool)
    if cascade.top > 0:
        keep &= rank <= cascade.top
    if cascade.margin is not None:
        keep &= gap <= cascade.margin
    return keep


class CascadeRanks:
    """The ranking of a cascade's scoring run, by hypothesis key (the lines of lmwt.cascade):
    rank (1 = best under the cheap model), gap (nats above the best) and whether the expensive
    model scored it. ``source``: the file, for the errors."""

    def __init__(self, keys: Sequence[str], rank, gap, scored, source: Optional[str] = None):
        self.at = {k: i for i, k in enumerate(keys)}
        self.rank = np.asarray(rank, dtype=np.int64)
        self.gap = np.asarray(gap, dtype=np.float64)
        self.scored = np.asarray(scored, dtype=bool)
        self.source = source

    @classmethod
    def read(cls, path: PathLike) -> "CascadeRanks":
        """lmwt.cascade as rescore-nbest writes it (write_ranks)."""
        from rescore.io.kaldi import read_nn_costs

        rows = read_nn_costs(path)
        for k, r in rows.items():
            if len(r) != 3 or r[0] < 1 or r[0] != int(r[0]) or r[1] < 0 or r[2] not in (0.0, 1.0):
                raise RescoreError(f"'key rank gap scored' (rank an integer >= 1, gap >= 0, scored 0 or 1) "
                                   f"for key '{k}'", path=path, got=" ".join(f"{x:g}" for x in r))
        keys = list(rows)
        vals = np.array([rows[k] for k in keys], dtype=np.float64).reshape(-1, 3)
        return cls(keys, vals[:, 0].astype(np.int64), vals[:, 1], vals[:, 2] > 0, str(path))

    @classmethod
    def read_all(cls, paths: Sequence[PathLike]) -> "CascadeRanks":
        """The lmwt.cascade of each job of a step (one per archives.JOB) as one ranking."""
        parts = [cls.read(p) for p in paths]
        if len(parts) == 1:
            return parts[0]
        keys = [k for part in parts for k in part.at]
        if len(set(keys)) < len(keys):
            raise RescoreError("each hypothesis in one job's lmwt.cascade", path=paths[0], got="a key in two jobs")
        return cls(keys, *(np.concatenate([getattr(part, a) for part in parts]) for a in ("rank", "gap", "scored")),
                   source=str(paths[0]))

    def mask(self, keys: Sequence[str], cascade: Cascade) -> np.ndarray:
        """(len(keys),) bool: the hypotheses of ``keys`` (a set's, in its order) that survive
        ``cascade`` among those the expensive model scored."""
        try:
            idx = np.array([self.at[k] for k in keys], dtype=np.int64)
        except KeyError as e:
            raise RescoreError(f"a cascade rank for key '{e.args[0]}'", path=self.source, got="none") from None
        return self.scored[idx] & survivors(self.rank[idx], self.gap[idx], cascade)

    def lines(self, keys: Sequence[str]) -> List[str]:
        """The lines of lmwt.cascade, ``key rank gap scored `` (Kaldi text style), in the order of keys."""
        return [f"{k} {self.rank[i]} {float(self.gap[i])!r} {int(self.scored[i])} \n"
                for k, i in ((k, self.at[k]) for k in keys)]


def write_ranks(path: PathLike, ranks: CascadeRanks, keys: Sequence[str]) -> None:
    """Write lmwt.cascade (CascadeRanks.lines), atomically."""
    from rescore.io.files import atomic_output

    with atomic_output(path, "w") as f:
        f.write("".join(ranks.lines(keys)))
