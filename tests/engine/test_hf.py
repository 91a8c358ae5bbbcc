"""Hugging Face causal LMs as the NN LM (rescore.models.hf, rescore.engine.hf): a tiny GPT-2 and a
byte-level BPE tokenizer trained here on the LM text, saved with save_pretrained; nothing
downloaded. The prefix-sharing engine must give the naive per-hypothesis forward's costs."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from tests.conftest import NBEST_SMALL, SHARED_DATA, shared_data_path

transformers = pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="the hf extra (tokenizers) is not installed")

from rescore.engine import hf as hf_engine  # noqa: E402
from rescore.engine.score import UttInput, score_nbest  # noqa: E402
from rescore.errors import RescoreError  # noqa: E402
from rescore.models.hf import HfLM, load_hf  # noqa: E402

from tools.bench import bench_hf  # noqa: E402

EOT = "<|endoftext|>"
FALLBACK_TEXT = ["it is closely related to the american lobster", "the cat sat on the mat",
                 "a man was seen in the city", "there is a house in new orleans"] * 50


def _train_lines(n=3000):
    p = SHARED_DATA / "wikitext2-asr" / "train.txt"
    if not p.exists():
        return FALLBACK_TEXT
    with open(p, encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, n) if line.strip()]


def build_tiny_gpt2(out_dir):
    """A 2-layer, 32-dim GPT-2 (weights sharper than the initial ones, so the costs differ between
    words) and a ~500-token byte-level BPE trained on the LM text, saved with save_pretrained."""
    return bench_hf.save_random_gpt2(out_dir, _train_lines(), vocab=500, layers=2, dim=32, heads=2,
                                     positions=256, scale=4.0)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_gpt2(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_hf(f"hf:{tiny_dir}", torch.device("cpu"), context=64)


def _toy_conversations(seed=0, n_conv=3, n_utt=4):
    rng = random.Random(seed)
    words = "the a cat dog sat on mat house new orleans lobster american related closely is it".split()
    convs = []
    for _ in range(n_conv):
        utts = []
        for _ in range(n_utt):
            base = [rng.choice(words) for _ in range(rng.randint(3, 9))]
            hyps = []
            for _ in range(rng.randint(1, 12)):  # shared prefixes, edits near the end, duplicates
                h = list(base)
                if h and rng.random() < 0.8:
                    h[rng.randrange(len(h))] = rng.choice(words)
                if rng.random() < 0.3:
                    h = h[:rng.randint(0, len(h))]
                hyps.append(h)
            utts.append(UttInput(hyps, [rng.uniform(0, 20) for _ in hyps]))
        convs.append(utts)
    convs[0].insert(1, UttInput([], []))  # an utterance without hypotheses: nothing carried from it
    return convs


@pytest.fixture(scope="module")
def dev_conversations():
    return _dev_conversations()


def _dev_conversations(n_conv=3, n_utt=3, n_hyps=20):
    """The first n_hyps hypotheses of the first utterances of the first conversations of the dev set."""
    d = shared_data_path("tts-wikitext2-dev")
    from rescore.nbest.combine import fixed_cost
    from rescore.nbest.sets import load_nbest_dir

    nbest = load_nbest_dir(d / "nbest", d / "data", d / "lang" / "words.txt")
    return [[UttInput([h.words for h in u.hyps[:n_hyps]], [fixed_cost(h, 0.5, 9.5, 0.0) for h in u.hyps[:n_hyps]])
             for u in c.utterances[:n_utt]] for c in nbest.conversations[:n_conv]]


def _assert_close(a, b, tol=1e-4):
    for ca, cb in zip(a, b, strict=True):
        for ua, ub in zip(ca, cb, strict=True):
            for ha, hb in zip(ua, ub, strict=True):
                assert len(ha) == len(hb)
                assert abs(sum(ha) - sum(hb)) <= tol, (sum(ha), sum(hb))
                assert max(abs(x - y) for x, y in zip(ha, hb)) <= tol


def _score(lm, convs, **kw):
    kw.setdefault("weight", 0.5)
    return score_nbest(lm, convs, device="cpu", progress=False, **kw)


@pytest.mark.parametrize("carry", ["none", "rescored", "first-pass"])
def test_fast_equals_naive_on_toy_nbest(tiny, carry):
    convs = _toy_conversations()
    naive = _score(tiny, convs, engine="naive", state_carry=carry)
    _assert_close(_score(tiny, convs, engine="fast", state_carry=carry, conv_batch=2), naive)
    _assert_close(_score(tiny, convs, engine="padded", state_carry=carry), naive)
    # small calls: tries cut into parts, one row per call
    _assert_close(_score(tiny, convs, engine="fast", state_carry=carry, max_tokens=70), naive)


def test_eager_attention_takes_the_tree_mask(tiny_dir, monkeypatch):
    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=64)
    lm.model.set_attn_implementation("eager")  # (models without sdpa): an additive float mask
    monkeypatch.setattr(hf_engine, "TREE_ATTENTION_TYPES", ())  # a model type without tree attention
    convs = _toy_conversations(seed=4, n_conv=2, n_utt=3)
    _assert_close(_score(lm, convs, engine="fast"), _score(lm, convs, engine="naive"))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("block", [64, 3])
def test_tree_attention_is_used_and_equals_the_dense_mask(tiny_dir, monkeypatch, impl, block):
    """The fast engine's calls run under tree attention (blocks of rows reading only their nodes'
    ancestors), with several blocks per call where TREE_BLOCK is small; the costs are those of the
    dense tree mask and of the naive engine; the model's own attention is back after the call."""
    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=64)
    lm.model.set_attn_implementation(impl)
    monkeypatch.setattr(hf_engine, "TREE_BLOCK", block)
    calls = []
    real = hf_engine._tree_attention

    def spy(*args, **kw):
        calls.append(len(hf_engine._TREE.get()))
        return real(*args, **kw)

    monkeypatch.setattr(hf_engine, "_tree_attention", spy)
    monkeypatch.setattr(hf_engine, "_TREE_NAME", f"rescore_tree_test_{impl}_{block}")  # registers the spy
    convs = _toy_conversations(seed=5, n_conv=2, n_utt=4)
    tree = _score(lm, convs, engine="fast", state_carry="rescored")
    assert calls and (block == 64 or max(calls) > 1)
    assert lm.model.config._attn_implementation == impl
    monkeypatch.setattr(hf_engine, "TREE_ATTENTION_TYPES", ())
    _assert_close(tree, _score(lm, convs, engine="fast", state_carry="rescored"))
    _assert_close(tree, _score(lm, convs, engine="naive", state_carry="rescored"))


