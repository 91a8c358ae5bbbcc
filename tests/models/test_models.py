"""Bodies x heads: one call on T tokens equals T single-token calls; checkpoints round-trip and
reject corrupt or foreign files."""

import pickle

import pytest
import torch

from rescore.errors import RescoreError
from rescore.models import HEADS, LMState, ModelConfig, build_model, load_checkpoint, save_checkpoint
from rescore.models.base import Part
from rescore.vocab import Vocabulary

VOCAB = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(10)])


def tiny(arch, head, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, head=head, hidden=16, layers=2, history=5, context=6, n_heads=2,
                      **kw)
    return build_model(cfg, VOCAB).eval()


def tokens(B=3, T=13):
    g = torch.Generator().manual_seed(3)
    ident = torch.randint(0, len(VOCAB) + 4, (B, T + 1), generator=g)  # OOVs beyond V
    ids = torch.where(ident >= len(VOCAB), torch.tensor(VOCAB.unk_id), ident)
    return ids, ident


VARIANTS = [dict(arch="lstm")] + [dict(arch="transformer", positions=p)
                                   for p in ("learned", "sinusoidal", "none")]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(v.values()))
@pytest.mark.parametrize("head", sorted(HEADS) + ["pointer+mem"])
def test_forward_equals_token_by_token(variant, head):
    kw = dict(variant)
    if head == "pointer+mem":
        head, kw["memory_aug"] = "pointer", True
    model = tiny(head=head, **kw)
    ids, ident = tokens()
    x, xi, y, yi = ids[:, :-1], ident[:, :-1], ids[:, 1:], ident[:, 1:]
    with torch.no_grad():
        state = model.initial_state(3)
        # 13 tokens as chunks of 7 and 6 (longer than history and context: windows slide)
        lp1, s = model.score(x[:, :7], xi[:, :7], y[:, :7], yi[:, :7], state)
        lp2, s_all = model.score(x[:, 7:], xi[:, 7:], y[:, 7:], yi[:, 7:], s)
        lp_all = torch.cat([lp1, lp2], dim=1)
        s1, lps = state, []
        for t in range(x.shape[1]):
            lp, s1 = model.score(x[:, t:t + 1], xi[:, t:t + 1], y[:, t:t + 1], yi[:, t:t + 1], s1)
            lps.append(lp)
    assert torch.allclose(lp_all, torch.cat(lps, dim=1), atol=1e-5)
    assert set(s_all.tensors) == set(s1.tensors)
    for k in s_all.tensors:
        assert torch.allclose(s_all.tensors[k].float(), s1.tensors[k].float(), atol=1e-5), k
    assert torch.isfinite(lp_all).all() and (lp_all < 0).all()


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
def test_forward_tree_equals_forward_on_each_path(positions):
    """Two trees side by side (the second one padded), each node's output equals forward on
    its path, from a start state whose cache is partly filled and slides (context 6)."""
    model = tiny("transformer", "softmax", positions=positions)
    assert model.supports_tree and not tiny("lstm", "softmax").supports_tree
    # nodes in parent-before-child order; parent -1 = root. Tree 0 is 8 deep (past the window).
    parents = [[-1, 0, 1, 2, 3, 4, 5, 6, 1, 8, 0], [-1, 0, 0, 2]]
    g = torch.Generator().manual_seed(5)
    B, N = 2, max(len(p) for p in parents)
    ids = torch.randint(0, len(VOCAB), (B, N), generator=g)
    depth = torch.zeros(B, N, dtype=torch.long)
    anc = torch.eye(N, dtype=torch.bool).repeat(B, 1, 1)  # padding nodes see themselves
    for b, par in enumerate(parents):
        for i, p in enumerate(par):
            if p >= 0:
                depth[b, i] = depth[b, p] + 1
                anc[b, i] |= anc[b, p]
    with torch.no_grad():
        pre = torch.randint(0, len(VOCAB), (B, 3), generator=g)  # fill 3 of 6 cache slots
        _, state = model(pre, pre, model.initial_state(B))
        tree = model.forward_tree(ids, ids, depth, anc, state).log_vocab  # (B, N, V)
        for b, par in enumerate(parents):
            for i in range(len(par)):
                path = [j for j in range(N) if anc[b, i, j]]  # ancestors by index = by depth
                x = ids[b, path].unsqueeze(0)
                out, _ = model(x, x, state.select(torch.tensor([b])))
                assert torch.allclose(tree[b, i], out.log_vocab[0, -1], atol=1e-5), (b, i)


