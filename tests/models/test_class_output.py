"""The class-factored output layer: ``--output class --classes C``.

Frequency binning, exact normalisation of every head that takes it, its gradient, training,
checkpoints (and old ones without the fields), the engines' agreement, and bad options."""

from __future__ import annotations

import math

import pytest
import torch
from click.testing import CliRunner

from rescore.engine import score as E
from rescore.engine.score import score_nbest
from rescore.errors import OptionError, RescoreError
from rescore.models import HEADS, ModelConfig, build_model, load_checkpoint, save_checkpoint
from rescore.models.classes import frequency_classes
from rescore.models.heads import SoftmaxHead
from rescore.train.loop import TrainOptions, check_config, train_lm
from rescore.vocab import Vocabulary

from tests.engine.test_engine import FIXTURE, WORDS, assert_close, make_conversations
from tests.train.test_train import write_corpus

HEADS_KW = [
    pytest.param(dict(arch="lstm", head="softmax"), id="lstm-softmax"),
    pytest.param(dict(arch="lstm", head="pointer"), id="lstm-pointer"),
    pytest.param(dict(arch="lstm", head="pointer", memory_aug=True), id="lstm-pointer+mem"),
    pytest.param(dict(arch="lstm", head="psmm"), id="lstm-psmm"),
    pytest.param(dict(arch="lstm", head="pointer-generator", coverage=True),
                 id="lstm-pointer-generator+coverage"),
    pytest.param(dict(arch="transformer", head="softmax"), id="transformer-softmax"),
]


def class_model(kw, classes=5, words=WORDS):
    torch.manual_seed(0)
    kw = dict(kw)
    ncache = kw.pop("ncache", False)
    cfg = ModelConfig(hidden=16, layers=2, history=6, context=8, n_heads=2, dropout=0.0,
                      output="class", classes=classes, **kw)
    model = build_model(cfg, Vocabulary(["<eos>", "<unk>"] + words))
    with torch.no_grad():  # spread the distributions beyond the small init
        model.embedding.weight.mul_(20.0)
        model.class_decoder.classes.weight.mul_(5.0)
    if ncache:  # the neural cache (Grave et al. 2017) around it: P_vocab through vocab_score
        from rescore.models.cache import NeuralCacheLM

        model = NeuralCacheLM(model, window=7, theta=0.5, lam=0.3)
    return model.eval()


def inputs(V, seed=0, B=3, T=9):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    ids[:, 5] = ids[:, 2]  # a repeat: the pointers get a match
    return ids


def test_frequency_classes():
    g = torch.Generator().manual_seed(0)
    counts = (1000.0 / torch.arange(1, 3001)).floor() + torch.randint(0, 2, (3000,), generator=g)
    for C in (1, 7, 55, 300, 3000):
        wc = frequency_classes(counts, C)
        sizes = torch.bincount(wc, minlength=C)
        assert wc.shape == (3000,) and int(wc.max()) == C - 1
        assert bool((sizes >= 1).all()) and int(sizes.max()) <= math.ceil(2 * 3000 / C)
        rank = sorted(range(3000), key=lambda w: (-float(counts[w]), w))
        assert wc[rank].diff().ge(0).all()  # classes follow the frequency order
    # equal mass bins: the most frequent words fill a class each, the rare tail is cut by the
    # cap into many classes, and a token's expected within-class cost stays near V / C rows
    C = 55
    wc = frequency_classes(counts, C)
    sizes = torch.bincount(wc, minlength=C).double()
    mass = torch.zeros(C, dtype=torch.float64).index_add_(0, wc, counts.double())
    assert int(sizes[0]) == 1 and int(sizes[-1]) == math.ceil(2 * 3000 / C)
    rows_per_token = float((mass * sizes).sum() / mass.sum())
    assert rows_per_token < 1.5 * 3000 / C, rows_per_token  # seen: 52, V / C = 54.5
    for bad in (0, 3001):
        with pytest.raises(ValueError, match="--classes"):
            frequency_classes(counts, bad)