@pytest.mark.parametrize("carry", ["rescored", "first-pass"])
def test_the_carry_takes_the_trie_calls_keys_and_values(tiny_dir, monkeypatch, carry):
    """Where the window does not slide, the carried tokens (the context's last token, the chosen
    hypothesis) are not run again: every forward is a trie call; costs as the naive engine's."""
    from rescore.engine.types import EngineStats

    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=250)
    trie_calls = []
    real = hf_engine._kv_call
    monkeypatch.setattr(hf_engine, "_kv_call", lambda *a: trie_calls.append(1) or real(*a))
    convs = _toy_conversations(seed=6, n_conv=2, n_utt=4)
    stats = EngineStats()
    fast = _score(lm, convs, engine="fast", state_carry=carry, stats=stats, max_tokens=40)
    assert stats.calls == len(trie_calls) > len(convs)
    _assert_close(fast, _score(lm, convs, engine="naive", state_carry=carry))


def test_the_window_slides_a_quarter_at_a_time(tiny_dir, monkeypatch):
    """Past --hf-context the carried stream keeps the last three quarters of the window, so the
    context starts at the same token for the next utterances: the fast engine rebuilds its cache
    of the context once per slide, not after every utterance; costs as the naive engine's."""
    from rescore.engine.types import EngineStats

    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=24)
    stream = [lm.bos_id]
    lengths = []
    for n in [5, 9, 3, 7, 11, 4, 6, 30, 2]:
        stream = hf_engine._slide(lm, stream + [7] * n + [lm.eos_id])
        lengths.append(len(stream))
    assert max(lengths) <= 24 and min(lengths[4:]) >= 18, lengths
    trie_calls = []
    real = hf_engine._kv_call
    monkeypatch.setattr(hf_engine, "_kv_call", lambda *a: trie_calls.append(1) or real(*a))
    convs = _toy_conversations(seed=8, n_conv=1, n_utt=12)
    stats = EngineStats()
    fast = _score(lm, convs, engine="fast", state_carry="rescored", stats=stats)
    rebuilds = stats.calls - len(trie_calls)
    assert 1 <= rebuilds <= (len(convs[0]) - 1) // 2, rebuilds
    _assert_close(fast, _score(lm, convs, engine="naive", state_carry="rescored"))


