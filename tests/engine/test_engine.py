"""The rescoring engine: fast == padded == naive for every model, carry mode and edge case."""

from __future__ import annotations

import math
import random
import sys
import zlib
from collections import Counter

import pytest
import torch

from rescore.engine import score as E
from rescore.engine.score import EngineStats, UttInput, score_nbest
from rescore.jobs.nbest import parse_split, split_slice
from rescore.errors import RescoreError
from rescore.io.symbols import read_vocabulary
from rescore.models.base import LanguageModel

from tests.engine.engine_toys import ToyAttention, ToyLSTM, ToyPointer, ToyVocab

WORDS = list("abcdefghijklmnop")
OOV = ["zyx", "qqq"]


def make_conversations(seed=0, n_conv=3, n_utt=(1, 4), n_hyp=(1, 9)):
    """Random N-best conversations: hypotheses are edits of a base sentence (shared prefixes),
    OOV words appear, some utterances have an empty hypothesis. In even utterances the
    shortest hypothesis is rank 1 and has by far the lowest fixed cost, so every carry mode
    carries the shortest one (where padding would show)."""
    rng = random.Random(seed)
    convs = []
    for _ in range(n_conv):
        utts = []
        for u in range(rng.randint(*n_utt)):
            base = [rng.choice(WORDS + OOV) for _ in range(rng.randint(3, 7))]
            hyps = {tuple(base)}
            for _ in range(rng.randint(*n_hyp) * 3):
                if len(hyps) >= n_hyp[1]:
                    break
                h = list(base)
                i = rng.randrange(len(h))
                op = rng.random()
                if op < 0.4:
                    h[i] = rng.choice(WORDS + OOV)
                elif op < 0.7:
                    del h[i:]
                else:
                    h.insert(i, rng.choice(WORDS))
                hyps.add(tuple(h))
            hyps = sorted(list(h) for h in hyps)  # (a set's order follows the process's string hashes)
            rng.shuffle(hyps)
            fixed = [rng.uniform(0, 10) for _ in hyps]
            if u % 2 == 0:
                s = min(range(len(hyps)), key=lambda i: len(hyps[i]))
                hyps.insert(0, hyps.pop(s))
                fixed[0] = -1000.0
            utts.append(UttInput(hyps, fixed))
        convs.append(utts)
    return convs


def models():
    v = ToyVocab(WORDS)
    return {
        "lstm": ToyLSTM(v),
        "pointer": ToyPointer(v, memory=False),
        "pointer+mem": ToyPointer(v, memory=True),
        "attention": ToyAttention(v),
    }


def assert_close(a, b, tol=1e-4):
    assert len(a) == len(b)
    for ca, cb in zip(a, b):
        assert len(ca) == len(cb)
        for ua, ub in zip(ca, cb):
            assert len(ua) == len(ub)
            for ha, hb in zip(ua, ub):
                assert len(ha) == len(hb)
                assert abs(sum(ha) - sum(hb)) <= tol, (ha, hb)
                assert max((abs(x - y) for x, y in zip(ha, hb)), default=0.0) <= tol


def test_toys_chunking_equals_steps():
    """The toys keep the base contract: T tokens at once == T one-token calls."""
    for name, m in models().items():
        ids = torch.tensor([[0, 3, 4, 1, 5, 3]])
        ident = torch.tensor([[0, 3, 4, 30, 5, 3]])
        st = m.initial_state(1)
        whole, _ = m.score(ids[:, :-1], ident[:, :-1], ids[:, 1:], ident[:, 1:], st)
        parts = []
        for t in range(5):
            lp, st = m.score(ids[:, t:t + 1], ident[:, t:t + 1], ids[:, t + 1:t + 2],
                             ident[:, t + 1:t + 2], st)
            parts.append(lp)
        assert torch.allclose(whole, torch.cat(parts, 1), atol=1e-5), name


@pytest.mark.parametrize("name", ["lstm", "pointer+mem", "attention"])
@pytest.mark.parametrize("carry", ["none", "first-pass", "rescored"])
def test_engines_agree(name, carry):
    model = models()[name]
    convs = make_conversations(seed=zlib.crc32(f"{name}{carry}".encode()) % 1000, n_conv=2)
    runs = {eng: score_nbest(model, convs, weight=0.7, state_carry=carry, device="cpu",
                             engine=eng, progress=False)
            for eng in ("naive", "padded", "fast")}
    assert_close(runs["fast"], runs["naive"])
    assert_close(runs["padded"], runs["naive"])
    for schedule in ("levels", "segments"):
        assert_close(score_nbest(model, convs, weight=0.7, state_carry=carry, device="cpu",
                                 schedule=schedule, progress=False), runs["naive"])
    # every hypothesis has len(words) + 1 costs, all positive (costs = -log P)
    for conv, out in zip(convs, runs["fast"]):
        for utt, costs in zip(conv, out):
            assert [len(c) for c in costs] == [len(h) + 1 for h in utt.hyps]
            assert all(x >= 0 for c in costs for x in c)


def test_carry_modes_differ_and_reset_per_conversation():
    model = models()["pointer+mem"]
    convs = make_conversations(seed=5, n_conv=2, n_utt=(3, 3))
    out = {c: score_nbest(model, convs, weight=1.0, state_carry=c, device="cpu",
                          progress=False) for c in E.STATE_CARRY}
    # utterance 0 of every conversation starts from the initial state in every mode (reset)
    for conv in range(2):
        for c in E.STATE_CARRY:
            assert_close([[out[c][conv][0]]], [[out["none"][conv][0]]], tol=1e-6)
    # later utterances see the carried state
    assert abs(sum(out["none"][0][1][0]) - sum(out["rescored"][0][1][0])) > 1e-3
    # conversation 1 scored alone == conversation 1 scored after conversation 0
    alone = score_nbest(model, convs[1:], weight=1.0, device="cpu", progress=False)
    assert_close(alone, out["rescored"][1:], tol=1e-5)


def test_shortest_best_padding_would_show():
    """The best hypothesis is the shortest: the padded batch's end state for it has consumed
    padding and differs from its true end state, yet the padded engine agrees with naive."""
    model = models()["lstm"]
    v = model.vocab
    long_h, short_h = ["a", "b", "c", "d", "e"], ["a", "b"]
    convs = [[UttInput([long_h, short_h], [5.0, -100.0]), UttInput([["f", "g"], ["h"]], [0, 0])]]
    # the contaminated state really is different (so this test can fail)
    ids = torch.tensor([[v.eos_id] + v.encode(short_h)[0] + [v.eos_id] * 3])
    with torch.no_grad():
        _, padded_state = model(ids, ids, model.initial_state(1))
        _, true_state = model(ids[:, :3], ids[:, :3], model.initial_state(1))
    assert not torch.allclose(padded_state.tensors["h"], true_state.tensors["h"], atol=1e-3)
    runs = [score_nbest(model, convs, weight=1.0, device="cpu", engine=e, progress=False)
            for e in ("naive", "padded", "fast")]
    assert_close(runs[1], runs[0])
    assert_close(runs[2], runs[0])


