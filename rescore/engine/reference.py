"""The reference engines of rescore.engine.score, beside the fast one that the tests compare with them.

* ``naive``   one hypothesis at a time from its utterance's start state, explicit state passing.
* ``padded``  one padded batch per utterance, no prefix sharing, one conversation at a time (the
              way of Kaldi's pytorchnn scorer); the carried state is recomputed from the best
              hypothesis alone, so padding never enters it.

Each run is a generator driven by ``rescore.engine.score._lockstep``: at each carry point it yields
[(costs, fixed)] of its conversation and is sent the index of the carried hypothesis.
"""

from __future__ import annotations

from typing import Callable, List

import torch
from torch import Tensor

from rescore.models.base import positions
from rescore.engine.forward import RunContext, progress_bar, target_log_prob
from rescore.engine.types import Costs


def _by_utterance(ctx: RunContext, encoded, fixed, desc: str, score: Callable):
    """The reference scorers' loop: conversation by conversation, utterance by utterance, each
    from the state carried from the previous utterance's best hypothesis (a generator: the
    carried best comes back from _lockstep). ``score(hyps, start)`` gives the utterance's costs
    and a function of the best hypothesis' index that gives the state after it."""
    result = []
    bar = progress_bar(ctx, sum(len(u) for c in encoded for u in c), desc)
    for conv, conv_fixed in zip(encoded, fixed):
        start = ctx.model.initial_state(1, ctx.device)
        conv_costs = []
        for hyps, fx in zip(conv, conv_fixed):
            if not hyps:
                conv_costs.append([])
                continue
            costs, state_after = score(hyps, start)
            ctx.count(hyps)
            bar.update(len(hyps))
            conv_costs.append(costs)
            if ctx.settings.state_carry != "none":
                best = (yield [(costs, fx)])[0]  # the carried best (see _lockstep)
                start = ctx.carried(state_after(best), [(hyps, costs, fx, best)])
        result.append(conv_costs)
    bar.close()
    return result


# naive: the reference, one hypothesis at a time


def run_naive(ctx: RunContext, encoded, fixed) -> List[List[List[Costs]]]:
    def score(hyps, start):
        costs, ends = [], []
        for h in hyps:
            inp, inp_ident, tgt, tgt_ident = ctx.io(h)
            T = len(inp)
            got: List[Tensor] = []

            def reduce(out, s, e, tgt=tgt, tgt_ident=tgt_ident, T=T):
                z = ctx.tensor([0] * T)
                got.append(target_log_prob(
                    out, z, ctx.tensor(range(T)), ctx.tensor(tgt), ctx.tensor(tgt_ident),
                    ctx.tensor(tgt_ident) >= ctx.n_vocab, ctx.oov_penalty))

            ends.append(ctx.forward(ctx.tensor([inp]), ctx.tensor([inp_ident]), start,
                                    ctx.tensor([0]), reduce))
            costs.append((-got[0]).double().tolist())
        return costs, ends.__getitem__

    return (yield from _by_utterance(ctx, encoded, fixed, "naive", score))


# padded: one padded batch per utterance (Kaldi pytorchnn's way, with a correct carry)


def run_padded(ctx: RunContext, encoded, fixed) -> List[List[List[Costs]]]:
    def score(hyps, start):
        T = max(len(h.ids) for h in hyps) + 1
        pad = lambda seq: seq + [ctx.eos] * (T - len(seq))  # noqa: E731
        ios = [ctx.io(h) for h in hyps]
        ids = ctx.tensor([pad(x[0]) for x in ios])
        ident = ctx.tensor([pad(x[1]) for x in ios])
        tid = ctx.tensor([pad(x[2]) for x in ios])
        tident = ctx.tensor([pad(x[3]) for x in ios])
        lp = torch.empty(len(hyps), T, device=ctx.device)

        def reduce(out, s, e):
            B = e - s
            b, t = positions(tid[s:e])
            ti, tn = tid[s:e].reshape(-1), tident[s:e].reshape(-1)
            lp[s:e] = target_log_prob(out, b, t, ti, tn, tn >= ctx.n_vocab,
                                      ctx.oov_penalty).view(B, T)

        ctx.forward(ids, ident, start, ctx.tensor([0] * len(hyps)), reduce)
        lp_rows = (-lp).double().tolist()
        costs = [row[: len(h.ids) + 1] for row, h in zip(lp_rows, hyps)]
        # The batch's end state of a shorter hypothesis has consumed padding: the carried state
        # is recomputed from the best hypothesis alone.
        return costs, lambda best: ctx.end_states(start, [0], [hyps[best]])

    return (yield from _by_utterance(ctx, encoded, fixed, "padded", score))