def test_output_layer_in_slices_equals_the_whole_logits(tiny, monkeypatch):
    """On a CPU the output layer runs over HEAD_COLUMNS vocabulary entries at a time from the last
    hidden states; the costs are those of the model's own logits."""
    convs = _toy_conversations(seed=7, n_conv=2, n_utt=3)
    monkeypatch.setattr(hf_engine, "HEAD_COLUMNS", 37)  # several slices, the last one short
    sliced = _score(tiny, convs, engine="fast", state_carry="rescored")
    monkeypatch.setattr(hf_engine, "PLAIN_HEAD_TYPES", ())
    _assert_close(sliced, _score(tiny, convs, engine="fast", state_carry="rescored"), tol=1e-5)


@pytest.mark.parametrize("carry", ["none", "rescored"])
def test_fast_equals_naive_on_dev_nbest(tiny, carry, dev_conversations):
    convs = dev_conversations
    _assert_close(_score(tiny, convs, engine="fast", state_carry=carry),
                  _score(tiny, convs, engine="naive", state_carry=carry))


def test_costs_are_word_aligned_and_sum_to_the_sentence(tiny):
    convs = _toy_conversations(seed=1, n_conv=1, n_utt=2)
    got = _score(tiny, convs, engine="fast", state_carry="none")
    eos = tiny.eos_id
    for utt, costs in zip(convs[0], got[0]):
        for words, c in zip(utt.hyps, costs):
            assert len(c) == len(words) + 1
            ids, _ = tiny.encode(words)
            # the whole sentence from scratch, by the model itself
            seq = torch.tensor([[tiny.bos_id] + ids + [eos]])
            lp = tiny.model(input_ids=seq).logits[0, :-1].log_softmax(-1)
            total = -lp[torch.arange(len(ids) + 1), seq[0, 1:]].sum().item()
            assert abs(sum(c) - total) < 1e-4
            # the pieces of a word are those of " " + word, without special tokens
            for w in words:
                assert tiny.word_pieces(w) == tuple(tiny.tokenizer(" " + w, add_special_tokens=False)["input_ids"])


def test_word_pieces_join_to_the_sentence_tokens(tiny):
    words = ["it", "is", "closely", "related", "to", "the", "american", "lobster"]
    assert tiny.space == " "  # byte-level BPE: every word with its leading space
    ids, lens = tiny.encode(words)
    assert ids == tiny.tokenizer(" " + " ".join(words), add_special_tokens=False)["input_ids"]
    assert sum(lens) == len(ids) and min(lens) >= 1 and max(lens) > 1  # some words are several pieces
    # a SentencePiece-style tokenizer marks the word start itself: no lone space piece
    sp = tokenizers.SentencePieceBPETokenizer()
    sp.train_from_iterator(_train_lines(1000), vocab_size=300, special_tokens=[EOT], show_progress=False)
    sp_lm = HfLM(tiny.model, transformers.PreTrainedTokenizerFast(tokenizer_object=sp._tokenizer, eos_token=EOT),
                 "sp")
    assert sp_lm.space == ""
    for w in words:
        pieces = sp_lm.tokenizer.convert_ids_to_tokens(list(sp_lm.word_pieces(w)))
        assert pieces[0].startswith("\u2581") and pieces[0] != "\u2581", pieces
    assert sp_lm.encode(words)[0] == sp_lm.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]