def test_oov_copied_from_history():
    """An OOV word of the carried best hypothesis gets copy mass in the next utterance; without
    carry (or with a softmax head) it scores as <unk>; --oov-penalty moves the <unk> part."""
    pointer = models()["pointer+mem"]
    convs = [[UttInput([["a", "zyx", "b"]], [0.0]),
              UttInput([["zyx", "c"], ["c", "zyx"]], [0.0, 1.0])]]
    out = {c: {e: score_nbest(pointer, convs, weight=1.0, state_carry=c, device="cpu",
                              engine=e, progress=False) for e in E.ENGINES}
           for c in ("none", "rescored")}
    for c in out:
        assert_close(out[c]["fast"], out[c]["naive"])
        assert_close(out[c]["padded"], out[c]["naive"])
    # "zyx" first in utterance 1 vs "qqq" (also OOV, never seen): the same <unk> id and state,
    # so any difference is the copy mass of the carried "zyx" slot
    other = [[convs[0][0], UttInput([["qqq", "c"], ["c", "qqq"]], [0.0, 1.0])]]
    q = {c: score_nbest(pointer, other, weight=1.0, state_carry=c, device="cpu",
                        progress=False)[0][1][0][0] for c in ("none", "rescored")}
    carried, fresh = out["rescored"]["naive"][0][1][0][0], out["none"]["naive"][0][1][0][0]
    assert carried < q["rescored"] - 1e-3
    assert math.isclose(fresh, q["none"], abs_tol=1e-6)
    # the same number with the penalty on the <unk> part only: copy mass is not penalised
    pen = score_nbest(pointer, convs, weight=1.0, device="cpu", oov_penalty=5.0,
                      engine="fast", progress=False)[0][1][0][0]
    assert fresh < pen
    # softmax head: an OOV word costs exactly -log P(<unk>) + penalty
    lstm = models()["lstm"]
    c0 = score_nbest(lstm, convs, weight=1.0, device="cpu", progress=False)
    c5 = score_nbest(lstm, convs, weight=1.0, device="cpu", oov_penalty=5.0, progress=False)
    assert math.isclose(c5[0][0][0][1] - c0[0][0][0][1], 5.0, abs_tol=1e-4)
    assert math.isclose(c5[0][0][0][0], c0[0][0][0][0], abs_tol=1e-6)


def test_history_filter_leaves_unsure_words_out():
    """--history-min-posterior: an OOV word of the carried best hypothesis that the other
    hypotheses do not hold (posterior below the floor) is not copied in the next utterance; one
    that every hypothesis holds (posterior 1) still is; every engine agrees."""
    pointer = models()["pointer+mem"]

    def first_cost(convs, floor, engine="naive"):  # weight 0: the fixed costs pick and weigh
        return score_nbest(pointer, convs, weight=0.0, device="cpu", engine=engine,
                           history_min_posterior=floor, progress=False)[0][1][0][0]

    nxt = UttInput([["zyx", "c"], ["c", "zyx"]], [0.0, 1.0])
    # utterance 0: "zyx" only in the best hypothesis (posterior 1 / (1 + e^-1) = 0.73)
    unsure = [[UttInput([["a", "zyx", "b"], ["a", "b"]], [0.0, 1.0]), nxt]]
    sure = [[UttInput([["a", "zyx", "b"], ["b", "zyx", "a"]], [0.0, 1.0]), nxt]]
    kept, dropped = first_cost(unsure, 0.0), first_cost(unsure, 0.8)
    assert dropped > kept + 1e-3  # the copy mass of "zyx" is gone
    assert math.isclose(first_cost(unsure, 0.7), kept, abs_tol=1e-6)  # 0.73 is above 0.7
    assert math.isclose(first_cost(sure, 0.99), first_cost(sure, 0.0), abs_tol=1e-6)
    # another OOV word in its place (the same <unk> input), forgotten alike: the same cost
    other = [[UttInput([["a", "qqq", "b"], ["a", "b"]], [0.0, 1.0]), nxt]]
    assert math.isclose(dropped, first_cost(other, 0.8), abs_tol=1e-6)
    assert first_cost(other, 0.0) > kept + 1e-3  # (kept: "zyx" was copied)
    for engine in ("padded", "fast"):
        assert math.isclose(first_cost(unsure, 0.8, engine), dropped, abs_tol=1e-5)
    convs = make_conversations(seed=8, n_conv=3, n_utt=(3, 4))
    runs = {e: score_nbest(pointer, convs, weight=0.7, device="cpu", engine=e,
                           history_min_posterior=0.5, progress=False) for e in E.ENGINES}
    assert_close(runs["fast"], runs["naive"])
    assert_close(runs["padded"], runs["naive"])


def test_word_posteriors():
    from rescore.engine.forward import word_posteriors
    from rescore.engine.types import Hyp

    hyps = [Hyp([1, 2], [1, 2]), Hyp([1, 3], [1, 3]), Hyp([1, 2, 2], [1, 2, 2])]
    costs = [[1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]]
    fixed = [0.0, 0.0, 0.0]
    # totals with weight 2: 6, 3, 8
    p = [math.exp(-6), math.exp(-3), math.exp(-8)]
    z = sum(p)
    assert word_posteriors(hyps, costs, fixed, 2.0, 0) == pytest.approx([1.0, (p[0] + p[2]) / z])
    assert word_posteriors(hyps, costs, fixed, 2.0, 1) == pytest.approx([1.0, p[1] / z])


def test_history_filter_needs_rescored_carry_and_a_history():
    convs = make_conversations(seed=1, n_conv=1)
    with pytest.raises(RescoreError, match="--state-carry rescored"):
        score_nbest(models()["pointer"], convs, weight=1, state_carry="first-pass",
                    history_min_posterior=0.5)
    with pytest.raises(RescoreError, match="in \\[0, 1\\]"):
        score_nbest(models()["pointer"], convs, weight=1, history_min_posterior=1.5)
    with pytest.raises(RescoreError, match="word history"):
        score_nbest(models()["lstm"], convs, weight=1, history_min_posterior=0.5, progress=False)


