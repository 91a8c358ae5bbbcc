"""tools/experiments/hf_int8.py on the tiny GPT-2 of tests/engine/test_hf.py and the small N-best
fixture: the rounded weights are within half a step of the originals, a tied input embedding stays
fp32, and the summary holds both schemes' cost differences and the product timings."""

from __future__ import annotations

import json

import pytest

from tests.conftest import NBEST_SMALL

pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")


def test_int8_rows_round_within_half_a_step():
    import torch

    from tools.experiments.hf_int8 import int8_rows

    w = torch.randn(40, 24) * torch.logspace(-3, 1, 40)[:, None]  # rows of very different ranges
    q, scale = int8_rows(w)
    assert q.dtype == torch.int8 and int(q.abs().max()) == 127
    assert bool(((q.float() * scale[:, None] - w).abs() <= scale[:, None] / 2 + 1e-7).all())


def test_summary_of_both_schemes(tmp_path):
    import torch

    from tests.engine.test_hf import build_tiny_gpt2
    from rescore.models.hf import load_hf
    from tools.experiments import hf_int8

    tiny = build_tiny_gpt2(tmp_path / "tiny")
    lm = load_hf(f"hf:{tiny}", torch.device("cpu"))
    embedding = lm.model.get_input_embeddings().weight.detach().clone()
    assert hf_int8.round_weights(lm.model) > 0
    assert torch.equal(lm.model.get_input_embeddings().weight, embedding)  # (tied to the output layer)
    assert not torch.equal(lm.model.get_output_embeddings().weight, embedding)
    out = tmp_path / "int8.json"
    hf_int8.main(["--model", f"hf:{tiny}", "--nbest-dir", str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"),
                  "--convs", "1", "--utts", "2", "--rows", "4", "--repeat", "1", "--json", str(out)])
    summary = json.loads(out.read_text())
    for scheme in ("weight", "dynamic"):
        d = summary["schemes"][scheme]
        assert d["hyps"] == summary["hyps"] > 0 and 0 < d["max_abs_per_hyp"] < 100
    assert set(summary["products"]["4"]) == {"fp32_s", "int8_weight_s", "int8_weight_bf16_act_s"}
