"""Neural cache wrapper (Grave et al. 2017) against a slow reference loop over positions.

The wrapped models are tiny float64 LSTMs with the softmax head and with the implicit pointer
(+ memory augmentation); the sequences hold repeated and out-of-vocabulary words.
"""

from __future__ import annotations

import math

import pytest
import torch

from rescore.models import LMState, ModelConfig, build_model
from rescore.models.cache import NeuralCacheLM, with_cache
from rescore.vocab import Vocabulary

VOCAB = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(6)])
WINDOW, THETA, LAMBDA = 4, 0.7, 0.3


def tiny(head, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(arch="lstm", head=head, hidden=8, layers=1, history=3, dropout=0.0, **kw)
    return build_model(cfg, VOCAB).double().eval()


def tokens(B=2, T=12, seed=3):
    g = torch.Generator().manual_seed(seed)
    ident = torch.randint(0, len(VOCAB) + 3, (B, T + 1), generator=g)  # >= V: OOV words
    ident[ident == VOCAB.unk_id] = 2
    ids = torch.where(ident >= len(VOCAB), torch.tensor(VOCAB.unk_id), ident)
    return ids, ident


def reference(model, ids, ident):
    """log P of every target: (1 - lambda) P_model + lambda P_cache, one position at a time.

    P_cache(w | h_t) ∝ sum_{i in [t-L, t-1], x_{i+1} = w} exp(theta h_t . h_i) (Grave et al.
    eq. 2);
    with no pair yet (t = 0) the model alone.
    """
    x, xi, y, yi = ids[:, :-1], ident[:, :-1], ids[:, 1:], ident[:, 1:]
    out, _ = model(x, xi, model.initial_state(x.shape[0]))
    lp_model = out.log_prob(y, yi)  # (B, T)
    h = out.hidden
    B, T = x.shape
    rows = []
    for b in range(B):
        row = []
        for t in range(T):
            pairs = range(max(0, t - WINDOW), t)  # pair i = (h_i, x_{i+1})
            if not pairs:
                row.append(lp_model[b, t])
                continue
            w = torch.stack([torch.exp(THETA * (h[b, t] @ h[b, i])) for i in pairs])
            hit = torch.tensor([xi[b, i + 1].item() == yi[b, t].item() for i in pairs])
            p_cache = (w * hit).sum() / w.sum()
            row.append(torch.log((1 - LAMBDA) * lp_model[b, t].exp() + LAMBDA * p_cache))
        rows.append(torch.stack(row))
    return torch.stack(rows)


HEADS = [("softmax", {}), ("pointer", {"memory_aug": True}), ("psmm", {})]


@pytest.fixture(params=[None, 2], ids=["own-pairs-whole-window", "own-pairs-2"])
def recent(request, monkeypatch):
    """The pairs a state keeps of its own: the whole window (the cache's RECENT is above it) or
    2, so that most of the window sits in shared store rows (the case of a long window)."""
    if request.param is not None:
        monkeypatch.setattr("rescore.models.cache.RECENT", request.param)
    return request.param


@pytest.mark.parametrize("head,kw", HEADS, ids=[h for h, _ in HEADS])
def test_matches_slow_reference_with_gradients(head, kw, recent):
    model = tiny(head, **kw)
    cached = NeuralCacheLM(model, WINDOW, THETA, LAMBDA)
    ids, ident = tokens()
    x, xi, y, yi = ids[:, :-1], ident[:, :-1], ids[:, 1:], ident[:, 1:]
    grads = []
    for fast in (True, False):
        model.zero_grad()
        if fast:  # two chunks (5 < L, then 7 > L) with the state carried
            state = cached.initial_state(2)
            lp1, state = cached.score(x[:, :5], xi[:, :5], y[:, :5], yi[:, :5], state)
            lp2, state = cached.score(x[:, 5:], xi[:, 5:], y[:, 5:], yi[:, 5:], state)
            lp = torch.cat([lp1, lp2], 1)
        else:
            lp = reference(model, ids, ident)
        lp.sum().backward()
        grads.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_f, g_f), (lp_r, g_r) = grads
    torch.testing.assert_close(lp_f, lp_r, atol=1e-5, rtol=0)
    for a, b in zip(g_f, g_r):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # The cache changed something, including for an OOV target seen before in the window.
    with torch.no_grad():
        plain, _ = model.score(x, xi, y, yi, model.initial_state(2))
    assert (lp_f - plain).abs()[:, 1:].min() > 0
    oov_seen = [(b, t) for b in range(2) for t in range(1, x.shape[1])
                if yi[b, t] >= len(VOCAB)
                and (xi[b, max(1, t - WINDOW + 1):t + 1] == yi[b, t]).any()]
    assert oov_seen and all(lp_f[b, t] > plain[b, t] + math.log(1 - LAMBDA) for b, t in oov_seen)


