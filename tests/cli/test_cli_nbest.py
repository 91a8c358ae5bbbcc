"""rescore-nbest end to end: the README's first command, --params, errors, and the shared dev set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL, REPO_ROOT, shared_data_path
from rescore.cli.nbest import main


def test_readme_command_runs_as_a_module(tmp_path):
    # The README's first command, through `python -m` as a user (or the console script) runs it.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run([sys.executable, "-m", "rescore.cli.nbest", str(NBEST_SMALL), str(tmp_path / "exp"),
                        "--data-dir", str(NBEST_SMALL / "data"), "--inv-acwt", "10", "--weight", "0"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "%WER 9.52 [ 2 / 21" in r.stdout  # two 1-bests change at LMWT 10 (rank 1 was LMWT 12's choice)
    assert "rank-1 WER   19.05" in r.stdout
    for f in ("lmwt.interp", "text", "report.json", "report.txt"):
        assert (tmp_path / "exp" / f).is_file()


def test_params_file_and_command_line_override(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"weight": 0.0, "inv_acwt": 12.0, "wip": 0.0}))
    run = CliRunner().invoke
    r = run(main, [str(NBEST_SMALL), str(tmp_path / "a"), "--data-dir", str(NBEST_SMALL / "data"),
                   "--params", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "a" / "report.json").read_text())["params"]["inv_acwt"] == 12.0
    r = run(main, [str(NBEST_SMALL), str(tmp_path / "b"), "--data-dir", str(NBEST_SMALL / "data"),
                   "--params", str(tmp_path / "p.json"), "--inv-acwt", "10"])
    rep = json.loads((tmp_path / "b" / "report.json").read_text())
    assert rep["params"]["inv_acwt"] == 10.0 and rep["changed_utts"] == 2


def test_train_text_adds_buckets(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("the lobster is blue\nthe sea is long\nthe the the it is\n")
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "o"), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--train-text", str(train), "--inv-acwt", "10"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert len(rep["buckets"]) == 10
    assert sum(b["errors"] for b in rep["buckets"]) == rep["errors"]  # S + D + I per bucket
    assert all(set(b) >= {"ref_tokens", "errors", "wer", "insertions"} for b in rep["buckets"])
    assert (tmp_path / "o" / "buckets.png").is_file()
    # --no-plot (the Kaldi step's per-job runs): the same report, no chart
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "n"), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--train-text", str(train), "--inv-acwt", "10", "--no-plot"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "n" / "report.json").read_text())["buckets"] == rep["buckets"]
    assert not (tmp_path / "n" / "buckets.png").exists()
    assert "buckets.png" not in (tmp_path / "n" / "manifest.json").read_text()


def test_bad_input_exits_1_with_file_and_line(nbest_small, tmp_path):
    lines = (nbest_small / "acwt").read_text().splitlines(keepends=True)
    lines[3] = "rec1-rms-000-4 NaN \n"
    (nbest_small / "acwt").write_text("".join(lines))
    r = CliRunner().invoke(main, [str(nbest_small), str(tmp_path / "o"), "--data-dir", str(nbest_small / "data")])
    assert r.exit_code == 1
    assert f"error: {nbest_small / 'acwt'}:4: expected" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.shared_data
def test_shared_dev_reproduces_first_pass_and_oracle(tmp_path):
    d = shared_data_path("tts-wikitext2-dev")
    stats = json.loads((d / "stats.json").read_text())
    r = CliRunner().invoke(main, [str(d / "nbest"), str(tmp_path / "o"), "--data-dir", str(d / "data"),
                                  "--inv-acwt", "9.5", "--wip", "0", "--weight", "0"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert round(rep["wer"], 2) == 20.62 == round(stats["first_pass_wer"], 2)
    assert round(rep["oracle_wer"], 2) == 11.05 == stats["oracle_wer"]
    c = stats["first_pass_counts"]
    assert rep["errors"] == c["substitutions"] + c["deletions"] + c["insertions"] == 2293
    assert rep["ref_words"] == c["ref_words"] and rep["num_hyps"] == stats["n_hyps"]
    assert rep["changed_utts"] == 0  # the decoder's own weights keep rank 1 everywhere


def test_nn_costs_file_changes_the_choice(tmp_path):
    # An NN LM that strongly prefers each utterance's reference: at weight 1 the 1-best is the oracle.
    from rescore.io.kaldi import write_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    costs = {h.key: [0.0] * len(h.words) + [0.0 if h.words == s.refs[u.id] else 500.0]
             for u in s.utterances() for h in u.hyps}
    write_nn_costs(tmp_path / "lmwt.nn", costs)
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "o"), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--nn-costs", str(tmp_path / "lmwt.nn"), "--weight", "1", "--inv-acwt", "12"])
    assert r.exit_code == 0, r.output
    assert "%WER 0.00 [ 0 / 21" in r.output
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "p"), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--weight", "0.5"])
    assert r.exit_code == 2 and "NN LM costs" in r.output  # a usage error, before any work


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """An LSTM and a Transformer with different vocabularies (each misses other fixture words)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.nbest.sets import load_nbest_dir
    from rescore.vocab import Vocabulary

    d = tmp_path_factory.mktemp("models")
    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    words = sorted({w for u in s.utterances() for h in u.hyps for w in h.words})
    torch.manual_seed(0)
    lstm = build_model(ModelConfig(hidden=16, layers=1, dropout=0.0), Vocabulary(["<eos>", "<unk>"] + words[2:]))
    trf = build_model(ModelConfig(arch="transformer", hidden=16, layers=1, n_heads=2, context=16, dropout=0.0),
                      Vocabulary(["<eos>", "<unk>"] + words[:-2]))
    save_checkpoint(lstm, d / "a.pt")
    save_checkpoint(trf, d / "b.pt")
    return d / "a.pt", d / "b.pt"


