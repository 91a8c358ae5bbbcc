"""The interpolation of design §3: the one place the cost formula is written.

For hypothesis h with n-gram LM cost ``l_ng = withlm - nolm``, graph rest ``g_0 = nolm``, NN LM
cost ``l_nn``, acoustic cost ``ac`` and ``|h|`` words::

    cost(h) = ac / inv_acwt + g_0 + (1 - w) * l_ng + wip * |h|  +  w * l_nn
            = fixed_cost(h)                                      +  w * l_nn

``fixed_cost`` holds everything but the NN term, so the engine (which computes ``l_nn`` while
carrying LM state along the best hypotheses) can pick each utterance's best by the final cost.
The new graph cost written back for Kaldi (``lmwt.interp``) is ``g_0 + (1 - w) * l_ng + w * l_nn``:
Kaldi's ``local/score.sh`` adds the acoustic scale and the insertion penalty itself.

Every function takes floats or numpy arrays alike (element-wise), so the engine, the 1-best
selection and the vectorised tuning sweep do the same arithmetic in the same order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Union

from rescore.errors import OptionError, RescoreError

PathLike = Union[str, Path]


def fixed_cost(ac, withlm, nolm, nwords, weight: float, inv_acwt: float, wip: float):
    """ac / inv_acwt + nolm + (1 - weight) * (withlm - nolm) + wip * nwords (design §3)."""
    return ac / inv_acwt + nolm + (1.0 - weight) * (withlm - nolm) + wip * nwords


def total_cost(fixed, l_nn, weight: float):
    """The final interpolated cost: fixed_cost + weight * l_nn."""
    return fixed + weight * l_nn


def graph_cost(withlm, nolm, l_nn, weight: float):
    """The new graph cost for Kaldi: nolm + (1 - weight) * (withlm - nolm) + weight * l_nn."""
    return nolm + (1.0 - weight) * (withlm - nolm) + weight * l_nn


# Kaldi's steps/pytorchnn/lmrescore_nbest_pytorchnn.sh interpolates with weight 0.8 by default.
KALDI_DEFAULT_WEIGHT = 0.8


def check_weight(v: float, name: str = "--weight") -> float:
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise OptionError("an NN LM weight in [0, 1]", option=name, got=str(v))
    return v


def check_inv_acwt(v: float, name: str = "--inv-acwt") -> float:
    if not (math.isfinite(v) and v > 0.0):
        raise OptionError("a finite inverse acoustic scale > 0", option=name, got=str(v))
    return v


def check_wip(v: float, name: str = "--wip") -> float:
    if not math.isfinite(v):
        raise OptionError("a finite word insertion penalty", option=name, got=str(v))
    return v


@dataclass(frozen=True)
class Params:
    """The interpolation setting; what rescore-tune writes and rescore-nbest --params reads.

    Checked when built: weight in [0, 1], inv_acwt finite and > 0, wip finite.
    """

    weight: float = 0.0  # w, NN LM weight (0: first-pass n-gram only, 1: NN LM only)
    inv_acwt: float = 10.0  # LMWT = 1 / acoustic scale (Kaldi's --lmwt / PocketSphinx's lw)
    wip: float = 0.0  # word insertion penalty, cost per hypothesis word

    def __post_init__(self):
        # errors name the command-line option of each field (--weight, --inv-acwt, --wip)
        for name, check in (("weight", check_weight), ("inv_acwt", check_inv_acwt), ("wip", check_wip)):
            v = getattr(self, name)
            option = "--" + name.replace("_", "-")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise OptionError("a number", option=option, got=repr(v))
            object.__setattr__(self, name, float(check(float(v), option)))

    def replace(self, **changes) -> "Params":
        return Params(**{**asdict(self), **changes})

    def as_dict(self) -> dict:
        return asdict(self)

    def to_json(self, path: PathLike, **extra) -> None:
        from rescore.io.files import write_json

        write_json(path, {**asdict(self), **extra})

    @classmethod
    def from_json(cls, path: PathLike) -> "Params":
        """Read a --params file (rescore-tune --params-out): an object with numeric weight,
        inv_acwt and wip (other keys are notes, e.g. tuned_on); every value checked."""
        from rescore.io.files import read_json

        d = read_json(path)
        keys = ("weight", "inv_acwt", "wip")
        if not isinstance(d, dict) or any(k not in d for k in keys) or \
                any(isinstance(d[k], bool) or not isinstance(d[k], (int, float)) for k in keys):
            raise RescoreError("an object with numeric 'weight', 'inv_acwt', 'wip'", path=path)
        try:
            return cls(**{k: float(d[k]) for k in keys})
        except OptionError as e:
            key = (e.option or "").lstrip("-").replace("-", "_")
            raise RescoreError(f"'{key}': {e.expected}", path=path, got=e.got) from None