def test_carry_changes_costs_and_resets_per_conversation(tiny):
    convs = _toy_conversations(seed=2, n_conv=2, n_utt=3)
    none = _score(tiny, convs, engine="fast", state_carry="none")
    carried = _score(tiny, convs, engine="fast", state_carry="rescored")
    for c in range(2):  # the first utterance of every conversation starts from <bos>
        _assert_close([[none[c][0]]], [[carried[c][0]]], tol=1e-5)
    for c, u in ((0, 2), (1, 1)):  # later utterances see the earlier best hypotheses
        assert any(abs(sum(a) - sum(b)) > 1e-3 for a, b in zip(none[c][u], carried[c][u]))


def test_context_is_bounded(tiny_dir, tiny):
    convs = _toy_conversations(seed=3, n_conv=1, n_utt=4)
    one = load_hf(str(tiny_dir), torch.device("cpu"), context=1)  # the boundary token only: no carry
    _assert_close(_score(one, convs, engine="fast", state_carry="rescored"),
                  _score(one, convs, engine="naive", state_carry="none"))
    short = load_hf(str(tiny_dir), torch.device("cpu"), context=5)
    _assert_close(_score(short, convs, engine="fast", state_carry="rescored"),
                  _score(short, convs, engine="naive", state_carry="rescored"))
    # a hypothesis near the model's positions leaves room for a shorter context only
    per_word = len(tiny.encode(["lobster"])[0])
    convs[0][3].hyps[0] = ["lobster"] * ((tiny.max_positions - 3) // per_word)
    _assert_close(_score(tiny, convs, engine="fast", state_carry="rescored"),
                  _score(tiny, convs, engine="naive", state_carry="rescored"))


def test_missing_dir_and_missing_tokenizer_are_clean_errors(tmp_path, tiny_dir):
    with pytest.raises(RescoreError, match="no such directory"):
        load_hf(f"hf:{tmp_path / 'absent'}", torch.device("cpu"))
    model_only = tmp_path / "model-only"
    transformers.GPT2LMHeadModel.from_pretrained(str(tiny_dir)).save_pretrained(model_only)
    with pytest.raises(RescoreError, match="a tokenizer"):
        load_hf(f"hf:{model_only}", torch.device("cpu"))
    (model_only / "config.json").unlink()
    with pytest.raises(RescoreError, match="config.json"):
        load_hf(f"hf:{model_only}", torch.device("cpu"))


def test_unsupported_options_are_refused(tiny):
    convs = _toy_conversations(n_conv=1, n_utt=1)
    for kw in ({"oov_penalty": 1.0}, {"normalize": "none"}, {"schedule": "levels"}, {"precision": "fp8"},
               {"engine": "tree"}, {"max_tokens": 0}, {"history_min_posterior": 0.5}):
        with pytest.raises(RescoreError):
            _score(tiny, convs, **kw)
    too_long = [[UttInput([["lobster"] * tiny.max_positions], [0.0])]]
    with pytest.raises(RescoreError, match="positions"):
        _score(tiny, too_long)


def test_cli_end_to_end(tiny_dir, tmp_path, caplog):
    import logging

    from click.testing import CliRunner

    from rescore.cli.nbest import main

    out = tmp_path / "o"
    caplog.set_level(logging.INFO)
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(out), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--model", f"hf:{tiny_dir}", "--hf-context", "32", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    lines = (out / "lmwt.nn").read_text().splitlines()
    words = {k: rest for k, *rest in (line.split() for line in (NBEST_SMALL / "words_text").read_text().splitlines())}
    assert sorted(line.split()[0] for line in lines) == sorted(words)
    for line in lines:  # word-aligned: one cost per word and the end of sentence
        key, *costs = line.split()
        assert len(costs) == len(words[key]) + 1 and all(float(c) > 0 for c in costs)
    assert (out / "text").exists() and (out / "report.json").exists()
    # NBEST_SMALL has a words.txt: the OOV penalty defaults to auto, 0 for an hf: model, and the
    # vocabulary check (no word vocabulary) leaves it out
    assert "OOV penalty (auto): 0 for hf:" in caplog.text and "a subword LM (no word vocabulary)" in caplog.text
    assert json.loads((out / "report.json").read_text())["input_checks"]["vocabulary"] == []
    zero = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "z"), "--data-dir", str(NBEST_SMALL / "data"),
                                     "--model", f"hf:{tiny_dir}", "--hf-context", "32", "--device", "cpu",
                                     "--oov-penalty", "0"])
    assert zero.exit_code == 0 and (tmp_path / "z" / "lmwt.nn").read_text() == (out / "lmwt.nn").read_text()
    bad = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "p"), "--data-dir", str(NBEST_SMALL / "data"),
                                    "--model", f"hf:{tmp_path / 'absent'}", "--device", "cpu"])
    assert bad.exit_code == 1 and "no such directory" in bad.output and "Traceback" not in bad.output
    two = ["--model", f"hf:{tiny_dir}", "--model", f"hf:{tiny_dir}", "--hf-context", "32", "--device", "cpu"]
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "two"), "--data-dir", str(NBEST_SMALL / "data"),
                                  *two, "--mix-carry", "own"])
    assert r.exit_code == 0, r.output  # two models, each carrying from its own best: each as alone
    for k in (1, 2):
        assert (tmp_path / "two" / f"lmwt.nn.{k}").read_text() == (out / "lmwt.nn").read_text()
    for opts, name in ((["--hf-context", "0"], "--hf-context"), (["--oov-penalty", "1"], "--oov-penalty"),
                       (["--cache-window", "10"], "--cache-window"), (two[2:4], "--mix-carry"),
                       (["--history-min-posterior", "0.5"], "--history-min-posterior")):  # bad: exit 2
        r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "q"), "--model", f"hf:{tiny_dir}", *opts])
        assert r.exit_code == 2 and name in r.output and "Traceback" not in r.output, r.output