def _run_models(out, models, *extra):
    args = [str(NBEST_SMALL), str(out), "--data-dir", str(NBEST_SMALL / "data"), "--device", "cpu",
            "--weight", "0.7", "--inv-acwt", "10", "--oov-penalty", "0", *extra]
    for m in models:
        args += ["--model", str(m)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r


def test_two_models_mix_the_single_model_costs(two_models, tmp_path):
    from rescore.io.kaldi import read_nn_costs

    a, b = two_models
    one = {}
    for name, m in (("a", a), ("b", b)):
        _run_models(tmp_path / name, [m], "--state-carry", "none")
        one[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    r = _run_models(tmp_path / "ab", [a, b], "--state-carry", "none", "--mix", "0.6,0.4")
    out = tmp_path / "ab"
    mixed = read_nn_costs(out / "lmwt.nn")
    assert list(mixed) == list(one["a"])
    for k, c in mixed.items():  # per token: the share-weighted sum of the single-model runs
        assert len(c) == len(one["a"][k])
        assert max(abs(x - (0.6 * y + 0.4 * z)) for x, y, z in zip(c, one["a"][k], one["b"][k])) < 1e-5
    assert read_nn_costs(out / "lmwt.nn.1") == one["a"] and read_nn_costs(out / "lmwt.nn.2") == one["b"]
    rep = json.loads((out / "report.json").read_text())
    assert rep["models"] == [str(a), str(b)] and rep["params"]["mix"] == [0.6, 0.4]
    assert f"{a} (0.6)" in r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"lmwt.nn", "lmwt.nn.1", "lmwt.nn.2"} <= {o["path"].rsplit("/", 1)[1] for o in manifest["outputs"]}
    # mix (1, 0): model A's 1-best
    _run_models(tmp_path / "a-only", [a, b], "--state-carry", "none", "--mix", "1,0")
    assert (tmp_path / "a-only" / "text").read_text() == (tmp_path / "a" / "text").read_text()
    # the cost files of that run, mixed again without the models: the same 1-best and lmwt.nn
    r = CliRunner().invoke(main, [str(NBEST_SMALL), str(tmp_path / "again"), "--data-dir", str(NBEST_SMALL / "data"),
                                  "--nn-costs", str(out / "lmwt.nn.1"), "--nn-costs", str(out / "lmwt.nn.2"),
                                  "--mix", "0.6,0.4", "--weight", "0.7", "--inv-acwt", "10"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "again" / "text").read_text() == (out / "text").read_text()
    assert read_nn_costs(tmp_path / "again" / "lmwt.nn") == mixed
    # a later one-model run into the same dir removes the per-model files of the older run
    _run_models(out, [a], "--state-carry", "none")
    assert not (out / "lmwt.nn.1").exists() and not (out / "lmwt.nn.2").exists()


def test_two_models_carry_each_by_its_own_cost(two_models, tmp_path):
    # --state-carry rescored --mix-carry own: model k carries from the best under fixed + w * l_k, so its costs
    # are those of a one-model run at the same weight.
    from rescore.io.kaldi import read_nn_costs

    a, b = two_models
    _run_models(tmp_path / "ab", [a, b], "--mix-carry", "own")  # equal shares by default
    for k, m in ((1, a), (2, b)):
        _run_models(tmp_path / f"m{k}", [m])
        got, want = read_nn_costs(tmp_path / "ab" / f"lmwt.nn.{k}"), read_nn_costs(tmp_path / f"m{k}" / "lmwt.nn")
        assert list(got) == list(want)
        assert max(abs(x - y) for key in got for x, y in zip(got[key], want[key])) < 1e-5
    assert json.loads((tmp_path / "ab" / "report.json").read_text())["params"]["mix"] == [0.5, 0.5]


def _max_diff(x, y):
    assert list(x) == list(y)
    return max(abs(p - q) for k in x for p, q in zip(x[k], y[k]))


def test_two_models_in_lockstep_carry_from_the_mixed_best(two_models, tmp_path):
    # --mix-carry mixed (the default): both models carry from the best by the mixed cost. At mix
    # (1, 0) that is model A's own best, so A's costs are a one-model run's and B's are not its
    # own run's; at (0, 1) the other way round. The fast and naive engines agree.
    from rescore.io.kaldi import read_nn_costs

    a, b = two_models
    one = {}
    for name, m in (("a", a), ("b", b)):
        _run_models(tmp_path / name, [m])
        one[name] = read_nn_costs(tmp_path / name / "lmwt.nn")
    # the two models pick different hypotheses to carry, so carrying one's choice changes the other
    assert (tmp_path / "a" / "text").read_text() != (tmp_path / "b" / "text").read_text()
    _run_models(tmp_path / "own", [a, b], "--mix-carry", "own", "--mix", "1,0")
    for mix, same, other in (("1,0", ("a", 1), ("b", 2)), ("0,1", ("b", 2), ("a", 1))):
        out = tmp_path / f"lock{mix[0]}"
        _run_models(out, [a, b], "--mix", mix)
        assert _max_diff(read_nn_costs(out / f"lmwt.nn.{same[1]}"), one[same[0]]) < 1e-5
        assert _max_diff(read_nn_costs(out / f"lmwt.nn.{other[1]}"), one[other[0]]) > 1e-5
        assert (out / "text").read_text() == (tmp_path / same[0] / "text").read_text()
    # own carry at (1, 0): B carries from its own best, so its costs are its one-model run's
    assert _max_diff(read_nn_costs(tmp_path / "own" / "lmwt.nn.2"), one["b"]) < 1e-5
    runs = {}
    for engine in ("fast", "naive"):
        _run_models(tmp_path / engine, [a, b], "--mix", "0.5,0.5", "--engine", engine)
        runs[engine] = [read_nn_costs(tmp_path / engine / f"lmwt.nn.{k}") for k in (1, 2)]
    assert all(_max_diff(f, n) < 1e-4 for f, n in zip(runs["fast"], runs["naive"]))
    assert (tmp_path / "fast" / "text").read_text() == (tmp_path / "naive" / "text").read_text()


# --------------------------------------------------------------------------------------------
# Finite inputs whose combination overflows: an error naming the file, the line and the key


def _set_value(path, line, value):
    """Replace the cost on ``line`` (1-based) of a 'key cost' archive."""
    lines = path.read_text().splitlines()
    key = lines[line - 1].split()[0]
    lines[line - 1] = f"{key} {value} "
    path.write_text("\n".join(lines) + "\n")
    return key


def _copy_nbest(tmp_path):
    import shutil

    shutil.copytree(NBEST_SMALL, tmp_path / "nb")
    return tmp_path / "nb"


@pytest.mark.parametrize("archive, line, value, options, names", [
    # ac / inv_acwt: an acoustic cost near the float limit over a small inverse scale
    ("acwt", 3, "1.7e308", ["--inv-acwt", "0.5"], ["ac / inv_acwt", "inv_acwt 0.5"]),
    # withlm - nolm: two finite graph costs whose difference is not (also the graph cost)
    ("lmwt.withlm", 2, "1.7e308", [], ["withlm - nolm"]),
    # a word insertion penalty times the hypothesis' words
    ("words_text", 1, None, ["--wip", "1e308"], ["wip * words"]),
])
def test_overflow_is_an_error_naming_file_line_and_key(tmp_path, archive, line, value, options, names):
    nb = _copy_nbest(tmp_path)
    key = (nb / archive).read_text().splitlines()[line - 1].split()[0]
    if value is not None:
        _set_value(nb / archive, line, value)
    if archive == "lmwt.withlm":
        _set_value(nb / "lmwt.nolm", line, "-1.7e308")
    r = CliRunner().invoke(main, [str(nb), str(tmp_path / "out"), "--data-dir", str(nb / "data"), *options])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # no traceback
    assert f"error: {nb / archive}:{line}: expected costs whose" in r.output and f"'{key}'" in r.output
    assert all(n in r.output for n in names), r.output
    assert not (tmp_path / "out" / "text").exists() and not (tmp_path / "out" / "lmwt.interp").exists()


def test_overflow_of_nn_lm_costs_names_the_cost_file(tmp_path):
    from rescore.io.kaldi import read_nn_costs, write_nn_costs
    from rescore.nbest.sets import load_nbest_dir

    s = load_nbest_dir(NBEST_SMALL)
    costs = {h.key: [1.0] * (len(h.words) + 1) for u in s.utterances() for h in u.hyps}
    keys = list(costs)
    base = [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"), "--weight", "0.5"]
    # per-token costs, each finite, whose sum is not
    costs[keys[4]] = [1.7e308, 1.7e308] + [1.0] * (len(costs[keys[4]]) - 2)
    write_nn_costs(tmp_path / "sum.nn", costs)
    assert read_nn_costs(tmp_path / "sum.nn")[keys[4]][0] == 1.7e308  # the file itself reads
    r = CliRunner().invoke(main, [base[0], str(tmp_path / "a"), *base[1:], "--nn-costs", str(tmp_path / "sum.nn")])
    assert r.exit_code == 1 and f"error: {tmp_path / 'sum.nn'}:5: expected NN LM costs whose sum stays finite" \
        in r.output and f"'{keys[4]}'" in r.output, r.output
    # a finite NN LM total plus a finite fixed cost: the NN term is the biggest, so its file is named
    costs[keys[4]] = [1.7e308] + [0.0] * (len(costs[keys[4]]) - 1)
    write_nn_costs(tmp_path / "big.nn", costs)
    nb = _copy_nbest(tmp_path)
    _set_value(nb / "acwt", 5, "1e308")
    r = CliRunner().invoke(main, [str(nb), str(tmp_path / "b"), "--data-dir", str(nb / "data"), "--weight", "1",
                                  "--inv-acwt", "1", "--nn-costs", str(tmp_path / "big.nn")])
    assert r.exit_code == 1 and "expected costs whose interpolated cost stays finite" in r.output, r.output
    assert f"error: {tmp_path / 'big.nn'}:5:" in r.output and f"'{keys[4]}'" in r.output, r.output
    assert not (tmp_path / "b" / "text").exists()


def test_tune_grid_that_overflows_is_an_error(tmp_path):
    from rescore.cli.tune import main as tune_main

    nb = _copy_nbest(tmp_path)
    key = _set_value(nb / "acwt", 1, "1.7e308")
    r = CliRunner().invoke(tune_main, [str(nb), "--data-dir", str(nb / "data"), "--inv-acwts", "0.5,10",
                                       "--wips", "0"])
    assert r.exit_code == 1 and f"error: {nb / 'acwt'}:1: expected costs whose" in r.output, r.output
    assert f"'{key}'" in r.output and "inv_acwt 0.5" in r.output


def test_engine_options_are_the_settings_fields():
    # every engine setting is an option, its help and default those of rescore.settings (the
    # OOV penalty's default reads as the rule the job applies)
    from dataclasses import fields

    from rescore.settings import OOV_AUTO, EngineSettings, option_name

    r = CliRunner().invoke(main, ["--help"], terminal_width=2000)
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for f in fields(EngineSettings):
        assert option_name(f.name) in text and " ".join(f.metadata["help"].split()) in text, f.name
        shown = f.metadata["show_default"] if f.metadata["show_default"] is not None else f.default
        assert f"[default: {shown}]" in text or f"[default: {shown};" in text, f.name  # (';': its range)
    assert f"[default: {OOV_AUTO} with --train-text or a words.txt, else 0]" in text


def test_overflow_is_found_before_a_model_scores(two_models, tmp_path):
    # the fixed costs the engine carries by are checked first: no scoring, no lmwt.nn left
    nb = _copy_nbest(tmp_path)
    key = _set_value(nb / "acwt", 3, "1.7e308")
    r = CliRunner().invoke(main, [str(nb), str(tmp_path / "out"), "--data-dir", str(nb / "data"), "--device", "cpu",
                                  "--model", str(two_models[0]), "--inv-acwt", "0.5", "--oov-penalty", "0"])
    assert r.exit_code == 1 and f"error: {nb / 'acwt'}:3: expected costs whose fixed cost stays finite" in r.output
    assert f"'{key}'" in r.output and "scoring" not in r.output
    assert not (tmp_path / "out" / "lmwt.nn").exists()