@pytest.mark.parametrize("kw", HEADS_KW)
def test_factored_probabilities_sum_to_one(kw):
    """exp of log P over every vocabulary word (the copy mass included: all slot identities
    here are vocabulary words) sums to 1 at every position, from the start of a conversation
    (no slots) on."""
    model = class_model(kw)
    V = len(model.vocab)
    ids = inputs(V)
    B, T = ids.shape
    with torch.no_grad():
        out, _ = model(ids, ids, model.initial_state(B))
        assert out.log_vocab is None  # log_norm: the class softmax's (softmax head) or None
        assert (out.log_norm is not None) == (kw["head"] == "softmax")
        total = torch.stack([out.log_prob(torch.full((B, T), w), torch.full((B, T), w)).exp()
                             for w in range(V)]).sum(0)
    assert torch.allclose(total, torch.ones(B, T, dtype=total.dtype), atol=1e-5), total


def test_full_distribution_equals_per_target_scores():
    """ClassDecoder.full_log_probs (all V at once) equals the per-target path; exp sums to 1;
    the factorisation is log P(class) + log P(word | class)."""
    model = class_model(dict(arch="lstm", head="softmax"), classes=4)
    dec = model.class_decoder
    V = len(model.vocab)
    ids = inputs(V, seed=1)
    B, T = ids.shape
    with torch.no_grad():
        out, _ = model(ids, ids, model.initial_state(B))
        class_lp = torch.log_softmax(dec.class_logits(out.hidden), -1)
        full = dec.full_log_probs(out.hidden, class_lp)  # (B, T, V)
        b = torch.arange(B).repeat_interleave(T * V)
        t = torch.arange(T).repeat_interleave(V).repeat(B)
        v = torch.arange(V).repeat(B * T)
        per = out.vocab_score(b, t, v).view(B, T, V)
    assert torch.allclose(full, per, atol=1e-5)
    assert torch.allclose(full.exp().sum(-1), torch.ones(B, T), atol=1e-5)
    # P(class c) is the mass of its members
    members = dec.word_class == 2
    assert torch.allclose(full[..., members].logsumexp(-1), class_lp[..., 2], atol=1e-5)


@pytest.mark.parametrize("kw", HEADS_KW[:3])
def test_training_gradient_equals_full_softmax_gradient(kw):
    """The training path (one gather in class order, a product per class) has the gradient of
    the same loss computed from the full (B, T, V) distribution by autograd."""
    model = class_model(kw).train()
    dec = model.class_decoder
    ids = inputs(len(model.vocab), seed=2)
    B = ids.shape[0]
    tgt = torch.roll(ids, -1, 1)
    out, _ = model(ids, ids, model.initial_state(B))
    (-out.log_prob(tgt, tgt).sum()).backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    out, _ = model(ids, ids, model.initial_state(B))
    cl = dec.class_logits(out.hidden).float()
    if kw["head"] == "pointer":  # the pointer class: masked while no slot is filled
        no_slot = (out.slot_ident == -1).all(-1, keepdim=True)
        cl = cl.masked_fill(torch.nn.functional.pad(no_slot, (dec.n_classes, 0)), float("-inf"))
    full = dec.full_log_probs(out.hidden, torch.log_softmax(cl, -1))
    lp = full.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    if out.log_slot is not None:
        copy = out.log_slot.masked_fill(out.slot_ident != tgt.unsqueeze(-1), float("-inf"))
        lp = torch.logsumexp(torch.cat([lp.unsqueeze(-1), copy], -1), -1)
    (-lp.sum()).backward()
    slow = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert set(fast) == set(slow)
    for n in fast:
        assert torch.allclose(fast[n], slow[n], atol=1e-4, rtol=1e-4), n


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "train.txt", 300, 1)
    write_corpus(tmp_path / "valid.txt", 40, 2)
    return tmp_path