def test_state_select_and_cat():
    model = tiny("transformer", "pointer", memory_aug=True)
    ids, ident = tokens()
    with torch.no_grad():
        _, s = model(ids, ident, model.initial_state(3))
        picked = LMState.cat([s.select(torch.tensor([2])), s.select(torch.tensor([0]))])
        out_a, _ = model(ids[[2, 0], :2], ident[[2, 0], :2], picked)
        out_b, _ = model(ids[:, :2], ident[:, :2], s)
    assert torch.allclose(out_a.log_vocab, out_b.log_vocab[[2, 0]], atol=1e-6)


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_checkpoint_round_trip(tmp_path, arch):
    model = tiny(arch, "pointer", memory_aug=True)
    path = tmp_path / "model.pt"
    save_checkpoint(model, path, epoch=3)
    loaded = load_checkpoint(path, "cpu")
    assert loaded.config == model.config
    assert loaded.vocab.words == VOCAB.words
    ids, ident = tokens()
    with torch.no_grad():
        a, _ = model(ids, ident, model.initial_state(3))
        b, _ = loaded(ids, ident, loaded.initial_state(3))
    assert torch.equal(a.log_vocab, b.log_vocab) and torch.equal(a.log_slot, b.log_slot)
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary left behind


class Evil:
    def __reduce__(self):
        return (print, ("executed code from a checkpoint",))


def test_checkpoint_corrupt_and_foreign(tmp_path):
    model = tiny("lstm", "softmax")
    good = tmp_path / "good.pt"
    save_checkpoint(model, good)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump(Evil(), f)
    text = tmp_path / "text.pt"
    text.write_text("hello\n")
    for path in (corrupt, foreign, evil, text, tmp_path / "missing.pt"):
        with pytest.raises(RescoreError) as e:
            load_checkpoint(path)
        assert str(path) in str(e.value)
    ckpt = torch.load(good, weights_only=True)
    ckpt["state_dict"].pop("decoder.bias")
    torch.save(ckpt, foreign)
    with pytest.raises(RescoreError, match="weights"):
        load_checkpoint(foreign)


