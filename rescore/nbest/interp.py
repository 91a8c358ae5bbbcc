"""The interpolation of an N-best hypothesis's costs: the one place the cost formula is written.

For hypothesis h with n-gram LM cost ``l_ng = withlm - nolm``, graph rest ``g_0 = nolm``, NN LM
cost ``l_nn``, acoustic cost ``ac`` and ``|h|`` words::

    cost(h) = ac / inv_acwt + g_0 + (1 - w) * l_ng + wip * |h|  +  w * l_nn
            = fixed_cost(h)                                      +  w * l_nn

``fixed_cost`` holds everything but the NN term, so the engine (which computes ``l_nn`` while
carrying LM state along the best hypotheses) can pick each utterance's best by the final cost.
The new graph cost written back for Kaldi (``lmwt.interp``) is ``g_0 + (1 - w) * l_ng + w * l_nn``:
Kaldi's ``local/score.sh`` adds the acoustic scale and the insertion penalty itself.

With K NN LMs (``rescore-nbest --model A --model B``) ``l_nn`` is their log-linear interpolation
with shares ``mix`` (each >= 0, summing to 1), as Kaldi users interpolate the scores of two LMs::

    l_nn = sum_k mix_k * l_nn_k          (mixed_nn_cost; w stays the total NN LM weight)

Every function takes floats or numpy arrays alike (element-wise), so the engine, the 1-best
selection and the vectorised tuning sweep do the same arithmetic in the same order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Hashable, Iterable, Sequence, Tuple, Union

from rescore.errors import OptionError, RescoreError, check

PathLike = Union[str, Path]


def fixed_cost(ac, withlm, nolm, nwords, weight: float, inv_acwt: float, wip: float):
    """ac / inv_acwt + nolm + (1 - weight) * (withlm - nolm) + wip * nwords."""
    return ac / inv_acwt + nolm + (1.0 - weight) * (withlm - nolm) + wip * nwords


def mixed_nn_cost(l_nns: Sequence, mix: Sequence[float]):
    """sum_k mix_k * l_nn_k: the NN LM cost of K models' costs ``l_nns`` (floats or arrays of
    one shape) under the shares ``mix``. One model (mix (1.0,)) gives its own cost exactly."""
    if len(l_nns) != len(mix):
        raise ValueError(f"{len(l_nns)} NN LM costs for {len(mix)} shares")
    out = mix[0] * l_nns[0]
    for m, cost in zip(mix[1:], l_nns[1:]):
        out = out + m * cost
    return out


def total_cost(fixed, l_nn, weight: float):
    """The final interpolated cost: fixed_cost + weight * l_nn."""
    return fixed + weight * l_nn


def word_posterior_mass(totals: Sequence[float], words: Iterable[Iterable[Hashable]]) -> Dict[Hashable, float]:
    """word -> the summed N-best posterior of the hypotheses that hold it (anywhere), for one
    utterance's hypotheses with final costs ``totals`` and words ``words`` (any hashable: words
    or identities); a hypothesis' posterior is proportional to exp(-total cost), the acoustic
    cost already scaled in the total, as a lattice's posteriors take it."""
    low = min(totals)
    post = [math.exp(low - t) for t in totals]
    z = sum(post)
    mass: Dict[Hashable, float] = {}
    for ws, p in zip(words, post):
        for w in set(ws):
            mass[w] = mass.get(w, 0.0) + p / z
    return mass


def graph_cost(withlm, nolm, l_nn, weight: float):
    """The new graph cost for Kaldi: nolm + (1 - weight) * (withlm - nolm) + weight * l_nn."""
    return nolm + (1.0 - weight) * (withlm - nolm) + weight * l_nn


# Kaldi's steps/pytorchnn/lmrescore_nbest_pytorchnn.sh interpolates with weight 0.8 by default.
KALDI_DEFAULT_WEIGHT = 0.8


def check_weight(v: float, name: str = "--weight") -> float:
    check(math.isfinite(v) and 0.0 <= v <= 1.0, "an NN LM weight in [0, 1]", name, v)
    return v


def check_inv_acwt(v: float, name: str = "--inv-acwt") -> float:
    check(math.isfinite(v) and v > 0.0, "a finite inverse acoustic scale > 0", name, v)
    return v