def valid_loss(model, path):
    from rescore.train.data import load_streams
    from rescore.train.ppl import stream_loss

    nll, n = stream_loss(model, load_streams(path, model.vocab, 4, pad=True), 8, "cpu")
    return nll / n


@pytest.mark.parametrize("head,mem", [("softmax", False), ("pointer", True)])
def test_training_lowers_valid_loss_and_checkpoint_keeps_classes(corpus, head, mem):
    cfg = ModelConfig(head=head, memory_aug=mem, hidden=16, layers=1, history=8, dropout=0.0,
                      output="class", classes=6)
    out = corpus / head
    opts = TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt", out_dir=out,
                        epochs=2, batch_size=4, bptt=8, lr=1.0, device="cpu", threads=1)
    torch.manual_seed(opts.seed)  # the initial weights of train_lm
    vocab = Vocabulary.from_text(corpus / "train.txt")
    from rescore.train.loop import train_counts

    untrained = build_model(ModelConfig(**{**cfg.to_dict()}), vocab,
                            train_counts(corpus / "train.txt", vocab)).eval()
    train_lm(cfg, opts)
    model = load_checkpoint(out / "model.pt")
    assert model.config.output == "class" and model.config.classes == 6
    # the classes were binned from the training counts and came back from the checkpoint
    assert torch.equal(model.class_decoder.word_class, untrained.class_decoder.word_class)
    with torch.no_grad():
        before, after = valid_loss(untrained, corpus / "valid.txt"), valid_loss(model, corpus / "valid.txt")
    assert after < before - 0.5, (before, after)  # seen: 3.8 -> 1.5 (softmax)


def test_old_checkpoint_loads_as_softmax(tmp_path):
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=8, layers=1), Vocabulary(["<eos>", "<unk>", "a"]))
    save_checkpoint(model, tmp_path / "m.pt")
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    del ckpt["config"]["output"], ckpt["config"]["classes"]  # written before the fields existed
    torch.save(ckpt, tmp_path / "old.pt")
    old = load_checkpoint(tmp_path / "old.pt")
    assert old.config.output == "softmax" and old.config.classes == 0
    assert isinstance(old.head.decoder, torch.nn.Linear)


def test_class_checkpoint_round_trip_and_bad_index(tmp_path):
    model = class_model(dict(arch="lstm", head="pointer", memory_aug=True))
    # classes other than the Zipf default of a fresh build: the loaded ones must be these
    wc = torch.arange(len(model.vocab)) % 5
    model.class_decoder.word_class.copy_(wc)
    from rescore.models.classes import class_positions

    model.class_decoder.word_pos.copy_(class_positions(wc, 5))
    model.class_decoder._index()
    save_checkpoint(model, tmp_path / "m.pt")
    back = load_checkpoint(tmp_path / "m.pt")
    assert torch.equal(back.class_decoder.word_class, wc)
    ids = inputs(len(model.vocab))
    with torch.no_grad():
        a = model.score(ids, ids, ids, ids, model.initial_state(3))[0]
        b = back.score(ids, ids, ids, ids, back.initial_state(3))[0]
    assert torch.allclose(a, b)
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    ckpt["state_dict"]["class_decoder.word_class"][0] = 7  # no class 7 of 5
    torch.save(ckpt, tmp_path / "bad.pt")
    with pytest.raises(RescoreError, match="bad.pt.*class"):
        load_checkpoint(tmp_path / "bad.pt")


@pytest.mark.parametrize("kw", HEADS_KW + [pytest.param(
    dict(arch="lstm", head="pointer", memory_aug=True, ncache=True), id="lstm-pointer+mem-ncache")])
