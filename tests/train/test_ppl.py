"""rescore-ppl: the boundary convention against a token-by-token reference, buckets, --compare."""

import json
import math
import subprocess
import sys
from pathlib import Path

import torch
from click.testing import CliRunner

from rescore.cli.ppl import main as ppl_main
from rescore.models import ModelConfig, build_model, save_checkpoint
from rescore.train.ppl import perplexity_report
from rescore.vocab import Vocabulary

TRAIN = "the cat sat\nthe dog sat on the mat\na cat and a dog\nthe end\n" * 3 + "zebra once\n"
TEXT = "the cat sat on a zebra\nunseen word the unseen word\nthe cat\n"
REPO = Path(__file__).resolve().parents[2]


def make_ckpt(tmp_path, name, head="pointer", seed=0):
    (tmp_path / "train.txt").write_text(TRAIN)
    (tmp_path / "text.txt").write_text(TEXT)
    vocab = Vocabulary.from_text(tmp_path / "train.txt", max_size=8)  # some words become OOV
    torch.manual_seed(seed)
    model = build_model(ModelConfig(head=head, hidden=8, layers=1, history=4, memory_aug=True)
                        if head == "pointer" else ModelConfig(hidden=8, layers=1), vocab)
    path = tmp_path / name / "model.pt"
    save_checkpoint(model, path)
    return path, model


def reference_cost(model, text_path):
    """-sum ln P over '<eos> s1 <eos> s2 ... <eos>', one token at a time from an empty state."""
    words = ["<eos>"]
    for line in Path(text_path).read_text().splitlines():
        words += line.split() + ["<eos>"]
    vocab = Vocabulary(model.vocab.words)  # fresh OOV identities, as load_checkpoint has
    ids, ident = vocab.encode(words)
    state, total = model.initial_state(1), 0.0
    model.eval()
    with torch.no_grad():
        for t in range(len(words) - 1):
            lp, state = model.score(torch.tensor([[ids[t]]]), torch.tensor([[ident[t]]]),
                                    torch.tensor([[ids[t + 1]]]), torch.tensor([[ident[t + 1]]]),
                                    state)
            total -= float(lp)
    return total, len(words) - 1


def test_ppl_matches_token_by_token_reference(tmp_path):
    path, model = make_ckpt(tmp_path, "a")
    rep = perplexity_report(path, tmp_path / "text.txt", batch_size=1, bptt=3)
    total, n = reference_cost(model, tmp_path / "text.txt")
    assert rep["targets"] == n == 6 + 1 + 5 + 1 + 2 + 1  # words + one <eos> per sentence
    assert math.isclose(rep["ppl"], math.exp(total / n), rel_tol=1e-6)
    # more streams cut the context at stream starts: close, but every target is still scored once
    rep4 = perplexity_report(path, tmp_path / "text.txt", batch_size=4, bptt=3)
    assert rep4["targets"] == n and rep4["ppl"] != rep["ppl"]


def test_buckets_and_compare(tmp_path):
    a, model_a = make_ckpt(tmp_path, "a")
    b, model_b = make_ckpt(tmp_path, "b", head="softmax", seed=1)
    rep = perplexity_report(a, tmp_path / "text.txt", train_text=tmp_path / "train.txt",
                            compare=b, batch_size=1, n_buckets=3)
    n_words = len(TEXT.split())
    assert sum(r["tokens"] for r in rep["buckets"]) == n_words
    total_a, n = reference_cost(model_a, tmp_path / "text.txt")
    total_b, _ = reference_cost(model_b, tmp_path / "text.txt")
    assert math.isclose(rep["compare"]["ppl"], math.exp(total_b / n), rel_tol=1e-6)
    # bucket ce weighted by tokens = cost of the word targets; the <eos> targets make up the rest
    words_cost = sum(r["tokens"] * r["ce"] for r in rep["buckets"])
    assert words_cost < total_a
    for ra, rb, d in zip(rep["buckets"], rep["compare"]["buckets"], rep["compare"]["difference"]):
        assert math.isclose(d["ce_diff"], ra["ce"] - rb["ce"], abs_tol=1e-12)
    # the rarest bucket holds the words unseen in training
    assert rep["buckets"][0]["train_count_range"][0] == 0


def test_cli_json_table_png_and_errors(tmp_path):
    a, _ = make_ckpt(tmp_path, "a")
    b, _ = make_ckpt(tmp_path, "b", head="softmax", seed=1)
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    r = CliRunner().invoke(ppl_main, [str(a), str(tmp_path / "text.txt"), "--train-text",
                                      str(tmp_path / "train.txt"), "--compare", str(b),
                                      "--report", str(out_json), "--plot", str(out_png),
                                      "--buckets", "3", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    rep = json.loads(out_json.read_text())
    assert f"ppl {rep['ppl']:.2f}" in r.output and "diff" in r.output
    assert len(rep["compare"]["difference"]) == 3
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the chart's legend: model names from the configs (or --name), not directory names
    assert rep["name"].startswith("LSTM ") and rep["compare"]["name"].startswith("LSTM ")
    assert rep["name"] != rep["compare"]["name"] and rep["name"] in r.output
    r = CliRunner().invoke(ppl_main, [str(a), str(tmp_path / "text.txt"), "--train-text", str(tmp_path / "train.txt"),
                                      "--compare", str(b), "--name", "pointer", "--compare-name", "softmax",
                                      "--report", str(out_json), "--buckets", "3", "--device", "cpu"])
    assert r.exit_code == 0 and json.loads(out_json.read_text())["compare"]["name"] == "softmax"
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    r = subprocess.run([sys.executable, "-m", "rescore.cli.ppl", str(bad), str(tmp_path / "text.txt")],
                       capture_output=True, text=True, env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "bad.pt" in r.stderr