def check_wip(v: float, name: str = "--wip") -> float:
    check(math.isfinite(v), "a finite word insertion penalty", name, v)
    return v


MIX_TOLERANCE = 1e-6  # the shares of a mix sum to 1 within this


def check_mix(values, name: str = "--mix") -> Tuple[float, ...]:
    """A mix of K >= 1 NN LM shares: finite numbers >= 0 summing to 1 (within MIX_TOLERANCE).
    Returns them as a tuple of floats."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) == 0:
        raise OptionError("one share per model (a list of numbers, e.g. 0.6,0.4)", option=name, got=repr(values))
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise OptionError("shares that are finite numbers >= 0", option=name,
                              got=",".join(str(x) for x in values))
        out.append(float(v))
    check(abs(sum(out) - 1.0) <= MIX_TOLERANCE, f"shares summing to 1 (they sum to {sum(out):.6g})", name,
          ",".join(f"{x:g}" for x in out))
    return tuple(out)


def equal_mix(k: int) -> Tuple[float, ...]:
    """Equal shares of k models (rescore-nbest's default mix)."""
    return tuple([1.0 / k] * k)


@dataclass(frozen=True)
class Params:
    """The interpolation setting; what rescore-tune writes and rescore-nbest --params reads.

    Checked when built: weight in [0, 1], inv_acwt finite and > 0, wip finite, mix a check_mix.
    """

    weight: float = 0.0  # w, total NN LM weight (0: first-pass n-gram only, 1: NN LMs only)
    inv_acwt: float = 10.0  # LMWT = 1 / acoustic scale (Kaldi's --lmwt / PocketSphinx's lw)
    wip: float = 0.0  # word insertion penalty, cost per hypothesis word
    mix: Tuple[float, ...] = (1.0,)  # share of each NN LM in l_nn (K models; one: (1.0,))

    def __post_init__(self):
        # errors name the command-line option of each field (--weight, --inv-acwt, --wip)
        for name, check_value in (("weight", check_weight), ("inv_acwt", check_inv_acwt), ("wip", check_wip)):
            v = getattr(self, name)
            option = "--" + name.replace("_", "-")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise OptionError("a number", option=option, got=repr(v))
            object.__setattr__(self, name, float(check_value(float(v), option)))
        object.__setattr__(self, "mix", check_mix(self.mix))

    @property
    def num_models(self) -> int:
        return len(self.mix)

    def replace(self, **changes) -> "Params":
        return Params(**{**asdict(self), **changes})

    def as_dict(self) -> dict:
        """weight, inv_acwt, wip, and mix (a list) only with several models: one model's
        setting reads and writes as it did before mixes existed."""
        d = asdict(self)
        if len(self.mix) == 1:
            del d["mix"]
        else:
            d["mix"] = list(self.mix)
        return d

    def to_json(self, path: PathLike, **extra) -> None:
        from rescore.io.files import write_json  # (lazy: keeps numpy (rescore.io) out of rescore-tune's start-up)

        write_json(path, {**self.as_dict(), **extra})

    @classmethod
    def from_json(cls, path: PathLike) -> "Params":
        """Read a --params file (rescore-tune --params-out): an object with numeric weight,
        inv_acwt and wip, and optionally mix (a list of shares; absent: one model); other keys
        are notes, e.g. tuned_on. Every value checked."""
        from rescore.io.files import read_json  # (lazy: keeps numpy (rescore.io) out of rescore-tune's start-up)

        d = read_json(path)
        keys = ("weight", "inv_acwt", "wip")
        if not isinstance(d, dict) or any(k not in d for k in keys) or \
                any(isinstance(d[k], bool) or not isinstance(d[k], (int, float)) for k in keys):
            raise RescoreError("an object with numeric 'weight', 'inv_acwt', 'wip'", path=path)
        mix = d.get("mix", [1.0])
        if not isinstance(mix, list):
            raise RescoreError("'mix': a list of shares (e.g. [0.6, 0.4])", path=path, got=repr(mix))
        try:
            return cls(**{k: float(d[k]) for k in keys}, mix=tuple(mix))
        except OptionError as e:
            key = (e.option or "").lstrip("-").replace("-", "_")
            raise RescoreError(f"'{key}': {e.expected}", path=path, got=e.got) from None