def test_engines_agree(kw):
    model = class_model(kw)
    convs = make_conversations(seed=41, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    run = lambda **o: score_nbest(model, convs, weight=0.7, device="cpu", max_tokens=64,  # noqa: E731
                                  conv_batch=2, progress=False, **o)
    ref = run(engine="naive")
    assert_close(run(engine="padded"), ref)
    for schedule in ("levels", "segments") + (("tree",) if model.supports_tree else ()):
        assert_close(run(engine="fast", schedule=schedule), ref)
    # the costs are -log of the model's own normalised P, token by token (no carry)
    words = convs[0][0].hyps[0]
    x_ids, _ = model.vocab.encode(list(words))
    x = torch.tensor([[model.vocab.eos_id] + x_ids])
    y = torch.tensor([x_ids + [model.vocab.eos_id]])
    with torch.no_grad():
        lp, _ = model.score(x, x.clone(), y, y.clone(), model.initial_state(1))
    got = score_nbest(model, convs, weight=0.7, state_carry="none", device="cpu",
                      progress=False)[0][0][0]
    assert max(abs(a + b) for a, b in zip(got, lp[0].tolist())) < 1e-4
    with pytest.raises(RescoreError, match="class-factored"):
        run(normalize="none")
    assert E.resolve_normalize(model, "auto") == "exact"


class _NoClassHead(SoftmaxHead):
    supports_class_output = False


def test_bad_options(monkeypatch, corpus):
    base = dict(hidden=8, layers=1)
    with pytest.raises(OptionError, match="--classes"):
        check_config(ModelConfig(output="class", classes=0, **base))
    with pytest.raises(OptionError, match="--classes"):
        check_config(ModelConfig(output="softmax", classes=5, **base))
    with pytest.raises(OptionError, match="--output"):
        check_config(ModelConfig(output="hierarchical", **base))
    check_config(ModelConfig(output="class", classes=4, self_norm=0.1, **base))  # softmax head
    with pytest.raises(OptionError, match="--self-norm.*--head softmax"):
        check_config(ModelConfig(output="class", classes=4, self_norm=0.1, head="pointer", **base))
    monkeypatch.setitem(HEADS, "noclass", _NoClassHead)
    with pytest.raises(OptionError, match="--head.*class-factored"):
        check_config(ModelConfig(head="noclass", output="class", classes=4, **base))
    with pytest.raises(ValueError, match="--head noclass"):  # a checkpoint with such a config
        build_model(ModelConfig(head="noclass", output="class", classes=2, **base),
                    Vocabulary(["<eos>", "<unk>", "a"]))
    with pytest.raises(ValueError, match="--classes 4"):
        build_model(ModelConfig(output="class", classes=4, **base),
                    Vocabulary(["<eos>", "<unk>", "a"]))
    # more classes than words, found once the vocabulary is read
    opts = TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt",
                        out_dir=corpus / "big", epochs=1, batch_size=4, bptt=8, device="cpu")
    with pytest.raises(OptionError, match="--classes.*vocabulary"):
        train_lm(ModelConfig(output="class", classes=100000, **base), opts)