@pytest.mark.parametrize("max_tokens", [1, 5])
def test_small_token_budget_splits_lists(max_tokens):
    """A budget smaller than an N-best list cuts it into parts: same costs."""
    model = models()["pointer"]
    convs = make_conversations(seed=11, n_conv=2, n_hyp=(6, 9))
    ref = score_nbest(model, convs, weight=0.5, device="cpu", engine="naive", progress=False)
    for eng in ("fast", "padded"):
        stats = EngineStats()
        got = score_nbest(model, convs, weight=0.5, device="cpu", engine=eng,
                          max_tokens=max_tokens, stats=stats, progress=False)
        assert_close(got, ref)
        assert stats.rows <= stats.calls * max(max_tokens, 8)


def test_fast_computes_fewer_rows():
    model = models()["lstm"]
    convs = make_conversations(seed=3, n_hyp=(8, 9))
    st = {e: EngineStats() for e in ("fast", "padded")}
    for e in st:
        score_nbest(model, convs, weight=0.5, device="cpu", engine=e, stats=st[e], progress=False)
    assert st["fast"].tokens == st["padded"].tokens
    assert st["fast"].rows < st["fast"].tokens < st["padded"].rows


@pytest.mark.parametrize("schedule", ["levels", "segments"])
def test_fast_computes_each_distinct_prefix_once(schedule):
    """Without carry the fast engine's rows are exactly the tries' nodes (the fewest an exact
    engine can compute) and padded's one row per position of each utterance's padded batch."""
    convs = make_conversations(seed=5, n_hyp=(6, 9))
    trie = padded = 0
    for conv in convs:
        for u in conv:
            if u.hyps:
                trie += len({tuple(h[:i]) for h in u.hyps for i in range(len(h) + 1)})
                padded += len(u.hyps) * (max(len(h) for h in u.hyps) + 1)
    st = {e: EngineStats() for e in ("fast", "padded")}
    for e in st:
        score_nbest(models()["attention"], convs, weight=0.5, device="cpu", engine=e,
                    state_carry="none", schedule=schedule, stats=st[e], progress=False)
    assert (st["fast"].rows, st["padded"].rows) == (trie, padded)
    assert trie < padded


class OomOnBigBatches(LanguageModel):
    """Wraps a model and raises CUDA's out-of-memory error on more than `limit` token rows."""

    def __init__(self, model, limit):
        super().__init__()
        self.inner, self.limit, self.raised = model, limit, 0
        self.vocab = model.vocab

    def initial_state(self, b, device=None):
        return self.inner.initial_state(b, device)

    def forward(self, ids, ident, state):
        if ids.numel() > self.limit:
            self.raised += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(ids, ident, state)


@pytest.mark.parametrize("engine", ["fast", "padded"])
def test_oom_backoff(engine):
    model = models()["pointer+mem"]
    convs = make_conversations(seed=4, n_hyp=(6, 9))
    ref = score_nbest(model, convs, weight=0.5, device="cpu", engine="naive", progress=False)
    wrapped = OomOnBigBatches(model, limit=10)  # one row (<= 9 tokens) always fits
    stats = EngineStats()
    got = score_nbest(wrapped, convs, weight=0.5, device="cpu", engine=engine,
                      max_tokens=200, stats=stats, progress=False)
    assert wrapped.raised > 0 and stats.oom_backoffs > 0
    assert_close(got, ref)


def test_other_errors_are_not_swallowed():
    class Broken(OomOnBigBatches):
        def forward(self, ids, ident, state):
            raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        score_nbest(Broken(models()["lstm"], 0), make_conversations(), weight=0.5,
                    device="cpu", progress=False)


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_device_selection():
    assert E.resolve_device("cpu") == torch.device("cpu")
    auto = E.resolve_device("auto")
    assert auto.type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RescoreError, match="CUDA"):
            E.resolve_device("cuda")
    with pytest.raises(RescoreError):
        E.resolve_device("tpu")
    with E.autocast_for(torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
        assert not torch.is_autocast_enabled("cuda")
    ctx = E.autocast_for(torch.device("cuda"))
    assert isinstance(ctx, torch.autocast) and ctx.device == "cuda"
    for precision, on in (("fp32", False), ("bf16", True)):
        with E.autocast_for(torch.device("cpu"), precision):
            assert torch.is_autocast_enabled("cpu") == on
    assert not isinstance(E.autocast_for(torch.device("cuda"), "fp32"), torch.autocast)


@pytest.mark.parametrize("name", ["lstm", "pointer+mem", "attention"])
def test_bf16_autocast_runs_and_stays_close(name):
    """The autocast path (CUDA's by default) run on the CPU in bf16: every engine finishes,
    carries lower-precision states across utterances, and stays near the fp32 costs."""
    model = models()[name]
    convs = make_conversations(seed=9, n_conv=2, n_utt=(2, 4))
    ref = score_nbest(model, convs, weight=0.5, device="cpu", engine="naive", progress=False)
    for e in E.ENGINES:
        got = score_nbest(model, convs, weight=0.5, device="cpu", engine=e, precision="bf16",
                          progress=False)
        rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got)
               for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
        assert 0 < max(rel) < 0.02, (e, max(rel))  # bf16 did run, and stayed within 2 %
    with pytest.raises(RescoreError, match="precision"):
        score_nbest(model, convs, weight=0.5, device="cpu", precision="fp8", progress=False)


def test_split_merges_into_one_process_output():
    """Jobs take whole blocks of conv_batch conversations: their outputs, in job order, are
    exactly (not only nearly) what one process computes."""
    model = models()["lstm"]
    convs = make_conversations(seed=8, n_conv=7, n_utt=(1, 3))
    for eng in ("fast", "padded"):
        whole = score_nbest(model, convs, weight=0.5, device="cpu", engine=eng, conv_batch=2,
                            max_tokens=8, progress=False)
        for n_jobs in (3, 9):
            slices = [split_slice(len(convs), k, n_jobs, block=2) for k in range(1, n_jobs + 1)]
            assert [i for s in slices for i in range(len(convs))[s]] == list(range(len(convs)))
            assert all(s.start % 2 == 0 for s in slices if s.start < s.stop)
            merged = [c for s in slices for c in
                      score_nbest(model, convs[s], weight=0.5, device="cpu", engine=eng,
                                  conv_batch=2, max_tokens=8, progress=False)]
            assert merged == whole
    assert parse_split("2/8") == (2, 8)
    for bad in ("0/3", "4/3", "x", "1/2/3"):
        with pytest.raises(RescoreError):
            parse_split(bad)