def test_vocabulary_check_leaves_hf_models_out(tiny_dir):
    from rescore.nbest.sets import load_nbest_dir
    from rescore.nbest.checks import check_nbest_input

    nbest = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    checks = check_nbest_input(nbest, [f"hf:{tiny_dir}"])
    assert checks.vocabulary == [] and checks.warnings == []


def test_refining_tune_scores_with_an_hf_model(tiny_dir):
    from click.testing import CliRunner

    from rescore.cli.tune import main

    r = CliRunner().invoke(main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--refine-model", f"hf:{tiny_dir}", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "refined" in r.output and "costs scored at this setting" in r.output


def _side_by_side(monkeypatch):
    """The fast engine's calls as on a GPU: the tries of several conversations in one call."""
    monkeypatch.setattr(hf_engine, "SIDE_BY_SIDE_DEVICES", ("cpu", "cuda"))
    rows = []
    real = hf_engine._Runner.log_probs

    def spy(self, ids, *a, **kw):
        rows.append(tuple(ids.shape))
        return real(self, ids, *a, **kw)

    monkeypatch.setattr(hf_engine._Runner, "log_probs", spy)
    return rows


@pytest.mark.parametrize("carry", ["none", "rescored", "first-pass"])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_conversations_side_by_side_equal_one_at_a_time(tiny_dir, monkeypatch, carry, impl):
    """On a GPU the tries of several conversations' current utterances share a call (each row
    after its own conversation's cached context, contexts of different lengths left-padded);
    the costs are those of one conversation at a time and of the naive engine. A conversation
    whose first utterances have no hypotheses starts with an empty cache beside carried ones."""
    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=64)
    lm.model.set_attn_implementation(impl)
    convs = _toy_conversations(seed=9, n_conv=4, n_utt=4)
    convs[2].insert(0, UttInput([], []))
    convs[2].insert(0, UttInput([], []))
    one = _score(lm, convs, engine="fast", state_carry=carry)
    naive = _score(lm, convs, engine="naive", state_carry=carry)
    rows = _side_by_side(monkeypatch)
    for max_tokens in (2048, 70):  # every part of a wave in one call; tries cut, calls of a few rows
        batched = _score(lm, convs, engine="fast", state_carry=carry, max_tokens=max_tokens)
        _assert_close(batched, one)
        _assert_close(batched, naive)
        assert max(B for B, _ in rows) >= 3, rows
        assert all(B * L <= max_tokens for B, L in rows if B > 1), rows  # (one part may be bigger)
        rows.clear()