def test_cli_train_ppl_nbest(corpus, tmp_path):
    """rescore-train-lm --output class --classes C; rescore-ppl and rescore-nbest read the
    checkpoint as it is; --normalize none is refused; bad --classes exit 2."""
    from rescore.cli.nbest import main as nbest_main
    from rescore.cli.ppl import main as ppl_main
    from rescore.cli.train_lm import main as train_main
    from rescore.io.kaldi import read_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(FIXTURE, FIXTURE / "data")
    words = sorted({w for u in nbest.utterances() for h in u.hyps for w in h.words})
    train = tmp_path / "fixture_train.txt"  # the fixture's words, so the N-best is in vocabulary
    train.write_text("\n".join(" ".join(words[i:i + 7]) for i in range(0, len(words), 3)) + "\n")
    args = ["--train", str(train), "--valid", str(corpus / "valid.txt"), "--hidden", "8",
            "--layers", "1", "--bptt", "8", "--epochs", "1", "--batch-size", "2", "--device",
            "cpu", "--threads", "1", "--epoch-batches", "2"]
    r = CliRunner().invoke(train_main, args + ["--out-dir", str(tmp_path / "m"), "--output",
                                                "class", "--classes", "5"])
    assert r.exit_code == 0, r.output
    ckpt = tmp_path / "m" / "model.pt"
    assert load_checkpoint(ckpt).config.classes == 5
    for bad, msg in ((["--classes", "0"], "--classes"), (["--classes", "100000"], "--classes"),
                     (["--classes", "5"], "--classes: expected --output class")):
        r = CliRunner().invoke(train_main, args + ["--out-dir", str(tmp_path / "x")]
                               + (["--output", "class"] if "expected" not in msg else []) + bad)
        assert r.exit_code == 2 and msg in r.output, r.output
    # --classes auto (the default): round(sqrt(V)) of the vocabulary trained
    r = CliRunner().invoke(train_main, args + ["--out-dir", str(tmp_path / "auto"), "--output",
                                                "class", "--max-vocab", "10"])
    assert r.exit_code == 0, r.output
    auto = load_checkpoint(tmp_path / "auto" / "model.pt")
    assert len(auto.vocab) == 10 and auto.config.classes == 3  # round(sqrt(10))
    r = CliRunner().invoke(train_main, args + ["--out-dir", str(tmp_path / "y"), "--output",
                                                "class", "--classes", "many"])
    assert r.exit_code == 2 and "an integer or auto" in r.output, r.output
    r = CliRunner().invoke(ppl_main, [str(ckpt), str(train), "--device", "cpu"])
    assert r.exit_code == 0 and "5 classes" in r.output, r.output
    common = [str(FIXTURE), "--data-dir", str(FIXTURE / "data"), "--model", str(ckpt),
              "--device", "cpu", "--weight", "0.5"]
    r = CliRunner().invoke(nbest_main, [common[0], str(tmp_path / "nb")] + common[1:])
    assert r.exit_code == 0, r.output
    costs = read_nn_costs(tmp_path / "nb" / "lmwt.nn")
    assert costs and all(math.isfinite(c) and c > 0 for cs in costs.values() for c in cs)
    r = CliRunner().invoke(nbest_main, [common[0], str(tmp_path / "nb2")] + common[1:]
                           + ["--normalize", "none"])
    assert r.exit_code != 0 and "class-factored" in r.output, r.output


def flat(B, T):
    return torch.arange(B).repeat_interleave(T), torch.arange(T).repeat(B)


def test_self_normalised_class_output_adds_both_log_zs():
    """--self-norm with the class layer: ``log_norm`` is the class softmax's log Z,
    ``target_norm`` gives log P and the target class's within-class log Z (both checked
    against log-sum-exps over the full layers), and the raw score of ``normalize=False`` is
    log P plus both."""
    model = class_model(dict(arch="lstm", head="softmax", self_norm=0.5))
    dec = model.class_decoder
    ids = inputs(len(model.vocab))
    B, T = ids.shape
    with torch.no_grad():
        exact, _ = model(ids, ids.clone(), model.initial_state(B))
        raw, _ = model(ids, ids.clone(), model.initial_state(B), normalize=False)
        b, t = flat(B, T)
        targets = torch.roll(ids, 1, dims=1).reshape(-1)  # any words, every class
        lp = exact.vocab_score(b, t, targets)
        lp2, z_in = exact.target_norm(b, t, targets)
        h = exact.hidden[b, t]
        word_logits = dec.words(h)  # (E, V)
        same = dec.word_class.unsqueeze(0) == dec.word_class[targets].unsqueeze(1)
        want_z_in = torch.logsumexp(word_logits.masked_fill(~same, float("-inf")), dim=1)
        want_z_cls = torch.logsumexp(dec.class_logits(exact.hidden), dim=-1)  # (B, T)
        got = raw.vocab_score(b, t, targets)
    assert torch.allclose(lp2, lp, atol=1e-5)
    assert torch.allclose(z_in, want_z_in, atol=1e-4)
    assert torch.allclose(exact.log_norm, want_z_cls, atol=1e-4)
    assert torch.allclose(got, lp + exact.log_norm[b, t] + z_in, atol=1e-4)
    assert exact.log_norm.abs().mean() > 0.5 and z_in.abs().mean() > 0.5  # Z far from 1 here


def test_self_norm_loss_has_both_terms():
    """The training loss of a self-normalised class model is -log P plus alpha times the
    squares of both normalisers, the within-class one taken at each target's class."""
    from rescore.train.loop import compute_loss

    model = class_model(dict(arch="lstm", head="softmax", self_norm=0.25))
    ids = inputs(len(model.vocab))
    B, T = ids.shape
    x, y = ids[:, :-1], ids[:, 1:]
    out, _ = model(x, x.clone(), model.initial_state(B))
    loss = compute_loss(model.config, out, y, y.clone())
    b, t = flat(B, T - 1)
    lp, z_in = out.target_norm(b, t, y.reshape(-1))
    want = -lp.mean() + 0.25 * (out.log_norm.pow(2).mean() + z_in.pow(2).mean())
    assert torch.allclose(loss, want, atol=1e-5)
    plain = compute_loss(ModelConfig(output="class", classes=5), out, y, y.clone())
    assert torch.allclose(plain, -out.log_prob(y, y.clone()).mean(), atol=1e-6)
    assert float((loss - plain).detach()) > 0.01
    loss.backward()  # both terms reach the class and word rows
    assert model.class_decoder.classes.weight.grad.abs().sum() > 0


def test_self_norm_class_training_and_unnormalised_scoring(corpus):
    """A tiny class model trained with --self-norm 1 ends with both normalisers near 1 on
    held-out text, one trained without does not; the engines agree on its unnormalised costs,
    --normalize auto picks them, and they differ from the exact ones by the log Zs only."""
    got, models = {}, {}
    for alpha in (0.0, 1.0):
        cfg = ModelConfig(hidden=16, layers=1, dropout=0.0, output="class", classes=4,
                          self_norm=alpha)
        out = corpus / f"a{alpha}"
        train_lm(cfg, TrainOptions(train=corpus / "train.txt", valid=corpus / "valid.txt",
                                   out_dir=out, epochs=2, batch_size=4, bptt=8, lr=1.0,
                                   device="cpu", threads=1))
        model = models[alpha] = load_checkpoint(out / "model.pt")
        from rescore.train.data import load_streams

        s = load_streams(corpus / "valid.txt", model.vocab, 4, pad=True)
        with torch.no_grad():
            o, _ = model(s.ids, s.ident, model.initial_state(s.ids.shape[0]))
            B, T = s.ids.shape
            b, t = flat(B, T)
            y = torch.roll(s.ids, -1, dims=1).reshape(-1)
            _, z_in = o.target_norm(b, t, y)
            mask = s.mask.reshape(-1)
            got[alpha] = float((o.log_norm.reshape(-1)[mask] ** 2).mean()
                               + (z_in[mask] ** 2).mean())
    assert got[1.0] < 0.3 < 1.0 < got[0.0], got
    model = models[1.0].eval()
    convs = make_conversations(seed=43, n_conv=2, n_utt=(2, 3), n_hyp=(2, 5))
    run = lambda **o: score_nbest(model, convs, weight=0.7, device="cpu", max_tokens=64,  # noqa: E731
                                  conv_batch=2, progress=False, **o)
    assert E.resolve_normalize(model, "auto") == "none"
    ref = run(engine="naive", normalize="none")
    for engine in ("padded", "fast"):
        assert_close(run(engine=engine, normalize="none"), ref)
    exact = run(normalize="exact")
    diffs = [abs(a - b) for ce, cr in zip(exact, ref) for ue, ur in zip(ce, cr)
             for he, hr in zip(ue, ur) for a, b in zip(he, hr)]
    assert 0 < max(diffs)  # different costs; near because the log Zs are near 0
    with pytest.raises(RescoreError, match="without --self-norm"):
        score_nbest(models[0.0], convs, weight=0.7, device="cpu", normalize="none", progress=False)