def test_rescore_nbest_reads_its_checkpoint_once(tmp_path, monkeypatch):
    """rescore-nbest checks the model's vocabulary and then loads it from the one read of the
    file; a checkpoint changed in between is read again (its new weights are the ones used)."""
    import rescore.models as M
    from click.testing import CliRunner

    from rescore.cli.nbest import main as nbest_main
    from rescore.nbest.sets import load_nbest_dir
    from tests.engine.test_engine import FIXTURE

    words = sorted({w for u in load_nbest_dir(FIXTURE, FIXTURE / "data").utterances()
                    for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=8, layers=1), Vocabulary(["<eos>", "<unk>"] + words))
    path = tmp_path / "m.pt"
    save_checkpoint(model, path)
    M._READ.clear()  # (other tests' checks may have kept files they did not load)
    reads = []
    real = M._read_checkpoint
    monkeypatch.setattr(M, "_read_checkpoint", lambda p, d: reads.append(p) or real(p, d))
    r = CliRunner().invoke(nbest_main, [str(FIXTURE), str(tmp_path / "out"), "--data-dir",
                                        str(FIXTURE / "data"), "--model", str(path), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert len(reads) == 1 and not M._READ
    M.read_checkpoint(path, keep=True)  # kept, then the file changes: the new one is loaded
    with torch.no_grad():
        model.embedding.weight.add_(1.0)
    save_checkpoint(model, path)
    got = load_checkpoint(path)
    assert len(reads) == 3 and torch.equal(got.embedding.weight, model.embedding.weight)
    assert not M._READ  # the stale read is dropped too
    first = M.read_checkpoint(path, keep=True)  # the checks of several jobs: one read
    assert M.read_checkpoint(path, keep=True) is first and len(reads) == 4
    load_checkpoint(path)
    assert len(reads) == 4 and not M._READ


def test_the_torch_free_body_names_are_the_registry():
    """rescore-train-lm's --arch (torch-free, for an instant --help) offers the names of
    rescore.settings, and the registry of bodies holds exactly those; a body under an undeclared
    name is refused when it registers."""
    from rescore.cli.train_lm import main as train_main
    from rescore.models import BODIES
    from rescore.models.bodies import register_body
    from rescore.settings import BODY_NAMES, RNN_BODIES, TRANSFORMER_BODIES

    assert sorted(BODIES) == sorted(BODY_NAMES) == sorted(RNN_BODIES + TRANSFORMER_BODIES)
    arch = next(p for p in train_main.params if p.name == "arch")
    assert tuple(arch.type.choices) == BODY_NAMES
    with pytest.raises(ValueError, match="BODY_NAMES"):
        register_body("mamba")


def test_parts_declare_what_the_engine_may_run():
    """The engine asks a body or a head what it is (rescore.models.base.Part), never its class:
    the LSTM body declares its one-token step, the softmax head its output by its decoder, every
    other part nothing; a part that is no Part is refused when it registers."""
    from rescore.models import BODIES, HEADS
    from rescore.models.bodies import register_body
    from rescore.models.heads import register_head

    assert [n for n, b in sorted(BODIES.items()) if b.lstm_step] == ["lstm"]
    assert all(issubclass(c, Part) for c in [*BODIES.values(), *HEADS.values()])
    vocab = Vocabulary(["<eos>", "<unk>", "a", "b", "c"])
    outputs = {}
    for head in sorted(HEADS):
        for output, classes in (("softmax", 0), ("class", 2)):
            if output == "class" and not HEADS[head].supports_class_output:
                continue
            model = build_model(ModelConfig(head=head, hidden=8, layers=1, output=output, classes=classes), vocab)
            outputs[head, output] = (model.head.softmax_output, model.lstm_levels())
    assert outputs.pop(("softmax", "softmax")) == ("softmax", True)
    assert outputs.pop(("softmax", "class")) == ("class", True)
    assert set(outputs.values()) == {(None, False)}
    gru = build_model(ModelConfig(arch="gru", hidden=8, layers=1), vocab)
    assert not gru.lstm_levels()
    with pytest.raises(TypeError, match="Part"):
        register_body("lstm")(torch.nn.Module)
    with pytest.raises(TypeError, match="Part"):
        register_head("mine")(torch.nn.Module)


def test_the_engine_asks_no_model_class():
    """rescore/engine/ switches on no model class of rescore.models (no ``isinstance`` on a
    model, a body, a head or a decoder): it reads what they declare."""
    import ast
    import importlib
    import pkgutil
    from pathlib import Path

    import rescore.engine
    import rescore.models

    modules = [importlib.import_module(f"rescore.models.{m.name}")
               for m in pkgutil.iter_modules(rescore.models.__path__)]
    classes = {name for mod in modules for name, x in vars(mod).items()
               if isinstance(x, type) and issubclass(x, torch.nn.Module) and x.__module__.startswith("rescore.models")}
    assert {"LSTMBody", "SoftmaxHead", "NeuralLM", "ClassDecoder"} <= classes
    found = []
    for path in sorted(Path(rescore.engine.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                used = {getattr(n, "id", None) or getattr(n, "attr", None) for n in ast.walk(node.args[1])}
                if used & classes:
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []
