"""Import of Kaldi steps/pytorchnn models (rescore.models.kaldi_lm, rescore-import-kaldi-lm).

The reference is a small re-implementation of Kaldi's model.py and of compute_sentence_scores.py's
sentence score, written here from their description (torch's own LSTM/GRU/TransformerEncoder
modules, so the state_dict has Kaldi's key names and shapes): ``<s> w1..wn`` -> ``w1..wn <s>``,
OOV words as ``<unk>``, the sum of the n + 1 cross-entropies.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from rescore.cli.import_kaldi_lm import main as import_main
from rescore.engine.score import UttInput, score_nbest
from rescore.errors import RescoreError
from rescore.models.kaldi_lm import import_kaldi_lm
from rescore.models import load_checkpoint

WORDS = ["<eps>", "<s>", "</s>", "<unk>", "the", "cat", "sat", "on", "a", "mat", "dog", "#0"]
E = 8


class KaldiRNN(nn.Module):  # Kaldi's RNNModel, eval mode
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers)  # sequence-first
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):  # x (T, B)
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden


class KaldiPE(nn.Module):
    def __init__(self, d, max_len=50):
        super().__init__()
        pe = torch.zeros(max_len, d)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))  # (max_len, 1, d)

    def forward(self, x):
        return x + self.pe[: x.size(0)]


class KaldiTransformer(nn.Module):  # Kaldi's TransformerModel, eval mode
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__()
        self.pos_encoder = KaldiPE(ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, 0.0, "gelu")
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp

    def forward(self, src):  # (T, B)
        T = len(src)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        x = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        return self.decoder(self.transformer_encoder(x, mask))


def kaldi_model(model_type, nlayers=2, tied=True, seed=0):
    torch.manual_seed(seed)
    V = len(WORDS)
    m = (KaldiTransformer(V, E, 2, E, nlayers) if model_type == "Transformer"
         else KaldiRNN(model_type, V, E, E, nlayers))
    for p in m.parameters():  # random weights, larger than the init so costs differ a lot
        nn.init.uniform_(p, -0.5, 0.5)
    if tied:
        m.decoder.weight = m.encoder.weight
    return m.eval()


def kaldi_costs(m, model_type, hyps, hidden=None):
    """Kaldi's sentence scores of one utterance's hypotheses (and the carried state from the
    first hypothesis alone, without padding)."""
    idx = {w: i for i, w in enumerate(WORDS)}
    ids = lambda ws: [idx.get(w, idx["<unk>"]) for w in ws]  # noqa: E731
    out, end = [], None
    with torch.no_grad():
        for k, h in enumerate(hyps):
            x = torch.tensor(ids(["<s>"] + h)).unsqueeze(1)  # (T, 1)
            y = torch.tensor(ids(h + ["<s>"]))
            if model_type == "Transformer":
                logits = m(x)
            else:
                logits, state = m(x, hidden)
                if k == 0:
                    end = state
            out.append(nn.functional.cross_entropy(logits[:, 0], y, reduction="sum").item())
    return out, end


@pytest.fixture
def vocab_file(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("".join(f"{w} {i}\n" for i, w in enumerate(WORDS)))
    return p


UTTS = [[["the", "cat", "sat"], ["the", "cat", "sat", "on", "a", "mat"], ["a", "zebra"], []],
        [["the", "dog"], ["dog", "the", "dog", "sat", "sat"]],
        [["on", "the", "mat"], ["on", "a", "cat"]]]


def ours(model, state_carry="none", engine="fast"):
    conv = [UttInput(u, [0.0] * len(u)) for u in UTTS]
    got = score_nbest(model, [conv], weight=0.5, state_carry=state_carry, device="cpu",
                      engine=engine, progress=False)
    return [[sum(c) for c in u] for u in got[0]]


def save_kaldi(m, tmp_path):
    path = tmp_path / "model.pt"
    torch.save(m.state_dict(), path)
    return path


@pytest.mark.parametrize("model_type", ["LSTM", "GRU", "Transformer"])
def test_costs_equal_kaldi(tmp_path, vocab_file, model_type):
    m = kaldi_model(model_type)
    lm = import_kaldi_lm(save_kaldi(m, tmp_path), vocab_file, tmp_path / "out/model.pt",
                         model_type=model_type, embedding_dim=E, hidden_dim=E, nlayers=2,
                         nhead=2, tied=True)
    ref = [kaldi_costs(m, model_type, u)[0] for u in UTTS]
    loaded = load_checkpoint(tmp_path / "out/model.pt")
    for engine in ("fast", "naive"):
        got = ours(loaded, engine=engine)
        for r, g in zip(ref, got):
            assert g == pytest.approx(r, abs=1e-4)
    flat = lambda x: [c for u in x for c in u]  # noqa: E731
    assert flat(ours(lm)) == pytest.approx(flat(ours(loaded)), abs=1e-6)
    assert max(abs(a - b) for u in ref for a, b in zip(u, u[1:])) > 0.5  # costs differ


def test_lstm_first_pass_carry_equals_kaldi_without_padding(tmp_path, vocab_file):
    m = kaldi_model("LSTM")
    import_kaldi_lm(save_kaldi(m, tmp_path), vocab_file, tmp_path / "out/model.pt",
                    model_type="LSTM", embedding_dim=E, hidden_dim=E, nlayers=2, tied=True)
    ref, hidden = [], None
    for u in UTTS:  # Kaldi's carry: the state after the first hypothesis' <s> w1 .. wn
        costs, hidden = kaldi_costs(m, "LSTM", u, hidden)
        ref.append(costs)
    got = ours(load_checkpoint(tmp_path / "out/model.pt"), state_carry="first-pass")
    for r, g in zip(ref, got):
        assert g == pytest.approx(r, abs=1e-4)
    assert ref[1] != pytest.approx(kaldi_costs(m, "LSTM", UTTS[1])[0], abs=1e-3)  # carry matters


def test_untied_model_is_scored_as_kaldi_scores_it(tmp_path, vocab_file, caplog):
    m = kaldi_model("LSTM", tied=False)
    path = save_kaldi(m, tmp_path)
    # Kaldi's scorer: a tied model that loads the untied state_dict (decoder.weight wins)
    k = kaldi_model("LSTM", tied=True, seed=1)
    k.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(k.encoder.weight, m.decoder.weight)
    with pytest.raises(RescoreError, match="tied weights"):
        import_kaldi_lm(path, vocab_file, tmp_path / "a/model.pt", model_type="LSTM",
                        embedding_dim=E, hidden_dim=E, nlayers=2, tied=True)
    lm = import_kaldi_lm(path, vocab_file, tmp_path / "b/model.pt", model_type="LSTM",
                         embedding_dim=E, hidden_dim=E, nlayers=2, tied=False)
    assert "untied" in caplog.text
    for r, g in zip([kaldi_costs(k, "LSTM", u)[0] for u in UTTS], ours(lm)):
        assert g == pytest.approx(r, abs=1e-4)


def test_wrong_names_and_shapes_are_refused(tmp_path, vocab_file):
    m = kaldi_model("LSTM")
    sd = m.state_dict()
    opts = dict(model_type="LSTM", embedding_dim=E, hidden_dim=E, nlayers=2, tied=True)
    renamed = {("lstm." + k[4:] if k.startswith("rnn.") else k): v for k, v in sd.items()}
    torch.save(renamed, tmp_path / "renamed.pt")
    with pytest.raises(RescoreError, match=r"renamed\.pt: .*missing rnn\.weight_ih_l0.*"
                                           r"unexpected lstm\.weight_ih_l0"):
        import_kaldi_lm(tmp_path / "renamed.pt", vocab_file, tmp_path / "o/model.pt", **opts)
    with pytest.raises(RescoreError, match=r"rnn\.weight_hh_l0 has shape \[32, 8\], .* give \[48, 12\]"):
        import_kaldi_lm(save_kaldi(m, tmp_path), vocab_file, tmp_path / "o/model.pt",
                        **{**opts, "embedding_dim": 12, "hidden_dim": 12})
    with pytest.raises(RescoreError, match="missing rnn.weight_ih_l2"):  # --nlayers 3
        import_kaldi_lm(save_kaldi(m, tmp_path), vocab_file, tmp_path / "o/model.pt",
                        **{**opts, "nlayers": 3})
    with pytest.raises(RescoreError, match="missing pos_encoder.pe, transformer_encoder"):  # wrong --model-type
        import_kaldi_lm(save_kaldi(m, tmp_path), vocab_file, tmp_path / "o/model.pt",
                        **{**opts, "model_type": "Transformer"})
    short = tmp_path / "short.txt"
    short.write_text("".join(f"{w} {i}\n" for i, w in enumerate(WORDS[:-1])))
    with pytest.raises(RescoreError, match=r"short\.txt: expected as many words as .*rows \(12;.*'11 words'"):
        import_kaldi_lm(save_kaldi(m, tmp_path), short, tmp_path / "o/model.pt", **opts)
    torch.save({"model": m}, tmp_path / "pickled.pt")  # a whole module: code, refused unread
    with pytest.raises(RescoreError, match="pickled.pt: expected a state_dict saved by torch.save"):
        import_kaldi_lm(tmp_path / "pickled.pt", vocab_file, tmp_path / "o/model.pt", **opts)
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_vocab_conventions_are_checked(tmp_path, vocab_file):
    m = kaldi_model("LSTM")
    path = save_kaldi(m, tmp_path)
    opts = dict(model_type="LSTM", embedding_dim=E, hidden_dim=E, nlayers=2, tied=True)
    with pytest.raises(RescoreError, match=r"OOV symbol \(--oov\) '<UNK>'"):
        import_kaldi_lm(path, vocab_file, tmp_path / "o/model.pt", oov="<UNK>", **opts)
    bad = tmp_path / "bad.txt"
    bad.write_text("<eps> 0\n<s>\n")
    with pytest.raises(RescoreError, match=r"bad.txt:2: expected 'word id'"):
        import_kaldi_lm(path, bad, tmp_path / "o/model.pt", **opts)
    lm = import_kaldi_lm(path, vocab_file, tmp_path / "o/model.pt", **opts)
    assert lm.vocab.words[1] == "<eos>" and lm.vocab.words[3] == "<unk>"
    assert lm.vocab.words[0] == "<eps>" and lm.vocab.words[2] == "</s>"  # same indices


def test_command(tmp_path, vocab_file):
    path = save_kaldi(kaldi_model("Transformer", nlayers=1), tmp_path)
    args = [str(path), str(vocab_file), str(tmp_path / "out"), "--model-type", "Transformer",
            "--embedding_dim", str(E), "--hidden-dim", str(E), "--nlayers", "1", "--nhead", "2",
            "--tied"]
    r = CliRunner().invoke(import_main, args)
    assert r.exit_code == 0, r.output
    assert load_checkpoint(tmp_path / "out/model.pt").config.arch == "kaldi-transformer"
    args[args.index("--nlayers") + 1] = "3"
    r = CliRunner().invoke(import_main, args)
    assert r.exit_code == 1 and "missing transformer_encoder.layers.1" in r.output
    h = subprocess.run([sys.executable, "-m", "rescore.cli.import_kaldi_lm", "--help"],
                       capture_output=True, text=True)
    assert h.returncode == 0 and "--embedding-dim" in h.stdout


def test_reimport_replaces_an_earlier_import_but_no_other_model(tmp_path, vocab_file):
    """The steps scripts re-import into their cache dir when the model or options change; a
    model.pt that no import wrote (e.g. one rescore-train-lm trained) is left alone."""
    opts = dict(model_type="LSTM", embedding_dim=E, hidden_dim=E, nlayers=1, tied=True)
    out = tmp_path / "out" / "model.pt"
    import_kaldi_lm(save_kaldi(kaldi_model("LSTM", nlayers=1, seed=0), tmp_path), vocab_file, out, **opts)
    first = out.read_bytes()
    import_kaldi_lm(save_kaldi(kaldi_model("LSTM", nlayers=1, seed=1), tmp_path), vocab_file, out, **opts)
    assert out.read_bytes() != first and torch.load(out, weights_only=True)["imported_from"]["nlayers"] == 1
    ck = torch.load(out, weights_only=True)
    del ck["imported_from"]  # as rescore-train-lm saves it
    torch.save(ck, out)
    trained = out.read_bytes()
    with pytest.raises(RescoreError, match=r"model\.pt: expected no model\.pt in OUT_DIR, or one an earlier"):
        import_kaldi_lm(tmp_path / "model.pt", vocab_file, out, **opts)
    assert out.read_bytes() == trained
