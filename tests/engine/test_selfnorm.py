"""Self-normalisation: log Z of every head, the alpha (log Z)^2 training term,
unnormalised scoring (``normalize=False`` / ``--normalize none``) in every engine."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from rescore.engine import score as E
from rescore.engine.score import score_nbest
from rescore.errors import RescoreError
from rescore.models import ModelConfig, build_model, load_checkpoint, save_checkpoint
from rescore.train.loop import TrainOptions, train_lm
from rescore.vocab import Vocabulary

from tests.engine.engine_toys import ToyLSTM, ToyVocab
from tests.engine.test_engine import FIXTURE, WORDS, assert_close, make_conversations, real_model
from tests.train.test_train import write_corpus

HEADS = [
    pytest.param(dict(arch="lstm", head="softmax"), id="lstm-softmax"),
    pytest.param(dict(arch="lstm", head="pointer"), id="lstm-pointer"),
    pytest.param(dict(arch="lstm", head="pointer", memory_aug=True), id="lstm-pointer+mem"),
    pytest.param(dict(arch="lstm", head="psmm"), id="lstm-psmm"),
    pytest.param(dict(arch="lstm", head="pointer-generator"), id="lstm-pointer-generator"),
    pytest.param(dict(arch="lstm", head="pointer-generator", coverage=True),
                 id="lstm-pointer-generator+coverage"),
    pytest.param(dict(arch="transformer", head="pointer", memory_aug=True),
                 id="transformer-pointer+mem"),
]


def inputs(model, seed=0, B=3, T=9):
    """Random (B, T) inputs with repeated identities (the pointers get matches) and OOVs."""
    g = torch.Generator().manual_seed(seed)
    V = len(model.vocab)
    ids = torch.randint(0, V, (B, T), generator=g)
    ident = ids.clone()
    ident[:, 4] = V + 3  # an OOV word: <unk> id, its own identity
    ids[:, 4] = model.vocab.unk_id
    return ids, ident


@pytest.mark.parametrize("kw", HEADS)
def test_log_norm_and_unnormalised_output(kw):
    """log_norm is log Z of the head's V-sized softmax: the log-sum-exp of the unnormalised
    vocabulary scores (read row by row through vocab_score) minus that of the normalised ones;
    the unnormalised mixture is the exact one times Z (softmax, pointer) or has only P_vocab
    unnormalised (PSMM, pointer-generator)."""
    model = real_model(kw)
    V = len(model.vocab)
    ids, ident = inputs(model)
    B, T = ids.shape
    state = model.initial_state(B)
    exact, st1 = model(ids, ident, state)
    raw, st2 = model(ids, ident, state, normalize=False)
    assert raw.log_vocab is None and exact.log_norm is not None
    for k in st1.tensors:
        assert torch.allclose(st1.tensors[k].float(), st2.tensors[k].float(), atol=1e-6)
    b = torch.arange(B).repeat_interleave(T * V)
    t = torch.arange(T).repeat_interleave(V).repeat(B)
    v = torch.arange(V).repeat(B * T)
    raw_vocab = raw.vocab_score(b, t, v).view(B, T, V)
    log_z = torch.logsumexp(raw_vocab, -1) - torch.logsumexp(exact.log_vocab, -1)
    assert torch.allclose(exact.log_norm, log_z, atol=1e-5)
    assert log_z.abs().max() > 0.1  # not trivially normalised
    tgt = torch.roll(ids, -1, 1)
    tgt_ident = torch.roll(ident, -1, 1)
    shift = raw.log_prob(tgt, tgt_ident) - exact.log_prob(tgt, tgt_ident)
    if kw["head"] in ("softmax", "pointer"):
        assert torch.allclose(shift, exact.log_norm, atol=1e-5)
        if raw.log_slot is not None:
            fin = torch.isfinite(exact.log_slot)
            assert torch.equal(fin, torch.isfinite(raw.log_slot))
            d = (raw.log_slot - exact.log_slot)[fin]
            assert torch.allclose(d, exact.log_norm.unsqueeze(-1).expand_as(fin)[fin], atol=1e-5)
    else:  # the gate and the attention stay exact: only P_vocab loses its normaliser
        assert torch.allclose(raw.log_slot, exact.log_slot, atol=1e-6, equal_nan=True)
        assert torch.allclose(raw_vocab, exact.log_vocab + exact.log_norm.unsqueeze(-1),
                              atol=1e-5)
        assert (shift > 0).all()  # Z > 1 here: the unnormalised mixture is larger


@pytest.mark.parametrize("kw", HEADS)
def test_self_norm_gradient_is_that_of_log_sum_exp(kw):
    """d/dtheta sum(log_norm^2) equals the gradient of the same quantity computed the slow way
    (log-sum-exp over every vocabulary row, read one by one through vocab_score, and the slots
    of the implicit pointer) with autograd."""
    model = real_model(kw).train()
    model.drop.p = 0.0
    ids, ident = inputs(model, seed=1)
    B, T = ids.shape
    V = len(model.vocab)
    out, _ = model(ids, ident, model.initial_state(B))
    (out.log_norm ** 2).sum().backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    raw, _ = model(ids, ident, model.initial_state(B), normalize=False)
    b = torch.arange(B).repeat_interleave(T * V)
    t = torch.arange(T).repeat_interleave(V).repeat(B)
    v = torch.arange(V).repeat(B * T)
    scores = raw.vocab_score(b, t, v).view(B, T, V)
    if kw["head"] == "pointer":
        log_z = torch.logsumexp(torch.cat([scores, raw.log_slot], -1), -1)
    elif kw["head"] == "softmax":
        log_z = torch.logsumexp(scores, -1)
    else:  # the vocabulary scores carry the log gate; the normaliser is P_vocab's alone
        logits = model.decoder(raw.hidden)
        log_z = torch.logsumexp(logits, -1)
    (log_z ** 2).sum().backward()
    slow = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert set(fast) == set(slow)
    for n in fast:
        assert torch.allclose(fast[n], slow[n], atol=1e-4, rtol=1e-4), n


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "train.txt", 300, 1)
    write_corpus(tmp_path / "valid.txt", 40, 2)
    return tmp_path


def mean_sq_log_norm(model, path):
    from rescore.train.data import load_streams

    s = load_streams(path, model.vocab, 4, pad=True)
    out, _ = model(s.ids, s.ident, model.initial_state(s.ids.shape[0]))
    return float((out.log_norm[s.mask] ** 2).mean())


@pytest.mark.parametrize("head,mem", [("softmax", False), ("pointer", True)])
def test_self_norm_training_drives_log_z_to_zero(corpus, head, mem):
    """The same tiny training with and without the term: with it, log Z ends near 0 on held-out
    text (and the checkpoint records alpha); without it log Z stays far from 0."""
    got = {}
    for alpha in (0.0, 1.0):
        cfg = ModelConfig(head=head, memory_aug=mem, hidden=16, layers=1, history=8,
                          dropout=0.0, self_norm=alpha)
        out = corpus / f"a{alpha}"
        train_lm(cfg, TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt",
                                   out_dir=out, epochs=2, batch_size=4, bptt=8, lr=1.0,
                                   device="cpu", threads=1))
        model = load_checkpoint(out / "model.pt")
        assert model.config.self_norm == alpha
        with torch.no_grad():
            got[alpha] = mean_sq_log_norm(model, corpus / "valid.txt")
    assert got[1.0] < 0.3 < 3.0 < got[0.0], got  # seen: 0.13 and 27.7 (pointer + memory)


def test_old_checkpoint_without_self_norm_loads(tmp_path):
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=8, layers=1), Vocabulary(["<eos>", "<unk>", "a"]))
    save_checkpoint(model, tmp_path / "m.pt")
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    del ckpt["config"]["self_norm"]  # written before the field existed
    torch.save(ckpt, tmp_path / "old.pt")
    old = load_checkpoint(tmp_path / "old.pt")
    assert old.config.self_norm == 0.0
    assert E.resolve_normalize(old, "auto") == "exact"


def test_cli_self_norm_option(corpus):
    from rescore.cli.train_lm import main

    args = ["--train", str(corpus / "train.txt"), "--valid", str(corpus / "valid.txt"),
            "--out-dir", str(corpus / "cli"), "--hidden", "8", "--layers", "1", "--bptt", "8",
            "--epochs", "1", "--batch-size", "4", "--device", "cpu", "--threads", "1",
            "--epoch-batches", "2"]
    r = CliRunner().invoke(main, args + ["--self-norm", "0.5"])
    assert r.exit_code == 0, r.output
    assert load_checkpoint(corpus / "cli" / "model.pt").config.self_norm == 0.5
    cfg = json.loads((corpus / "cli" / "train.json").read_text())["config"]
    assert cfg["self_norm"] == 0.5
    r = CliRunner().invoke(main, args + ["--self-norm", "-1"])
    assert r.exit_code == 2 and "self-norm" in r.output


# --------------------------------------------------------------------------------------------
# Engines


ENGINE_MODELS = [
    pytest.param(dict(arch="lstm", head="softmax"), id="lstm-softmax"),
    pytest.param(dict(arch="lstm", head="pointer", memory_aug=True), id="lstm-pointer+mem"),
    pytest.param(dict(arch="lstm", head="pointer"), id="lstm-pointer"),
    pytest.param(dict(arch="lstm", head="psmm"), id="lstm-psmm"),
    pytest.param(dict(arch="lstm", head="pointer-generator"), id="lstm-pointer-generator"),
    pytest.param(dict(arch="transformer", head="softmax", positions="learned"),
                 id="transformer-softmax"),
    pytest.param(dict(arch="lstm", head="pointer", memory_aug=True, ncache=True),
                 id="lstm-pointer+mem-ncache"),
]


@pytest.mark.parametrize("kw", ENGINE_MODELS)
@pytest.mark.parametrize("carry", ["none", "rescored"])
def test_engines_agree_unnormalised(kw, carry):
    model = real_model(kw)
    convs = make_conversations(seed=31, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    run = lambda **o: score_nbest(model, convs, weight=0.7, state_carry=carry, device="cpu",  # noqa: E731
                                  max_tokens=64, conv_batch=2, progress=False, **o)
    ref = run(engine="naive", normalize="none")
    for eng in ("padded", "fast"):
        assert_close(run(engine=eng, normalize="none"), ref)
    for schedule in ("levels", "segments") + (("tree",) if model.supports_tree else ()):
        assert_close(run(schedule=schedule, normalize="none"), ref)
    exact = run(engine="naive")
    diff = [abs(a - b) for ce, cr in zip(exact, ref) for ue, ur in zip(ce, cr)
            for he, hr in zip(ue, ur) for a, b in zip(he, hr)]
    assert max(diff) > 0.1  # unnormalised costs differ: these models are not self-normalised


def test_unnormalised_cost_is_exact_cost_minus_log_z():
    """Token by token, the unnormalised cost of a softmax LSTM is the exact cost minus log Z at
    that position (computed here by the model's own normalised forward)."""
    model = real_model(dict(arch="lstm", head="softmax"))
    convs = make_conversations(seed=32, n_conv=2, n_utt=(1, 2), n_hyp=(2, 4))
    exact = score_nbest(model, convs, weight=0.5, state_carry="none", device="cpu",
                        progress=False)
    none = score_nbest(model, convs, weight=0.5, state_carry="none", device="cpu",
                       normalize="none", progress=False)
    for conv, ce, cn in zip(convs, exact, none):
        for utt, ue, un in zip(conv, ce, cn):
            for words, he, hn in zip(utt.hyps, ue, un):
                ids, ident = model.vocab.encode(list(words))
                x = torch.tensor([[model.vocab.eos_id] + ids])
                with torch.no_grad():
                    out, _ = model(x, x.clone(), model.initial_state(1))
                lz = out.log_norm[0].tolist()
                assert len(lz) == len(he) == len(hn)
                for a, b, z in zip(he, hn, lz):
                    assert abs((a - b) - z) < 1e-4


@pytest.mark.parametrize("kw", ENGINE_MODELS[:2])
def test_unnormalised_bf16_stays_close(kw):
    model = real_model(kw)
    convs = make_conversations(seed=33, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    ref = score_nbest(model, convs, weight=0.7, device="cpu", engine="naive", normalize="none",
                      progress=False)
    for eng in E.ENGINES:
        got = score_nbest(model, convs, weight=0.7, device="cpu", engine=eng, normalize="none",
                          precision="bf16", progress=False)
        rel = [abs(sum(a) - sum(b)) / max(1.0, abs(sum(a))) for ca, cb in zip(ref, got)
               for ua, ub in zip(ca, cb) for a, b in zip(ua, ub)]
        assert 0 < max(rel) < 0.05, (eng, max(rel))


def test_normalize_option_checks():
    toy = ToyLSTM(ToyVocab(WORDS))
    convs = make_conversations(seed=34, n_conv=1)
    with pytest.raises(RescoreError, match="without its normaliser"):
        score_nbest(toy, convs, weight=0.5, device="cpu", normalize="none", progress=False)
    with pytest.raises(RescoreError, match="normalize"):
        score_nbest(toy, convs, weight=0.5, device="cpu", normalize="sometimes", progress=False)
    # auto: exact for a model that is not self-normalised (the toys too), none for one that is
    assert E.resolve_normalize(toy, "auto") == "exact"
    model = real_model(dict(arch="lstm", head="softmax"))
    assert E.resolve_normalize(model, "auto") == "exact"
    model.config.self_norm = 0.1
    assert E.resolve_normalize(model, "auto") == "none"


def test_normalize_none_warns_for_a_model_not_self_normalised(caplog):
    """--normalize none is allowed for a softmax model trained without --self-norm (an imported
    model may be self-normalised without saying so), with a warning; not for one trained with it."""
    model = real_model(dict(arch="lstm", head="softmax"))
    with caplog.at_level("WARNING", logger="rescore.engine"):
        assert E.resolve_normalize(model, "none") == "none"
    assert "not trained with --self-norm" in caplog.text
    caplog.clear()
    model.config.self_norm = 0.1
    with caplog.at_level("WARNING", logger="rescore.engine"):
        assert E.resolve_normalize(model, "none") == "none"
    assert "self-norm" not in caplog.text


def test_cli_normalize(tmp_path):
    """rescore-nbest --normalize none writes the unnormalised costs; auto picks them for a
    self-normalised checkpoint and the exact ones otherwise."""
    from rescore.cli.nbest import main
    from rescore.io.kaldi import read_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(FIXTURE, FIXTURE / "data")
    words = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    model = build_model(ModelConfig(head="pointer", memory_aug=True, hidden=16, layers=1,
                                    history=8, dropout=0.0), Vocabulary(["<eos>", "<unk>"] + words))
    plain, selfn = tmp_path / "plain.pt", tmp_path / "selfnorm.pt"
    save_checkpoint(model, plain)
    model.config.self_norm = 0.1
    save_checkpoint(model, selfn)
    costs = {}
    for name, ckpt, norm in (("exact", plain, "exact"), ("none", plain, "none"),
                             ("auto-plain", plain, "auto"), ("auto-self", selfn, "auto")):
        r = CliRunner().invoke(main, [str(FIXTURE), str(tmp_path / name), "--data-dir",
                                      str(FIXTURE / "data"), "--model", str(ckpt), "--device",
                                      "cpu", "--weight", "0.5", "--normalize", norm])
        assert r.exit_code == 0, r.output
        costs[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    assert costs["auto-plain"] == costs["exact"]
    assert costs["auto-self"] == costs["none"]
    assert costs["none"] != costs["exact"]


def test_lstm_step_from_ids_equals_forward():
    """The one-token inference step (layer 0's input projection from a table) equals nn.LSTM,
    and the table follows the weights when they change."""
    from rescore.engine.lstm_steps import step_ids

    model = real_model(dict(arch="lstm", head="softmax"))
    body = model.body
    ids = torch.tensor([[3], [5], [0]])
    state = {"h": torch.randn(3, 2, 16), "c": torch.randn(3, 2, 16)}
    with torch.no_grad():
        for _ in range(2):
            ref, ref_st = body(model.embedding(ids), state)
            got, got_st = step_ids(body, ids, model.embedding.weight, state)
            assert torch.allclose(ref, got, atol=1e-5)
            for k in ("h", "c"):
                assert torch.allclose(ref_st[k], got_st[k], atol=1e-5)
            model.embedding.weight.mul_(0.5)  # the cached table must not be used again
            body.rnn.bias_hh_l0.add_(0.3)
