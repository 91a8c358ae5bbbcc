"""rescore-nbest --jobs A:B (rescore.jobs.nbest.nbest_jobs, rescore_nbest_jobs): Kaldi's jobs in one
process give each job's OUT_DIR what a run of its own writes (costs to float rounding, the same
1-best), its option errors, and a bad job that fails the run with nothing written."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL
from rescore.cli.nbest import main as nbest_main
from rescore.io.kaldi import read_nn_costs, read_table
from rescore.io.outdir import read_manifest
from rescore.jobs.nbest import JOB_PATHS, job_path, parse_jobs

TOL = 1e-4  # per hypothesis, as the engine's tests: other batches, other float rounding
WORDS = [ln.split()[0] for ln in (NBEST_SMALL / "words.txt").read_text().splitlines()][1:]  # (no <eps>)


def make_jobs(root: Path, convs=(2, 1, 3), seed=0, one_conversation=False) -> Path:
    """A generated Kaldi job set under root: archives.JOB/ (words_text, acwt, lmwt.withlm,
    lmwt.nolm), data/JOB/ (text; segments and utt2spk, or with one_conversation every utterance
    of a job as one speaker and no segments, as the step's --carry-scope job) and lang/words.txt;
    job k has convs[k-1] recordings of 2-4 utterances of 2-5 hypotheses each."""
    rng = random.Random(seed)
    (root / "lang").mkdir(parents=True)
    shutil.copy(NBEST_SMALL / "words.txt", root / "lang" / "words.txt")
    for k, n_convs in enumerate(convs, 1):
        files = {n: [] for n in ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm", "text", "segments", "utt2spk")}
        for c in range(n_convs):
            rec, t = f"rec{k}{c}", 0.0
            for u in range(rng.randint(2, 4)):
                utt = f"{rec}-spk-{u:03d}"
                ref = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
                files["text"].append(f"{utt} {' '.join(ref)}\n")
                files["segments"].append(f"{utt} {rec} {t:.2f} {t + 2:.2f}\n")
                files["utt2spk"].append(f"{utt} {f'job{k}' if one_conversation else rec + '-spk'}\n")
                t += 2
                for h in range(1, rng.randint(2, 5) + 1):
                    words = [w if rng.random() < 0.7 else rng.choice(WORDS) for w in ref]
                    words = words[:rng.randint(1, len(words))] if rng.random() < 0.2 else words
                    nolm = rng.uniform(0.5, 1.5)
                    files["words_text"].append(f"{utt}-{h} {' '.join(words)}\n")
                    files["acwt"].append(f"{utt}-{h} {rng.uniform(500, 900):.2f} \n")
                    files["lmwt.nolm"].append(f"{utt}-{h} {nolm:.3f} \n")
                    files["lmwt.withlm"].append(f"{utt}-{h} {nolm + rng.uniform(15, 30):.3f} \n")
        a, d = root / f"archives.{k}", root / "data" / str(k)
        a.mkdir()
        d.mkdir(parents=True)
        for name, lines in files.items():
            if name in ("text", "segments", "utt2spk"):
                if name != "segments" or not one_conversation:
                    (d / name).write_text("".join(sorted(lines)))
            else:
                (a / name).write_text("".join(lines))
    return root


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random LSTM over the fixture's words but two (out of its vocabulary)."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "lstm.pt"
    save_checkpoint(build_model(ModelConfig(hidden=16, layers=1, dropout=0.0),
                                Vocabulary(["<eos>", "<unk>"] + WORDS[2:])).eval(), path)
    return path


def _nbest(args):
    return CliRunner().invoke(nbest_main, [str(a) for a in args])


def _common(model, *extra):
    return ["--model", model, "--device", "cpu", "--weight", "0.6", "--inv-acwt", "10", *extra]


def _job_args(root, out="archives.JOB", data="data/JOB"):
    return [root / "archives.JOB", root / out, "--data-dir", root / data]


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_costs(a: Path, b: Path) -> None:
    ca, cb = read_nn_costs(a), read_nn_costs(b)
    assert list(ca) == list(cb)
    for key in ca:
        assert len(ca[key]) == len(cb[key]), key
        assert abs(sum(ca[key]) - sum(cb[key])) < TOL, key
        assert max(abs(x - y) for x, y in zip(ca[key], cb[key])) < TOL, key


@pytest.mark.parametrize("carry", ["rescored", "first-pass", "none"])
def test_jobs_write_what_separate_runs_write(tmp_path, model, carry):
    """Three jobs in one process against one run per job: every output of each job's dir, the
    NN costs within TOL per hypothesis, the same 1-best. first-pass as the step's --carry kaldi
    (one conversation per job)."""
    root = make_jobs(tmp_path / "set", one_conversation=carry == "first-pass")
    opts = _common(model, "--state-carry", carry)
    r = _nbest(_job_args(root) + ["--jobs", "1:3"] + opts)
    assert r.exit_code == 0, r.output
    for k in (1, 2, 3):
        assert f"job {k} ({root / f'archives.{k}'}):" in r.output
        sep = tmp_path / f"sep.{k}"
        one = _nbest([root / f"archives.{k}", sep, "--data-dir", root / "data" / str(k)] + opts)
        assert one.exit_code == 0, one.output
        a = root / f"archives.{k}"
        assert (a / "text").read_text() == (sep / "text").read_text()
        _same_costs(a / "lmwt.nn", sep / "lmwt.nn")
        got, want = read_table(a / "lmwt.interp", "float").as_dict(), read_table(sep / "lmwt.interp", "float").as_dict()
        assert list(got) == list(want) and all(abs(got[h] - want[h]) < TOL for h in got)
        rj, sj = (json.loads((d / "report.json").read_text()) for d in (a, sep))
        assert (rj["wer"], rj["errors"], rj["num_hyps"], rj["nbest_dir"]) == (sj["wer"], sj["errors"], sj["num_hyps"],
                                                                              str(a)), rj
        m = read_manifest(a)
        assert m["complete"] is True and m["settings"]["nbest_dir"] == str(a)
        assert m["settings"]["data_dir"] == str(root / "data" / str(k))
        assert sorted(Path(o["path"]).name for o in m["outputs"]) == \
            sorted(Path(o["path"]).name for o in read_manifest(sep)["outputs"])


def test_jobs_log_each_job_and_one_engine_run(tmp_path, model, caplog):
    root = make_jobs(tmp_path / "set")
    caplog.set_level("INFO")
    r = _nbest(_job_args(root) + ["--jobs", "2:3"] + _common(model))
    assert r.exit_code == 0, r.output
    text = caplog.text
    assert f"job 2: reading {root / 'archives.2'}" in text and "job 2: 1 conversations" in text
    assert "job 3: 3 conversations" in text and "jobs 2-3: 4 conversations in one engine run" in text
    assert "2 sets, 4 conversations, scored together" in text and "torch threads" in text
    assert text.count("forward calls") == 1  # one engine summary
    assert not (root / "archives.1" / "text").exists()  # job 1 is not in 2:3


def test_jobs_with_nn_costs_of_each_job(tmp_path, model):
    """--nn-costs with JOB: each job reads its own (here the costs the model run wrote)."""
    root = make_jobs(tmp_path / "set")
    assert _nbest(_job_args(root) + ["--jobs", "1:3"] + _common(model)).exit_code == 0
    r = _nbest(_job_args(root, out="again.JOB") + ["--jobs", "1:3", "--nn-costs", root / "archives.JOB" / "lmwt.nn",
                                                   "--weight", "0.6"])
    assert r.exit_code == 0, r.output
    for k in (1, 2, 3):
        assert (root / f"again.{k}" / "text").read_text() == (root / f"archives.{k}" / "text").read_text()


@pytest.mark.parametrize("extra, where, message", [
    (["--jobs", "2:1"], "--jobs", "1 <= A <= B"),
    (["--jobs", "0:2"], "--jobs", "1 <= A <= B"),
    (["--jobs", "1-3"], "--jobs", "A:B with integers"),
    (["--jobs", "x"], "--jobs", "A:B with integers"),
    (["--jobs", "1:2", "--split", "1/2"], "--jobs", "not both"),
    (["--jobs", "1:2", "--params", "p.JOB.json"], "--params", "one --params for every job"),
    (["--jobs", "1:2", "--train-text", "train.JOB.txt"], "--train-text", "one --train-text for every job"),
    (["--jobs", "1:2", "--format", "interchange"], "--jobs", "Kaldi N-best dirs"),
])
def test_bad_jobs_options_exit_2_before_any_work(tmp_path, extra, where, message):
    root = make_jobs(tmp_path / "set", convs=(1, 1))
    before = _snapshot(root)
    r = _nbest(_job_args(root, out="out.JOB") + extra)
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {where}: expected") and message in r.output, r.output
    assert _snapshot(root) == before


@pytest.mark.parametrize("missing", ["NBEST_DIR", "OUT_DIR"])
def test_jobs_need_job_in_nbest_dir_and_out_dir(tmp_path, missing):
    root = make_jobs(tmp_path / "set", convs=(1, 1))
    args = _job_args(root, out="out.JOB")
    args[0 if missing == "NBEST_DIR" else 1] = job_path(args[0 if missing == "NBEST_DIR" else 1], 1)
    r = _nbest(args + ["--jobs", "1:2"])
    assert r.exit_code == 2 and r.output.startswith("error: --jobs: expected JOB in " + missing), r.output
    assert not (root / "out.1").exists() and not (root / "out.2").exists()


def test_a_bad_archive_in_job_2_fails_the_run_and_writes_nothing(tmp_path, model):
    """One bad job fails all (exit 1, its file and line named): the jobs' older outputs are left
    as they were, and fresh output dirs are not made."""
    root = make_jobs(tmp_path / "set")
    assert _nbest(_job_args(root) + ["--jobs", "1:3"] + _common(model)).exit_code == 0
    lines = (root / "archives.2" / "acwt").read_text().splitlines(keepends=True)
    lines[2] = lines[2].split()[0] + " 12x \n"
    (root / "archives.2" / "acwt").write_text("".join(lines))
    before = _snapshot(root)
    r = _nbest(_job_args(root) + ["--jobs", "1:3"] + _common(model))
    assert r.exit_code == 1 and f"error: {root / 'archives.2' / 'acwt'}:3: expected" in r.output, r.output
    assert _snapshot(root) == before
    r = _nbest(_job_args(root, out="fresh.JOB") + ["--jobs", "1:3"] + _common(model))
    assert r.exit_code == 1 and f"{root / 'archives.2' / 'acwt'}:3:" in r.output
    assert not any((root / f"fresh.{k}").exists() for k in (1, 2, 3))


def test_parse_jobs_and_job_paths():
    assert parse_jobs("1:4") == range(1, 5) and parse_jobs("3:3") == range(3, 4)
    assert job_path("exp/d/archives.JOB", 12) == "exp/d/archives.12" and job_path(None, 1) is None
    assert set(JOB_PATHS) == {"nbest_dir", "out_dir", "data_dir", "words_txt", "nn_costs"}


def _same_ranks(a, b):
    """Two lmwt.cascade files (key rank gap scored): the same keys, ranks and survivors; the gaps
    (sums of float costs, summed in another order by one process over every job) to 1e-5."""
    rows_a = [line.split() for line in a.read_text().splitlines()]
    rows_b = [line.split() for line in b.read_text().splitlines()]
    assert [(r[0], r[1], r[3]) for r in rows_a] == [(r[0], r[1], r[3]) for r in rows_b]
    assert [float(r[2]) for r in rows_a] == pytest.approx([float(r[2]) for r in rows_b], abs=1e-5)


def test_a_cascade_in_jobs_writes_what_separate_runs_write(tmp_path, model):
    """--jobs with a cascade (the Kaldi step's --rescore-opts "--cascade-top 2" with two models):
    every job's lmwt.cascade, costs and 1-best are those of a cascade run of its own."""
    root = make_jobs(tmp_path / "set")
    opts = _common(model, "--model", model, "--cascade-top", "2", "--mix", "0.3,0.7")
    r = _nbest(_job_args(root) + ["--jobs", "1:3"] + opts)
    assert r.exit_code == 0, r.output
    for k in (1, 2, 3):
        sep = tmp_path / f"sep.{k}"
        one = _nbest([root / f"archives.{k}", sep, "--data-dir", root / "data" / str(k)] + opts)
        assert one.exit_code == 0, one.output
        a = root / f"archives.{k}"
        _same_ranks(a / "lmwt.cascade", sep / "lmwt.cascade")
        assert (a / "text").read_text() == (sep / "text").read_text()
        for name in ("lmwt.nn.1", "lmwt.nn.2"):
            _same_costs(a / name, sep / name)