def test_whole_sequence_equals_single_token_calls_and_state_ops(recent):
    cached = with_cache(tiny("pointer", memory_aug=True), WINDOW, THETA, LAMBDA)
    ids, ident = tokens(B=3, T=10, seed=5)
    x, xi, y, yi = ids[:, :-1], ident[:, :-1], ids[:, 1:], ident[:, 1:]
    with torch.no_grad():
        whole, s_all = cached.score(x, xi, y, yi, cached.initial_state(3))
        s, steps = cached.initial_state(3), []
        for t in range(x.shape[1]):
            lp, s = cached.score(x[:, t:t + 1], xi[:, t:t + 1], y[:, t:t + 1], yi[:, t:t + 1], s)
            steps.append(lp)
        torch.testing.assert_close(torch.cat(steps, 1), whole, atol=1e-10, rtol=0)
        # The two states hold the same window (its parts may sit differently: the state's own
        # pairs or a shared store row), so the next tokens score the same from either.
        assert set(s.tensors) == set(s_all.tensors) and set(s.stores) == set(s_all.stores)
        more, more_i = tokens(B=3, T=6, seed=6)
        nxt = [cached.score(more[:, :-1], more_i[:, :-1], more[:, 1:], more_i[:, 1:], st)[0]
               for st in (s, s_all)]
        torch.testing.assert_close(nxt[0], nxt[1], atol=1e-10, rtol=0)
        # States of different rows can be picked and stacked (the engine's trie expansion).
        picked = LMState.cat([s_all.select(torch.tensor([2])), s_all.select(torch.tensor([0]))])
        a, _ = cached.score(x[[2, 0], :2], xi[[2, 0], :2], y[[2, 0], :2], yi[[2, 0], :2], picked)
        b, _ = cached.score(x[:, :2], xi[:, :2], y[:, :2], yi[:, :2], s_all)
    torch.testing.assert_close(a, b[[2, 0]])


def test_options():
    model = tiny("softmax")
    assert with_cache(model, 0, THETA, LAMBDA) is model
    with pytest.raises(ValueError):
        NeuralCacheLM(model, 4, THETA, 1.0)


def test_tune_cache_equals_the_wrapper():
    """The one-pass grid gives, at each point, the cross-entropy NeuralCacheLM gives."""
    from rescore.train.data import make_streams
    from rescore.models.cache import tune_cache

    model = tiny("pointer", memory_aug=True)
    ids, ident = tokens(B=1, T=70, seed=9)
    streams = make_streams(ids[0], ident[0], 3, pad=True)  # 3 streams, the last one padded
    grid = tune_cache(model, streams, 8, windows=[3, 30], thetas=[0.2, 1.0], lambdas=[0.0, 0.4],
                      progress=False)
    assert len(grid) == 8
    for point in grid:
        cached = NeuralCacheLM(model, point["window"], point["theta"], point["lambda"])
        state, total = cached.initial_state(3), 0.0
        with torch.no_grad():
            for x, xi, y, yi, m in streams.chunks(8):
                lp, state = cached.score(x, xi, y, yi, state)
                total -= float(lp[m].sum())
        assert abs(total / streams.n_targets - point["cross_entropy"]) < 1e-9
    no_cache = [p["cross_entropy"] for p in grid if p["lambda"] == 0.0]
    assert max(no_cache) - min(no_cache) < 1e-12
    assert len({round(p["cross_entropy"], 9) for p in grid}) == 5  # lambda > 0 changes it


def test_nbest_command_with_cache_equals_naive_scoring(tmp_path):
    """rescore-nbest --model CKPT --cache-window ... scores with the wrapped model."""
    from pathlib import Path

    from click.testing import CliRunner

    from rescore.cli.nbest import main
    from rescore.nbest.combine import Params
    from rescore.jobs.nbest import score_nbest_set
    from rescore.io.kaldi import read_nn_costs
    from rescore.models import save_checkpoint
    from rescore.nbest.sets import load_nbest_dir

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "nbest-small"
    if not fixture.is_dir():
        pytest.skip(f"no N-best fixture at {fixture}")
    nbest = load_nbest_dir(fixture, fixture / "data")
    words = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    cfg = ModelConfig(head="softmax", hidden=16, layers=1, dropout=0.0)
    model = build_model(cfg, Vocabulary(["<eos>", "<unk>"] + words[2:]))
    ckpt = tmp_path / "model.pt"
    save_checkpoint(model, ckpt)
    costs = []
    for extra in ([], ["--cache-window", "30", "--cache-theta", "0.5", "--cache-lambda", "0.2"]):
        out = tmp_path / f"out{len(extra)}"
        run = CliRunner().invoke(main, [str(fixture), str(out), "--data-dir", str(fixture / "data"),
                                        "--model", str(ckpt), "--weight", "0.5", "--device", "cpu",
                                        "--oov-penalty", "0"] + extra)
        assert run.exit_code == 0, run.output
        costs.append(read_nn_costs(out / "lmwt.nn"))
    expect = score_nbest_set(NeuralCacheLM(model.eval(), 30, 0.5, 0.2), nbest,
                             Params(0.5, 10.0, 0.0), device="cpu", engine="naive", progress=False)
    assert list(costs[1]) == list(expect)
    for k in expect:
        assert max(abs(a - b) for a, b in zip(costs[1][k], expect[k])) < 1e-4
    assert any(abs(sum(costs[0][k]) - sum(costs[1][k])) > 1e-3 for k in expect)


def test_ppl_command_tunes_the_cache(tmp_path):
    """rescore-ppl --tune-cache: every grid point's perplexity on the text (tune_cache's, one pass
    of the model), the best one last, the JSON report; a value out of range is an option error."""
    import json

    from click.testing import CliRunner

    from rescore.cli.ppl import main
    from rescore.models import save_checkpoint
    from rescore.models.cache import tune_cache
    from rescore.train.data import load_streams

    model = tiny("softmax")
    ckpt = tmp_path / "m.pt"
    save_checkpoint(model, ckpt)
    words = model.vocab.words[2:12]
    text = tmp_path / "valid.txt"
    text.write_text("".join(" ".join(words[i:i + 5]) + "\n" for i in range(6)))
    r = CliRunner().invoke(main, [str(ckpt), str(text), "--device", "cpu", "--tune-cache", "--cache-windows", "3,30",
                                  "--cache-thetas", "0.2,1", "--cache-lambdas", "0,0.4", "--bptt", "8",
                                  "--batch-size", "2", "--report", str(tmp_path / "grid.json")])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 9 and lines[-1].startswith("best: window")
    rep = json.loads((tmp_path / "grid.json").read_text())
    want = tune_cache(model.eval(), load_streams(text, model.vocab, 2, pad=True), 8, [3, 30], [0.2, 1.0],
                      [0.0, 0.4], progress=False)
    assert [p["cross_entropy"] for p in rep["grid"]] == pytest.approx([p["cross_entropy"] for p in want])
    assert rep["best"] == min(rep["grid"], key=lambda p: p["cross_entropy"])
    bad = CliRunner().invoke(main, [str(ckpt), str(text), "--tune-cache", "--cache-lambdas", "1.5"])
    assert bad.exit_code == 2 and "--cache-lambdas" in bad.output