def test_bad_options():
    with pytest.raises(RescoreError):
        score_nbest(models()["lstm"], [], weight=1, engine="turbo")
    with pytest.raises(RescoreError):
        score_nbest(models()["lstm"], [], weight=1, state_carry="always")
    with pytest.raises(RescoreError):
        score_nbest(models()["lstm"], [], weight=1, schedule="random")


# --------------------------------------------------------------------------------------------
# The project's real models (rescore.models): every body x every registered head


def real_variants():
    from rescore.models import HEADS

    heads = [(h, {}) for h in sorted(HEADS)] + [("pointer", {"memory_aug": True})]
    out = []
    for arch, extra in (("lstm", {}), ("transformer", {"positions": "learned"})):
        for head, hkw in heads:
            name = f"{arch}{'-' + extra['positions'] if extra else ''}-{head}" \
                   f"{'+mem' if hkw else ''}"
            out.append(pytest.param(dict(arch=arch, head=head, **extra, **hkw), id=name))
    # the neural cache (Grave et al. 2017), a test-time wrapper around any model
    out.append(pytest.param(dict(arch="transformer", head="softmax", positions="sinusoidal"),
                            id="transformer-sinusoidal-softmax"))
    out.append(pytest.param(dict(arch="lstm", head="softmax", ncache=True), id="lstm-ncache"))
    out.append(pytest.param(dict(arch="lstm", head="pointer", memory_aug=True, ncache=True),
                            id="lstm-pointer+mem-ncache"))
    return out


def real_model(kw):
    from rescore.models import ModelConfig, build_model
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    kw = dict(kw)
    ncache = kw.pop("ncache", False)
    cfg = ModelConfig(hidden=16, layers=2, history=6, context=8, n_heads=2, dropout=0.0, **kw)
    model = build_model(cfg, Vocabulary(["<eos>", "<unk>"] + WORDS))
    with torch.no_grad():  # spread the output distribution beyond the small init
        model.embedding.weight.mul_(20.0)
    if ncache:
        from rescore.models.cache import NeuralCacheLM

        model = NeuralCacheLM(model, window=7, theta=0.5, lam=0.3)
    return model.eval()


@pytest.mark.parametrize("kw", real_variants())
def test_real_models_engines_agree(kw):
    model = real_model(kw)
    convs = make_conversations(seed=21, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    runs = {e: score_nbest(model, convs, weight=0.7, device="cpu", engine=e, max_tokens=64,
                           conv_batch=2, progress=False) for e in E.ENGINES}
    assert_close(runs["fast"], runs["naive"])
    assert_close(runs["padded"], runs["naive"])
    for schedule in ("levels", "segments") + (("tree",) if model.supports_tree else ()):
        assert_close(score_nbest(model, convs, weight=0.7, device="cpu", max_tokens=64,
                                 schedule=schedule, progress=False), runs["naive"])
    if model.supports_tree:
        # max_tokens 15: the tries of 16 and 17 nodes go by segments, those of 14 and 15 as trees
        st = EngineStats()
        assert_close(score_nbest(model, convs, weight=0.7, device="cpu", max_tokens=15,
                                 schedule="tree", stats=st, progress=False), runs["naive"])
    else:
        with pytest.raises(RescoreError, match="tree forward"):
            score_nbest(model, convs, weight=0.7, device="cpu", schedule="tree", progress=False)


@pytest.mark.parametrize("carry", ["none", "first-pass", "rescored"])
def test_neural_cache_window_in_shared_rows_engines_agree(carry, monkeypatch):
    """A neural cache whose window is mostly in shared store rows (a state keeps 3 pairs of its
    own, the window is 7): every engine and schedule gives the same costs, and the same as
    with every pair kept per state."""
    kw = dict(arch="lstm", head="pointer", memory_aug=True, ncache=True)
    convs = make_conversations(seed=12, n_conv=3, n_utt=(2, 4), n_hyp=(2, 6))
    whole = score_nbest(real_model(kw), convs, weight=0.7, device="cpu", engine="naive",
                        state_carry=carry, progress=False)
    monkeypatch.setattr("rescore.models.cache.RECENT", 3)
    model = real_model(kw)
    assert model.recent == 3
    for engine in E.ENGINES:
        assert_close(score_nbest(model, convs, weight=0.7, device="cpu", engine=engine, max_tokens=64,
                                 conv_batch=2, state_carry=carry, progress=False), whole)
    for schedule in ("levels", "segments"):
        assert_close(score_nbest(model, convs, weight=0.7, device="cpu", schedule=schedule,
                                 state_carry=carry, progress=False), whole)


@pytest.mark.parametrize("kw", [dict(arch="lstm", head="softmax", ncache=True),
                                dict(arch="transformer", head="pointer", memory_aug=True, ncache=True,
                                     positions="learned")],
                         ids=["lstm-ncache", "transformer-pointer+mem-ncache"])
def test_real_models_history_filter(kw):
    """--history-min-posterior on the real heads' histories and the neural cache's: every
    engine agrees, and leaving words out changes the costs of later utterances only."""
    model = real_model(kw)  # weight 0: the fixed costs pick the carried hypothesis and weigh it
    convs = make_conversations(seed=33, n_conv=2, n_utt=(3, 3), n_hyp=(3, 6))
    runs = {e: score_nbest(model, convs, weight=0.0, device="cpu", engine=e, max_tokens=64,
                           history_min_posterior=1.0, progress=False) for e in E.ENGINES}
    assert_close(runs["fast"], runs["naive"])
    assert_close(runs["padded"], runs["naive"])
    plain = score_nbest(model, convs, weight=0.0, device="cpu", progress=False)
    assert_close([[c[0]] for c in runs["fast"]], [[c[0]] for c in plain], tol=1e-6)
    assert max(abs(sum(a) - sum(b)) for ca, cb in zip(runs["fast"], plain) for ua, ub in zip(ca[1:], cb[1:])
               for a, b in zip(ua, ub)) > 1e-3


@pytest.mark.parametrize("kw", real_variants())
def test_real_models_under_bf16_autocast(kw):
    """Every real body and head through the autocast path (CUDA's default) on the CPU: the
    states carried in bf16 mix with fp32 ones without error, and the costs stay near fp32."""
    model = real_model(kw)
    convs = make_conversations(seed=23, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    ref = score_nbest(model, convs, weight=0.7, device="cpu", engine="naive", progress=False)
    schedules = ("auto", "tree") if getattr(model, "supports_tree", False) else ("auto",)
    for schedule in schedules:
        got = score_nbest(model, convs, weight=0.7, device="cpu", max_tokens=64,
                          precision="bf16", schedule=schedule, progress=False)
        rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got)
               for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
        assert max(rel) < 0.05, (schedule, max(rel))


@pytest.mark.parametrize("kw", real_variants())
def test_int8_products_run_and_stay_close(kw):
    """--precision int8 on the CPU: every real body and head scores (the LSTM step and the
    softmax output layer in int8, the rest as before), normalised and not, and the costs stay
    near fp32; the quantised engine PyTorch had before is restored after every call."""
    from rescore.engine.kernels import quant

    if quant.engine() is None:
        pytest.skip("this PyTorch build has no quantised CPU engine")
    model = real_model(kw)
    convs = make_conversations(seed=24, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    before = torch.backends.quantized.engine
    for normalize in ("exact", "none") if model.config.output != "class" or model.config.self_norm \
            else ("exact",):
        ref = score_nbest(model, convs, weight=0.7, device="cpu", normalize=normalize, progress=False)
        got = score_nbest(model, convs, weight=0.7, device="cpu", normalize=normalize, precision="int8",
                          progress=False)
        rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got)
               for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
        assert max(rel) < 0.02, (normalize, max(rel))  # as bf16: within 2 %
        if kw.get("arch") == "lstm" and kw.get("head") == "softmax":
            assert max(rel) > 0  # the int8 products did run
    assert torch.backends.quantized.engine == before


def test_int8_fused_kernels_in_the_engine(monkeypatch):
    """With one torch thread an LSTM's int8 steps run as rescore.engine.kernels.native's fused layers
    and a softmax head's log Z as its fused output layer: the engine's costs stay within 5 % of
    fp32, and do not depend on how rows are batched (fixed scales for the states, one per row
    for the output layer's input): one row per call and all rows in one give the same costs,
    bit for bit (PyTorch's dynamic products, quantising each call from its range, do not)."""
    from rescore.engine.kernels import native, quant

    if quant.engine() is None or not native.available():
        pytest.skip("needs the compiled kernels and a quantised CPU engine")
    model = real_model({"arch": "lstm", "head": "softmax"})
    convs = make_conversations(seed=25, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    calls = {"lstm_int8": 0, "logsumexp_int8": 0, "levels_int8": 0}
    for name in calls:
        real = getattr(native, name)
        monkeypatch.setattr(native, name, lambda *a, _r=real, _n=name, **k: calls.__setitem__(_n, calls[_n] + 1)
                            or _r(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for normalize in ("none", "exact"):
            ref = score_nbest(model, convs, weight=0.7, device="cpu", normalize=normalize, progress=False)
            got = [score_nbest(model, convs, weight=0.7, device="cpu", normalize=normalize, precision="int8",
                               max_tokens=m, progress=False) for m in (1, 4096)]
            assert got[0] == got[1], normalize
            rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got[0])
                   for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
            # (5 %, not the dynamic products' 2 %: the states' fixed step of 1/63 is coarse for
            # this untrained model's small states; on a trained model both move costs alike)
            assert 0 < max(rel) < 0.05, (normalize, max(rel))
    finally:
        torch.set_num_threads(before)
    assert calls["levels_int8"] and not calls["lstm_int8"] and not calls["logsumexp_int8"]  # (all in one call)


@pytest.mark.parametrize("precision,whole", [("fp32", False), ("int8", False), ("int8", True)])
def test_level_steps_give_the_forward_calls_costs(monkeypatch, precision, whole):
    """An LSTM with a softmax head runs the trie levels through its level steps
    (rescore.engine.lstm_steps.LSTMLevels: the states kept in arrays, with int8 the quantised h
    from the kernels), with the fused int8 kernels all levels of a batch in one call
    (native.levels_int8): the costs and the carried states of per-level Forward calls, exact
    and unnormalised, first-pass and rescored carry, with an OOV penalty."""
    from rescore.engine.forward import Forward, LevelSteps
    from rescore.engine.kernels import native, quant
    from rescore.engine.lstm_steps import LSTMLevels

    if precision == "int8" and (quant.engine() is None or not native.available()):
        pytest.skip("needs the compiled kernels and a quantised CPU engine")
    model = real_model({"arch": "lstm", "head": "softmax"})
    convs = make_conversations(seed=26, n_conv=2, n_utt=(2, 4), n_hyp=(2, 6))
    used = {"step": 0, "whole": 0}
    real_step, real_levels = LSTMLevels.step, native.levels_int8
    monkeypatch.setattr(LSTMLevels, "step", lambda self, *a: used.__setitem__("step", used["step"] + 1)
                        or real_step(self, *a))
    monkeypatch.setattr(native, "levels_int8", lambda *a: used.__setitem__("whole", used["whole"] + (len(a[7][0]) > 0))
                        or real_levels(*a))  # (scoring calls: with edges)
    real_whole = LevelSteps.whole
    # (without the one-call scoring; the first-pass carry's chain still goes through it)
    no_whole = lambda self, *a, outputs=True, **k: (None if outputs else  # noqa: E731
                                                    real_whole(self, *a, outputs=outputs, **k))
    if not whole:
        monkeypatch.setattr(LevelSteps, "whole", no_whole)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for normalize in ("none", "exact"):
            for carry in ("first-pass", "rescored"):
                kw = dict(weight=0.7, device="cpu", normalize=normalize, precision=precision,
                          state_carry=carry, oov_penalty=2.5, progress=False)
                got = score_nbest(model, convs, **kw)
                with monkeypatch.context() as m:
                    m.setattr(Forward, "level_steps", lambda self, starts: None)
                    ref = score_nbest(model, convs, **kw)
                flat = lambda cs: [c for conv in cs for utt in conv for hyp in utt for c in hyp]  # noqa: E731
                # (in int8 the first-pass carry's chain of rank-1 hypotheses runs through the
                # int8 kernels too, where the per-level calls run it in float: a few hundredths)
                tol = 1e-5 if precision == "fp32" else 1e-4 if carry == "rescored" else 0.05
                assert flat(got) == pytest.approx(flat(ref), abs=tol)
                if whole:  # the same kernels on the same quantised states as the level steps: bit for bit
                    with monkeypatch.context() as m:
                        m.setattr(LevelSteps, "whole", no_whole)
                        assert score_nbest(model, convs, **kw) == got
    finally:
        torch.set_num_threads(before)
    assert used["whole"] if whole else (used["step"] and not used["whole"])


def test_int8_first_pass_chain_runs_through_the_fused_kernels(monkeypatch):
    """With one conversation the first-pass carry runs its chain of rank-1 hypotheses before the
    tries (Forward.end_states); under int8 with the fused kernels that chain is one-hypothesis
    tries through native.levels_int8 without outputs: the carried states then come from the
    same int8 steps as the scores, and the costs stay within int8's distance of fp32."""
    from rescore.engine.kernels import native, quant

    if quant.engine() is None or not native.available():
        pytest.skip("needs the compiled kernels and a quantised CPU engine")
    model = real_model({"arch": "lstm", "head": "softmax"})
    one = [[u for conv in make_conversations(seed=33, n_conv=3, n_utt=(3, 3), n_hyp=(3, 6)) for u in conv]]
    edges = []
    real = native.levels_int8
    monkeypatch.setattr(native, "levels_int8", lambda *a: edges.append(len(a[7][0])) or real(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        kw = dict(weight=0.7, device="cpu", state_carry="first-pass", progress=False)
        got = score_nbest(model, one, precision="int8", **kw)
        ref = score_nbest(model, one, **kw)
    finally:
        torch.set_num_threads(before)
    assert 0 in edges and any(edges)  # the chain (no edges) and the scoring
    rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got)
           for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
    assert 0 < max(rel) < 0.05


def test_int8_products_match_the_float_layer():
    """rescore.engine.kernels.quant.Int8Linear: within the int8 rounding of the float product, and
    refused on CUDA (no quantised engine there)."""
    from rescore.engine.forward import Forward
    from rescore.engine.types import EngineStats
    from rescore.engine.kernels import quant

    if quant.engine() is None:
        pytest.skip("this PyTorch build has no quantised CPU engine")
    torch.manual_seed(0)
    w, b, x = torch.randn(64, 32) * 0.1, torch.randn(64), torch.randn(50, 32)
    with quant.int8_products():
        y = quant.Int8Linear(w, b)(x)
    ref = x @ w.t() + b
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert (y - ref).abs().max() < 0.02 * ref.abs().max()
    with pytest.raises(RescoreError, match="int8 on a CPU"):
        Forward(models()["lstm"], torch.device("cuda"), 64, EngineStats(), "int8")


def test_int8_row_buckets_change_no_output():
    """Int8Linear rounds its row count up to a few sizes per octave (so that a scoring run's
    thousands of row counts do not fragment the heap: peak memory, docs/benchmarks.md); the
    zero rows it adds change no real row's output, bit for bit, as the input's quantisation
    range holds 0 already."""
    from rescore.engine.kernels import quant

    if quant.engine() is None:
        pytest.skip("this PyTorch build has no quantised CPU engine")
    sizes = [quant.bucket_rows(n) for n in range(1, 1025)]
    assert all(n <= b <= max(n, 1.25 * n) for n, b in zip(range(1, 1025), sizes))
    assert len(set(sizes)) <= 15 + 4 * 7  # 1..15 as they are, then 4 per octave
    torch.manual_seed(0)
    w, b = torch.randn(300, 64) * 0.1, torch.randn(300)
    x = torch.randn(419, 64) + 0.5
    with quant.int8_products():
        lin = quant.Int8Linear(w, b)
        for n in (1, 15, 17, 33, 100, 419):
            assert quant.bucket_rows(n) != n or n < 16
            plain = torch.ops.quantized.linear_dynamic(x[:n].contiguous(), lin.packed, True)
            got = lin(x[:n].view(1, n, 64))
            assert got.shape == (1, n, 300) and torch.equal(got[0], plain)


@pytest.mark.parametrize("carry", ["none", "first-pass"])
def test_real_model_other_carry_modes(carry):
    model = real_model(dict(arch="transformer", head="pointer", memory_aug=True,
                            positions="learned"))
    convs = make_conversations(seed=22, n_conv=2, n_utt=(2, 3), n_hyp=(2, 6))
    runs = {e: score_nbest(model, convs, weight=0.7, state_carry=carry, device="cpu", engine=e,
                           progress=False) for e in E.ENGINES}
    assert_close(runs["fast"], runs["naive"])
    assert_close(runs["padded"], runs["naive"])

# First-pass carry: the rank-1 chain first, then every utterance from its start state in parallel


FIRST_PASS_MODELS = [
    pytest.param(dict(arch="lstm", head="softmax"), id="lstm-softmax"),
    pytest.param(dict(arch="lstm", head="pointer", memory_aug=True), id="lstm-pointer+mem"),
    pytest.param(dict(arch="transformer", head="softmax", positions="learned"), id="transformer-softmax"),
    pytest.param(dict(arch="transformer", head="pointer", positions="learned"), id="transformer-pointer"),
    pytest.param(dict(arch="lstm", head="softmax", ncache=True), id="lstm-ncache"),
]


@pytest.mark.parametrize("kw", FIRST_PASS_MODELS)
def test_first_pass_parallel_equals_sequential(kw):
    """Carry first-pass: the fast engine scores the utterances of a conversation side by side
    from start states of the rank-1 chain; the costs (normalised or not) equal the naive engine's,
    which scores the utterances one after another, carrying each rank-1 end state. Several
    conversations of several utterances; one conversation (a job's archive); micro-batches
    cut mid-conversation (max_tokens); conversation blocks (conv_batch)."""
    model = real_model(kw)
    many = make_conversations(seed=31, n_conv=3, n_utt=(3, 5), n_hyp=(2, 6))
    one = [[u for conv in many for u in conv]]  # every utterance in one conversation
    for convs in (many, one):
        for normalize in ("exact", "none"):
            ref = score_nbest(model, convs, weight=0.7, state_carry="first-pass", device="cpu",
                              engine="naive", normalize=normalize, progress=False)
            for max_tokens, conv_batch in ((2048, 16), (7, 2)):
                for schedule in ("auto", "levels", "segments"):
                    got = score_nbest(model, convs, weight=0.7, state_carry="first-pass", device="cpu",
                                      normalize=normalize, max_tokens=max_tokens, conv_batch=conv_batch,
                                      schedule=schedule, progress=False)
                    assert_close(got, ref)
    # the carry matters here: without it the later utterances' costs differ
    none = score_nbest(model, one, weight=0.7, state_carry="none", device="cpu", progress=False)
    assert max(abs(sum(a) - sum(b)) for ua, ub in zip(ref[0][1:], none[0][1:])
               for a, b in zip(ua, ub)) > 1e-3


def test_first_pass_parallel_with_two_models_in_lockstep():
    """Two models scored together (score_nbest_mixed), carry first-pass: each model's costs
    equal its own naive, sequential run (the chain and the waves of each model apart)."""
    from rescore.engine.score import score_nbest_mixed

    lstm = real_model(dict(arch="lstm", head="pointer", memory_aug=True))
    trf = real_model(dict(arch="transformer", head="softmax", positions="learned"))
    one = [[u for conv in make_conversations(seed=33, n_conv=3, n_utt=(3, 4), n_hyp=(2, 6)) for u in conv]]
    got = score_nbest_mixed([lstm, trf], one, weight=0.7, mix=(0.4, 0.6), state_carry="first-pass",
                            device="cpu", max_tokens=9, progress=False)
    for model, costs in zip((lstm, trf), got):
        assert_close(costs, score_nbest(model, one, weight=0.7, state_carry="first-pass", device="cpu",
                                        engine="naive", progress=False))


def test_first_pass_parallel_batches_one_conversation():
    """One conversation of many utterances: with first-pass carry the tries of all its
    utterances share the forward calls (far more rows per call than one utterance at a time,
    the way rescored carry must go), and the 1-best of each utterance is unchanged."""
    model = real_model(dict(arch="lstm", head="softmax"))
    one = [[u for conv in make_conversations(seed=32, n_conv=4, n_utt=(4, 4), n_hyp=(4, 8))
            for u in conv]]
    stats = {c: EngineStats() for c in ("first-pass", "rescored")}
    out = {}
    for carry, st in stats.items():
        # rescored carry with every fixed cost choosing rank 1: the same carried hypotheses
        convs = [[UttInput(u.hyps, [-1e9] + [1e9] * (len(u.hyps) - 1)) for u in one[0]]]
        out[carry] = score_nbest(model, convs, weight=0.7, state_carry=carry, device="cpu",
                                 schedule="levels", stats=st, progress=False)
    assert_close(out["first-pass"], out["rescored"])
    assert stats["first-pass"].calls * 3 < stats["rescored"].calls
    assert stats["first-pass"].rows / stats["first-pass"].calls > 3 * stats["rescored"].rows / stats["rescored"].calls


def test_first_pass_side_by_side_runs_no_chain():
    """Conversations enough to fill the waves side by side (utterance k of each together): the
    first-pass carry takes each rank 1's end state from its trie, as the rescored carry takes
    its best's, so it computes the same rows (no rank-1 chain run of its own); fewer
    conversations run the chain first (more rows: the rank-1 tokens again)."""
    model = real_model(dict(arch="lstm", head="softmax"))
    convs = make_conversations(seed=34, n_conv=6, n_utt=(3, 4), n_hyp=(4, 8))
    first = [[UttInput(u.hyps, [-1e9] + [1e9] * (len(u.hyps) - 1)) for u in conv] for conv in convs]
    rows = {}
    for carry, max_tokens in (("first-pass", 16), ("rescored", 16), ("first-pass", 2048)):
        st = EngineStats()
        got = score_nbest(model, first, weight=0.7, state_carry=carry, device="cpu", schedule="levels",
                          max_tokens=max_tokens, stats=st, progress=False)
        assert_close(got, score_nbest(model, convs, weight=0.7, state_carry="first-pass", device="cpu",
                                      engine="naive", progress=False))
        rows[carry, max_tokens] = st.rows
    assert rows["first-pass", 16] == rows["rescored", 16]
    assert rows["first-pass", 2048] > rows["first-pass", 16]


# --------------------------------------------------------------------------------------------
# rescore-nbest --model


FIXTURE = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "nbest-small"


def test_cli_model_writes_lmwt_nn_and_split_merges(tmp_path):
    from click.testing import CliRunner

    from rescore.cli.nbest import main
    from rescore.nbest.combine import Params
    from rescore.jobs.nbest import score_nbest_set
    from rescore.io.kaldi import read_nn_costs
    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import Vocabulary

    nbest = load_nbest_dir(FIXTURE, FIXTURE / "data")
    words = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    cfg = ModelConfig(head="pointer", memory_aug=True, hidden=16, layers=1, history=8, dropout=0.0)
    # leave two words out of the vocabulary: OOV words go through <unk> and the pointer
    model = build_model(cfg, Vocabulary(["<eos>", "<unk>"] + words[2:]))
    ckpt = tmp_path / "model.pt"
    save_checkpoint(model, ckpt)
    common = [str(FIXTURE), "--data-dir", str(FIXTURE / "data"), "--model", str(ckpt),
              "--weight", "0.5", "--inv-acwt", "10", "--device", "cpu", "--conv-batch", "1", "--oov-penalty", "0"]
    run = CliRunner().invoke(main, [common[0], str(tmp_path / "all")] + common[1:])
    assert run.exit_code == 0, run.output
    got = read_nn_costs(tmp_path / "all" / "lmwt.nn")
    expect = score_nbest_set(model.eval(), nbest, Params(0.5, 10.0, 0.0), device="cpu",
                             engine="naive", progress=False)
    assert list(got) == list(expect)
    for k in expect:
        assert len(got[k]) == len(expect[k])
        assert max(abs(a - b) for a, b in zip(got[k], expect[k])) < 1e-4
    assert (tmp_path / "all" / "lmwt.interp").is_file() and (tmp_path / "all" / "text").is_file()
    # two jobs: cat of their lmwt.nn in job order == the one-process lmwt.nn
    parts = []
    for k in (1, 2):
        out = tmp_path / f"job{k}"
        run = CliRunner().invoke(main, [common[0], str(out)] + common[1:] + ["--split", f"{k}/2"])
        assert run.exit_code == 0, run.output
        parts.append((out / "lmwt.nn").read_text())
    whole = (tmp_path / "all" / "lmwt.nn").read_text()
    assert parts[0] and parts[1]
    assert "".join(parts) == whole
    # bad option combinations fail with a message, not a traceback
    bad = CliRunner().invoke(main, [common[0], str(tmp_path / "x")] + common[1:] +
                             ["--nn-costs", str(tmp_path / "all" / "lmwt.nn")])
    assert bad.exit_code != 0 and "exclude" in bad.output
    bad = CliRunner().invoke(main, [common[0], str(tmp_path / "x")] + common[1:] + ["--split", "3/2"])
    assert bad.exit_code == 2 and "error:" in bad.output.lower()  # a usage error
    # --schedule tree needs a model with a tree forward: a clear error for this LSTM + pointer
    bad = CliRunner().invoke(main, [common[0], str(tmp_path / "x")] + common[1:] +
                             ["--schedule", "tree"])
    assert bad.exit_code == 1 and "tree forward" in bad.output
    run = CliRunner().invoke(main, [common[0], str(tmp_path / "seg")] + common[1:] +
                             ["--schedule", "segments"])
    assert run.exit_code == 0, run.output
    seg = read_nn_costs(tmp_path / "seg" / "lmwt.nn")
    assert max(abs(a - b) for k in expect for a, b in zip(seg[k], expect[k])) < 1e-4


def test_cli_oov_penalty_auto(tmp_path):
    """'auto' = ln(training word types outside the vocabulary), applied like the same number."""
    from click.testing import CliRunner

    from rescore.cli.nbest import main
    from rescore.jobs.nbest import auto_oov_penalty
    from rescore.io.kaldi import read_nn_costs
    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import Vocabulary

    nbest = load_nbest_dir(FIXTURE, FIXTURE / "data")
    words = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16, layers=1, dropout=0.0),
                        Vocabulary(["<eos>", "<unk>"] + words[3:]))  # 3 fixture words are OOV
    ckpt = tmp_path / "model.pt"
    save_checkpoint(model, ckpt)
    # training text: the vocabulary, the 3 OOV fixture words, 4 more OOV types, a literal <unk>
    train = tmp_path / "train.txt"
    train.write_text(" ".join(words) + "\nzz1 zz2 zz3 zz4 <unk>\n")
    assert auto_oov_penalty(model.vocab, Counter(train.read_text().split())) == pytest.approx(math.log(7))
    # the recognizer's words the model never saw count too (a model with every training word
    # still meets them); words.txt's own non-words (<eps>, #0) and the model's words do not
    lexicon = read_vocabulary(FIXTURE / "words.txt").words[2:]
    assert set(words) <= set(lexicon)
    assert auto_oov_penalty(model.vocab, Counter(train.read_text().split()), lexicon + ["zz1", "yy1", "yy2"]) \
        == pytest.approx(math.log(9))
    unseen = len(set(lexicon) - set(words))
    assert auto_oov_penalty(model.vocab, Counter(), lexicon) == pytest.approx(math.log(3 + unseen))

    common = [str(FIXTURE), "--data-dir", str(FIXTURE / "data"), "--model", str(ckpt),
              "--weight", "0.5", "--device", "cpu", "--train-text", str(train)]
    costs = {}
    for name, pen in (("auto", "auto"), ("num", repr(math.log(7))), ("zero", "0")):
        run = CliRunner().invoke(main, [common[0], str(tmp_path / name)] + common[1:] + ["--oov-penalty", pen])
        assert run.exit_code == 0, run.output
        costs[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    assert costs["auto"] == costs["num"]
    # a words.txt with 2 words neither the model nor the training text has: 7 + 2 types
    lex = tmp_path / "words.txt"
    lex.write_text((FIXTURE / "words.txt").read_text() + "yy1 90001\nyy2 90002\n")
    for name, pen, extra in (("auto9", "auto", ["--words-txt", str(lex)]), ("num9", repr(math.log(9)), [])):
        run = CliRunner().invoke(main, [common[0], str(tmp_path / name)] + common[1:] + ["--oov-penalty", pen] + extra)
        assert run.exit_code == 0, run.output
        costs[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    assert costs["auto9"] == costs["num9"] != costs["auto"]
    oov_keys = [h.key for u in nbest.utterances() for h in u.hyps if set(h.words) & set(words[:3])]
    assert oov_keys, "the fixture must have hypotheses with the OOV words"
    assert all(sum(costs["auto"][k]) > sum(costs["zero"][k]) for k in oov_keys)

    # the default: auto where a training text or a words.txt is known (here both, then the
    # words.txt beside the N-best dir alone), 0 where neither is
    no_text = [c for c in common if c not in ("--train-text", str(train))]
    for name, args in (("default", common[1:]), ("default-lex", no_text[1:]), ("lex", no_text[1:] + ["--oov-penalty",
                                                                                                   "auto"])):
        run = CliRunner().invoke(main, [common[0], str(tmp_path / name)] + args)
        assert run.exit_code == 0, run.output
        costs[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    assert costs["default"] == costs["auto"] and costs["default-lex"] == costs["lex"] != costs["zero"]
    bare = tmp_path / "bare"  # the N-best dir without words.txt (words_text holds the words)
    bare.mkdir()
    for f in ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm"):
        (bare / f).write_bytes((FIXTURE / f).read_bytes())
    for name, extra in (("bare-default", []), ("bare-zero", ["--oov-penalty", "0"])):
        run = CliRunner().invoke(main, [str(bare), str(tmp_path / name)] + no_text[1:] + extra)
        assert run.exit_code == 0, run.output
        costs[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    assert costs["bare-default"] == costs["bare-zero"] == costs["zero"]
    bad = CliRunner().invoke(main, [str(bare), str(tmp_path / "x")] + no_text[1:] + ["--oov-penalty", "auto"])
    assert bad.exit_code == 2 and "--train-text" in bad.output and "words.txt" in bad.output
    bad = CliRunner().invoke(main, [common[0], str(tmp_path / "y")] + common[1:] + ["--oov-penalty", "lots"])
    assert bad.exit_code == 2 and "number of nats >= 0 or 'auto'" in bad.output


def test_normalised_outputs_are_cut_to_a_bounded_size(monkeypatch):
    """On a CPU a call's normalised (rows, V) output is cut into chunks of at most OUTPUT_BYTES:
    more forward calls, the same costs."""
    import rescore.engine.forward as F

    model = models()["lstm"]
    convs = make_conversations(seed=25, n_conv=2, n_utt=(2, 3))
    ref_stats, cut_stats = EngineStats(), EngineStats()
    ref = score_nbest(model, convs, weight=0.5, device="cpu", stats=ref_stats, progress=False)
    monkeypatch.setattr(F, "OUTPUT_BYTES", 4 * len(model.vocab) * 3)  # 3 rows a call
    got = score_nbest(model, convs, weight=0.5, device="cpu", stats=cut_stats, progress=False)
    assert_close(got, ref)
    assert cut_stats.calls > ref_stats.calls and cut_stats.rows == ref_stats.rows


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")
def test_freed_memory_is_kept_for_the_next_tensors():
    """keep_freed_memory: a 16 MiB tensor of a size that grows a little each time and its
    log-softmax (as the engine's calls make them), 30 times: under glibc's defaults nearly a page
    fault per 4 KiB every time, after it about once (a process of its own: it changes the
    process's allocator)."""
    import platform
    import subprocess

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    code = (
        "import resource, sys, torch\n"
        "from rescore.engine.forward import keep_freed_memory\n"
        "if sys.argv[1] == 'tuned': keep_freed_memory()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for i in range(30): torch.log_softmax(torch.ones(4 * 2**20 + 1000 * i), 0).sum()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
    faults = {how: int(subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                                      check=True).stdout.split()[-1]) for how in ("default", "tuned")}
    assert faults["default"] > 100_000, faults  # two 4,096-page tensors, most times
    assert faults["tuned"] < 30_000, faults