def test_side_by_side_on_dev_nbest(tiny, monkeypatch, dev_conversations):
    one = _score(tiny, dev_conversations, engine="fast", state_carry="rescored")
    rows = _side_by_side(monkeypatch)
    _assert_close(_score(tiny, dev_conversations, engine="fast", state_carry="rescored", max_tokens=1024), one)
    assert max(B for B, _ in rows) >= 2 and all(B * L <= 1024 for B, L in rows if B > 1)


def _fake_oom(lm, monkeypatch, most_tokens):
    """Calls of more than ``most_tokens`` token positions fail as CUDA's allocator does, in the
    model's second block (after the first has extended the KV cache)."""
    calls = []

    def hook(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        calls.append(x.shape[0] * x.shape[1])
        if x.shape[0] * x.shape[1] > most_tokens:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test's)")

    handle = lm.model.transformer.h[1].register_forward_pre_hook(hook, with_kwargs=True)
    return calls, handle


@pytest.mark.parametrize("side_by_side", [False, True])
def test_out_of_memory_halves_the_budget_and_costs_stay(tiny_dir, monkeypatch, caplog, side_by_side):
    """An out-of-memory error in a call halves --max-tokens and the wave is scored again: the
    costs are those of a run that never ran out, the back-offs counted and logged; the budget
    stays halved for the rest of the run."""
    import logging

    from rescore.engine.types import EngineStats

    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=64)
    convs = _toy_conversations(seed=10, n_conv=4, n_utt=4)
    reference = _score(lm, convs, engine="fast", state_carry="rescored")
    # the fewest positions a call can hold: one hypothesis after the context's last token
    most = 1 + max(len(lm.encode(h)[0]) for c in convs for u in c for h in u.hyps)
    if side_by_side:
        _side_by_side(monkeypatch)
        most *= 3
    calls, handle = _fake_oom(lm, monkeypatch, most_tokens=most)
    stats = EngineStats()
    caplog.set_level(logging.WARNING)
    try:
        got = _score(lm, convs, engine="fast", state_carry="rescored", max_tokens=512, stats=stats)
    finally:
        handle.remove()
    _assert_close(got, reference)
    assert stats.oom_backoffs >= 2 and "out of memory" in caplog.text
    assert max(calls) > most  # it did run out, and then went on with smaller calls
    assert sum(n > most for n in calls) == stats.oom_backoffs


def test_out_of_memory_on_the_smallest_call_and_other_errors_are_raised(tiny_dir):
    lm = load_hf(str(tiny_dir), torch.device("cpu"), context=64)
    convs = _toy_conversations(seed=10, n_conv=1, n_utt=1)
    _, handle = _fake_oom(lm, None, most_tokens=0)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            _score(lm, convs, engine="fast", state_carry="rescored")
    finally:
        handle.remove()

    def broken(module, args, kwargs):
        raise RuntimeError("a shape mismatch")

    handle = lm.model.transformer.h[1].register_forward_pre_hook(broken, with_kwargs=True)
    try:
        with pytest.raises(RuntimeError, match="shape mismatch"):
            _score(lm, convs, engine="fast", state_carry="rescored")
    finally:
        handle.remove()
