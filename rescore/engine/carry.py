"""The carry rule of every engine (rescore.engine.score's and the Hugging Face scorer's,
rescore.engine.hf): which hypothesis of an utterance the next utterance's state starts from."""

from __future__ import annotations

from typing import Callable, Sequence

from rescore.nbest.interp import mixed_nn_cost, total_cost


def carry_choice(state_carry: str, weight: float, mix: Sequence[float]) -> Callable:
    """The ``choose`` of rescore.engine.score's lockstep: the carried hypothesis of each
    conversation, rank 1 (first-pass) or the best by ``fixed + weight * sum_m mix[m] *
    sum(costs_m)`` (one model: mix (1.0,), its own cost exactly)."""
    def choose(wants):  # wants[m][j] = (costs of conversation j's utterance by model m, fixed)
        if state_carry == "first-pass":
            return [0] * len(wants[0])
        out = []
        for j, (_, fixed) in enumerate(wants[0]):
            totals = [total_cost(f, mixed_nn_cost([sum(w[j][0][h]) for w in wants], mix), weight)
                      for h, f in enumerate(fixed)]
            out.append(min(range(len(totals)), key=totals.__getitem__))
        return out

    return choose
