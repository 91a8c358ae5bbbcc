"""The job layer (rescore.jobs.nbest, rescore.io.outdir): outputs of rescore-nbest, validation at
the door, inputs never overwritten, an output dir written as one set (lock, manifest, stale
outputs, temporary files, --split dirs), the Kaldi default weight."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from tests.conftest import NBEST_SMALL, REPO_ROOT, dead_pid
from rescore.cli.nbest import main as nbest_main
from rescore.cli.tune import main as tune_main
from rescore.errors import OptionError, RescoreError
from rescore.nbest.interp import Params
from rescore.io.kaldi import read_nn_costs, read_table, write_nn_costs
from rescore.io.outdir import LOCK_NAME, MANIFEST_NAME, read_manifest
from rescore.nbest.sets import load_nbest_dir
from rescore.jobs.nbest import NbestJob, rescore_nbest_dir
from rescore.settings import EngineSettings
from rescore.jobs.tune import TuneJob


def _random_nn_costs(nbest, seed=0, per_token=True):
    rng = random.Random(seed)
    return {h.key: ([rng.uniform(0.5, 9.0) for _ in range(len(h.words) + 1)] if per_token
                    else [rng.uniform(5.0, 40.0)]) for u in nbest.utterances() for h in u.hyps}


def _nbest(args, **kw):
    return CliRunner().invoke(nbest_main, [str(a) for a in args], **kw)


def _base(out, nbest=NBEST_SMALL):
    return [nbest, out, "--data-dir", nbest / "data"]


# --------------------------------------------------------------------------------------------
# What a job writes


def test_rescore_nbest_outputs(nbest_small, tmp_path):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    write_nn_costs(tmp_path / "lmwt.nn", _random_nn_costs(s, per_token=False))
    costs = read_nn_costs(tmp_path / "lmwt.nn")
    out = tmp_path / "out"
    report = rescore_nbest_dir(NbestJob(str(nbest_small), str(out), params=Params(0.5, 11.0, 0.25),
                                        data_dir=str(nbest_small / "data"), nn_costs=(str(tmp_path / "lmwt.nn"),)))
    # lmwt.interp: Kaldi text archive with trailing spaces, one new graph cost per hypothesis
    text = (out / "lmwt.interp").read_text().splitlines(keepends=True)
    assert len(text) == 17 and all(line.endswith(" \n") for line in text)
    interp = read_table(out / "lmwt.interp", "float").as_dict()
    hyps = {h.key: h for u in s.utterances() for h in u.hyps}
    for k, v in interp.items():
        assert v == pytest.approx(hyps[k].nolm + 0.5 * (hyps[k].withlm - hyps[k].nolm) + 0.5 * costs[k][0])
    # text: brute-force argmin of the full cost
    one_best = dict(line.split(" ", 1) for line in (out / "text").read_text().splitlines())
    for u in s.utterances():
        c = [h.ac / 11.0 + interp[h.key] + 0.25 * len(h.words) for h in u.hyps]
        assert one_best[u.id].split() == u.hyps[c.index(min(c))].words
    saved = json.loads((out / "report.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["num_hyps"] == 17 and saved["ref_words"] == 21 and saved["oracle_wer"] == 0.0
    assert "%WER" in (out / "report.txt").read_text()
    # the manifest: complete, with the inputs' and outputs' sizes and hashes
    m = read_manifest(out)
    assert m["complete"] is True and m["settings"]["params"] == {"weight": 0.5, "inv_acwt": 11.0, "wip": 0.25}
    assert {os.path.basename(o["path"]) for o in m["outputs"]} == {"lmwt.interp", "text", "report.json",
                                                                    "report.txt"}
    assert any(i["path"].endswith("acwt") and len(i["sha256"]) == 64 for i in m["inputs"])


def test_bad_nn_costs_are_refused_and_nothing_is_written(nbest_small, tmp_path):
    s = load_nbest_dir(nbest_small, nbest_small / "data")
    for name, change in (("short", lambda c: c.__setitem__("rec1-rms-000-2", c["rec1-rms-000-2"][:-1])),
                         ("missing", lambda c: c.pop("rec2-awb-001-3")),
                         ("extra", lambda c: c.__setitem__("nobody-1", [1.0]))):
        costs = _random_nn_costs(s)
        change(costs)
        write_nn_costs(tmp_path / f"{name}.nn", costs)
        with pytest.raises(RescoreError, match=r"rec1-rms-000-2|rec2-awb-001-3|nobody-1"):
            rescore_nbest_dir(NbestJob(str(nbest_small), str(tmp_path / "o"), params=Params(weight=0.3),
                                       data_dir=str(nbest_small / "data"), nn_costs=(str(tmp_path / f"{name}.nn"),)))
        assert not (tmp_path / "o").exists()  # nothing written on bad input, not even the dir


# --------------------------------------------------------------------------------------------
# Validation at the door: exit 2 for a bad option, `error: ...`, no traceback, nothing written


@pytest.mark.parametrize("extra, where", [
    (["--weight", "-1"], "--weight"),
    (["--weight", "1.5", "--nn-costs", NBEST_SMALL / "words"], "--weight"),
    (["--weight", "nan"], "--weight"),
    (["--inv-acwt", "0"], "--inv-acwt"),
    (["--inv-acwt", "inf"], "--inv-acwt"),
    (["--wip", "nan"], "--wip"),
    (["--buckets", "0"], "--buckets"),
    (["--oov-penalty", "nan", "--model", "m.pt"], "--oov-penalty"),
    (["--oov-penalty", "-2", "--model", "m.pt"], "--oov-penalty"),
    (["--oov-penalty", "1"], "--oov-penalty"),  # without --model it would do nothing
    (["--cache-theta", "nan", "--model", "m.pt"], "--cache-theta"),
    (["--cache-lambda", "1", "--model", "m.pt"], "--cache-lambda"),
    (["--cache-window", "5"], "--cache-window"),
    (["--max-tokens", "0", "--model", "m.pt"], "--max-tokens"),
    (["--conv-batch", "0"], "--conv-batch"),
    (["--split", "3/2"], "--split"),
    (["--split", "x"], "--split"),
    (["--weight", "0.5"], "NN LM costs"),
    (["--model", "m.pt", "--nn-costs", NBEST_SMALL / "words"], "exclude"),
])
def test_bad_options_exit_2_before_any_work(tmp_path, extra, where):
    r = _nbest(_base(tmp_path / "o") + extra)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and where in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_click_errors_read_the_same_way(tmp_path):
    r = _nbest(_base(tmp_path / "o") + ["--weight", "abc"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "--weight" in r.output
    assert "rescore-nbest --help" in r.output or "main --help" in r.output


def test_params_file_is_checked(tmp_path):
    for name, body in (("inf.json", '{"weight": 0, "inv_acwt": Infinity, "wip": 0}'),
                       ("big.json", '{"weight": 0, "inv_acwt": 1e999, "wip": 0}'),
                       ("neg.json", '{"weight": -1, "inv_acwt": 10, "wip": 0}'),
                       ("bool.json", '{"weight": true, "inv_acwt": 10, "wip": 0}'),
                       ("list.json", '[1, 2, 3]')):
        (tmp_path / name).write_text(body)
        r = _nbest(_base(tmp_path / "o") + ["--params", tmp_path / name])
        assert r.exit_code == 1 and f"error: {tmp_path / name}" in r.output, (name, r.output)
    (tmp_path / "latin1.json").write_bytes(b'{"weight": 0, "inv_acwt": 10, "wip": 0, "note": "caf\xe9"}')
    r = _nbest(_base(tmp_path / "o") + ["--params", tmp_path / "latin1.json"])
    assert r.exit_code == 1 and "UTF-8" in r.output
    assert not (tmp_path / "o").exists()


def test_params_are_checked_when_built():
    for bad in (dict(weight=-1.0), dict(weight=float("nan")), dict(inv_acwt=0.0), dict(wip=float("inf")),
                dict(weight="0.5")):
        with pytest.raises(OptionError):
            Params(**bad)
    with pytest.raises(OptionError, match="--oov-penalty"):
        EngineSettings(oov_penalty=float("nan"))


# --------------------------------------------------------------------------------------------
# The default NN LM weight: Kaldi's 0.8 when there are NN LM costs


def _write_costs(tmp_path):
    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    write_nn_costs(tmp_path / "costs.nn", _random_nn_costs(s))
    return tmp_path / "costs.nn"


def test_default_weight_is_kaldis_with_nn_costs(tmp_path):
    costs = _write_costs(tmp_path)
    for name, extra, weight in (("none", [], 0.0), ("costs", ["--nn-costs", costs], 0.8),
                                ("zero", ["--nn-costs", costs, "--weight", "0"], 0.0)):
        r = _nbest(_base(tmp_path / name) + extra)
        assert r.exit_code == 0, r.output
        assert json.loads((tmp_path / name / "report.json").read_text())["params"]["weight"] == weight
    (tmp_path / "p.json").write_text('{"weight": 0.3, "inv_acwt": 10, "wip": 0}')
    r = _nbest(_base(tmp_path / "file") + ["--nn-costs", costs, "--params", tmp_path / "p.json"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "file" / "report.json").read_text())["params"]["weight"] == 0.3
    assert "0.8 with --model" in " ".join(_nbest(["--help"]).output.split())


# --------------------------------------------------------------------------------------------
# Inputs are never overwritten


def test_an_output_over_an_input_is_refused(nbest_small, tmp_path):
    data = nbest_small / "data"
    before = (data / "text").read_bytes()
    r = _nbest([nbest_small, data, "--data-dir", data])  # OUT_DIR/text would replace data/text
    assert r.exit_code == 2 and "replace the input" in r.output and str(data / "text") in r.output
    assert (data / "text").read_bytes() == before and not (data / MANIFEST_NAME).exists()
    # a link to an input is refused the same way
    (tmp_path / "o").mkdir()
    os.symlink(data / "text", tmp_path / "o" / "text")
    r = _nbest([nbest_small, tmp_path / "o", "--data-dir", data])
    assert r.exit_code == 2 and "replace the input" in r.output
    assert (data / "text").read_bytes() == before
    # OUT_DIR = NBEST_DIR (Kaldi's archives.JOB) is fine: no output has an input's name
    r = _nbest([nbest_small, nbest_small, "--data-dir", data])
    assert r.exit_code == 0, r.output
    assert (nbest_small / "lmwt.interp").is_file() and (nbest_small / "acwt").is_file()
    # an --nn-costs file kept in OUT_DIR under an output's name stays: it is an input
    s = load_nbest_dir(nbest_small, data)
    write_nn_costs(nbest_small / "lmwt.nn", _random_nn_costs(s))
    kept = (nbest_small / "lmwt.nn").read_bytes()
    r = _nbest([nbest_small, nbest_small, "--data-dir", data, "--nn-costs", nbest_small / "lmwt.nn"])
    assert r.exit_code == 0, r.output
    assert (nbest_small / "lmwt.nn").read_bytes() == kept
    # but --model would write lmwt.nn over it
    r = _nbest([nbest_small, nbest_small, "--data-dir", data, "--model", nbest_small / "lmwt.nn"])
    assert r.exit_code == 2 and "replace the input" in r.output


def test_tune_outputs_over_inputs_are_refused(nbest_small, tmp_path):
    data = nbest_small / "data"
    before = (data / "text").read_bytes()
    common = [str(nbest_small), "--data-dir", str(data), "--inv-acwts", "10", "--wips", "0"]
    for extra in (["--apply-to", str(nbest_small), str(data), "--apply-data-dir", str(data)],
                  ["--params-out", str(data / "text")], ["--report", str(nbest_small / "acwt")]):
        r = CliRunner().invoke(tune_main, common + extra)
        assert r.exit_code == 2 and "replace the input" in r.output, r.output
    assert (data / "text").read_bytes() == before
    r = CliRunner().invoke(tune_main, common + ["--params-out", str(tmp_path / "f" / "x"),
                                                "--report", str(tmp_path / "f" / "x")])
    assert r.exit_code == 2


def test_output_under_a_file_is_refused_before_work(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = _nbest(_base(tmp_path / "afile" / "o"))
    assert r.exit_code == 2 and "is a file" in r.output
    r = CliRunner().invoke(tune_main, [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data"),
                                       "--report", str(tmp_path / "afile" / "r.json")])
    assert r.exit_code == 2 and "is a file" in r.output


# --------------------------------------------------------------------------------------------
# An output dir as one set


def test_a_second_writer_fails_fast(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    # another process holds the lock (as a running rescore-nbest does) ...
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(out / LOCK_NAME)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "f.write('pid 4242\\n'); f.flush(); print('locked', flush=True); time.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        r = _nbest(_base(out))
        assert r.exit_code == 1 and "no other run" in r.output and "pid 4242" in r.output
        assert time.monotonic() - t0 < 30  # fails at once, not after the work
        assert not (out / "text").exists() and not (out / MANIFEST_NAME).exists()
    finally:
        holder.kill()
        holder.wait()
    # ... and once it is gone (even killed: the lock goes with the process) the dir is free
    r = _nbest(_base(out))
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["complete"] is True


def test_two_commands_at_once_into_one_dir(tmp_path):
    # Two real processes: one of them wins, the other says the dir is busy; never a mixed set.
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "rescore.cli.nbest", str(NBEST_SMALL), str(out), "--data-dir",
           str(NBEST_SMALL / "data")]
    procs = [subprocess.Popen(cmd + ["--inv-acwt", a], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for a in ("10", "12")]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert all(rc in (0, 1) for rc, _ in results)
    for rc, err in results:
        if rc == 1:
            assert "no other run" in err
    m = read_manifest(out)
    assert m["complete"] is True
    rep = json.loads((out / "report.json").read_text())
    assert rep["params"] == m["settings"]["params"]  # the report is the manifest's run's


def test_a_failed_run_leaves_a_set_marked_incomplete(tmp_path, monkeypatch):
    out = tmp_path / "o"
    assert _nbest(_base(out)).exit_code == 0
    from rescore import metrics

    def broken(*a, **k):
        raise RescoreError("a report (simulated failure)")

    monkeypatch.setattr(metrics, "nbest_report", broken)
    r = _nbest(_base(out) + ["--inv-acwt", "12"])
    assert r.exit_code == 1 and "simulated failure" in r.output
    m = read_manifest(out)
    assert m["complete"] is False and "simulated failure" in m["note"]
    # neither the old run's outputs nor this one's half set are left
    assert not any((out / n).exists() for n in ("text", "lmwt.interp", "report.json", "report.txt"))


def test_stale_outputs_and_temporary_files_are_removed(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "lmwt.nn").write_text("an older run's costs\n")  # a run with --model, then one without
    (out / "buckets.png").write_bytes(b"old")
    left = out / f".text.rescore-tmp.{dead_pid()}.abc123"
    left.write_text("left by a kill -9\n")
    (out / "notes.txt").write_text("not ours\n")
    r = _nbest(_base(out))
    assert r.exit_code == 0, r.output
    assert not (out / "lmwt.nn").exists() and not (out / "buckets.png").exists()
    assert not left.exists()
    assert (out / "notes.txt").exists()  # files that are not ours are left alone
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["lmwt.interp", "manifest.json", "notes.txt", "report.json", "report.txt", "text"]


def test_a_run_that_fails_on_its_input_leaves_the_old_set(nbest_small, tmp_path):
    out = tmp_path / "o"
    assert _nbest(_base(out, nbest_small)).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (nbest_small / "acwt").write_text("garbage\n")
    r = _nbest(_base(out, nbest_small))
    assert r.exit_code == 1 and "acwt" in r.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_split_jobs_each_in_their_own_dir(tmp_path):
    whole = tmp_path / "whole"
    assert _nbest(_base(whole)).exit_code == 0  # (--conv-batch acts only with --split or --model: refused here)
    parts = {"lmwt.interp": [], "text": []}
    for k in (1, 2):
        out = tmp_path / f"archives.{k}"
        r = _nbest(_base(out) + ["--split", f"{k}/2", "--conv-batch", "1"])
        assert r.exit_code == 0, r.output
        assert read_manifest(out)["split"] == [k, 2]
        for name in parts:
            parts[name].append((out / name).read_text())
    for name, texts in parts.items():
        assert texts[0] and texts[1] and "".join(texts) == (whole / name).read_text(), name
    # a second job into job 1's dir is refused, and job 1's outputs are kept
    before = (tmp_path / "archives.1" / "lmwt.interp").read_text()
    r = _nbest(_base(tmp_path / "archives.1") + ["--split", "2/2", "--conv-batch", "1"])
    assert r.exit_code == 1 and "job 1/2" in r.output and "own" in r.output
    assert (tmp_path / "archives.1" / "lmwt.interp").read_text() == before
    # the same job again is a rerun: fine
    r = _nbest(_base(tmp_path / "archives.1") + ["--split", "1/2", "--conv-batch", "1"])
    assert r.exit_code == 0, r.output


def test_split_job_reads_only_its_share(nbest_small, tmp_path):
    """A bad cost in job 2's conversation (rec2): the whole set and job 2 fail with the same
    message (exit 1), job 1 never reads it and writes what it writes from the intact dir."""
    common = ["--conv-batch", "1", "--split"]
    for k in (1, 2):
        assert _nbest(_base(tmp_path / f"intact.{k}", nbest_small) + common + [f"{k}/2"]).exit_code == 0
    lines = (nbest_small / "lmwt.nolm").read_text().splitlines(keepends=True)
    assert lines[10].startswith("rec2-")
    lines[10] = lines[10].split()[0] + " 0.5x \n"
    (nbest_small / "lmwt.nolm").write_text("".join(lines))
    whole = _nbest(_base(tmp_path / "whole", nbest_small))
    assert whole.exit_code == 1 and f"{nbest_small / 'lmwt.nolm'}:11:" in whole.output
    job2 = _nbest(_base(tmp_path / "job.2", nbest_small) + common + ["2/2"])
    assert job2.exit_code == 1 and job2.output == whole.output
    job1 = _nbest(_base(tmp_path / "job.1", nbest_small) + common + ["1/2"])
    assert job1.exit_code == 0, job1.output
    for name in ("lmwt.interp", "text", "report.json"):
        assert (tmp_path / "job.1" / name).read_bytes() == (tmp_path / "intact.1" / name).read_bytes()


# --------------------------------------------------------------------------------------------
# rescore-tune's checks


def test_tune_grid_and_lists_are_checked(tmp_path):
    common = [str(NBEST_SMALL), "--data-dir", str(NBEST_SMALL / "data")]
    t0 = time.monotonic()
    costs = _write_costs(tmp_path)
    r = CliRunner().invoke(tune_main, common + ["--nn-costs", str(costs), "--weights", "0:1:0.0001",
                                                "--inv-acwts", "1:100:0.01", "--wips", "0"])
    assert r.exit_code == 2 and "at most" in r.output
    r = CliRunner().invoke(tune_main, common + ["--weights", "0:1:0.00000001"])
    assert r.exit_code == 2 and "--weights" in r.output
    assert time.monotonic() - t0 < 30
    for bad in (["--weights", "-1,0.5"], ["--inv-acwts", "0,10"], ["--wips", "nan"], ["--wips", "1:0:0.5"]):
        r = CliRunner().invoke(tune_main, common + bad)
        assert r.exit_code == 2 and bad[0] in r.output, (bad, r.output)
    (tmp_path / "none").write_text("nobody-1\nnobody-2\n")
    (tmp_path / "empty").write_text("")
    for opt in ("--dev-utts", "--eval-utts"):
        for f in ("none", "empty"):
            r = CliRunner().invoke(tune_main, common + [opt, str(tmp_path / f)])
            assert r.exit_code == 1 and f"error: {tmp_path / f}" in r.output, (opt, f, r.output)
    r = CliRunner().invoke(tune_main, common + ["--apply-data-dir", str(NBEST_SMALL / "data")])
    assert r.exit_code == 2 and "--apply-to" in r.output
    with pytest.raises(OptionError):
        TuneJob(str(NBEST_SMALL), str(NBEST_SMALL / "data"), weights=[0.0], inv_acwts=[10.0], wips=[0.0],
                split_half=True, dev_utts=str(tmp_path / "none"))


# --------------------------------------------------------------------------------------------
# WER needs reference words and hypotheses


def test_wer_of_empty_files_or_wordless_references_is_an_error(tmp_path):
    from rescore.cli.wer import main as wer_main

    (tmp_path / "ref").write_text("u1 a b\nu2 c\n")
    (tmp_path / "hyp").write_text("u1 a b\nu2 c\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "wordless").write_text("u1\nu2\n")
    for ref, hyp, what in (("empty", "hyp", "reference"), ("ref", "empty", "hypothesis"),
                           ("wordless", "hyp", "at least one word")):
        r = CliRunner().invoke(wer_main, [str(tmp_path / ref), str(tmp_path / hyp), "--report",
                                          str(tmp_path / "r.json")])
        assert r.exit_code == 1 and r.output.startswith("error: ") and what in r.output, (ref, hyp, r.output)
        assert not (tmp_path / "r.json").exists()
    r = CliRunner().invoke(wer_main, [str(tmp_path / "ref"), str(tmp_path / "hyp"),
                                      "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0 and "Infinity" not in (tmp_path / "r.json").read_text()


# --------------------------------------------------------------------------------------------
# Several NN LMs: the job's mix, outputs and manifest


def test_a_job_of_several_cost_files(tmp_path):
    s = load_nbest_dir(NBEST_SMALL, NBEST_SMALL / "data")
    files = []
    for k in (1, 2, 3):
        write_nn_costs(tmp_path / f"c{k}.nn", _random_nn_costs(s, seed=k))
        files.append(str(tmp_path / f"c{k}.nn"))
    job = NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), params=Params(0.5), data_dir=str(NBEST_SMALL / "data"),
                   nn_costs=tuple(files))
    assert job.params.mix == pytest.approx((1 / 3, 1 / 3, 1 / 3)) and job.num_models == 3  # equal shares
    assert job.outputs()[:3] == ["lmwt.nn", "lmwt.interp", "text"]
    for bad in ((0.5, 0.5), (0.1, 0.2, 0.3, 0.4)):
        with pytest.raises(OptionError, match="one share per model") as e:
            NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), params=Params(0.5, mix=bad), nn_costs=tuple(files))
        assert e.value.option == "--mix"
    with pytest.raises(OptionError, match="--mix"):
        NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), params=Params(0.0, mix=(0.5, 0.5)))
    # models: one lmwt.nn per model besides the mix, and the manifest names every model as an input
    job = NbestJob(str(NBEST_SMALL), str(tmp_path / "m"), params=Params(0.5), models=("a.pt", "b.pt"))
    assert job.outputs() == ["lmwt.nn", "lmwt.nn.1", "lmwt.nn.2", "lmwt.interp", "text"]
    assert {"a.pt", "b.pt"} <= {p.name for p in job.inputs()}
    with pytest.raises(OptionError, match="at most 8"):
        NbestJob(str(NBEST_SMALL), str(tmp_path / "m"), params=Params(0.5), models=tuple(f"m{k}.pt" for k in range(9)))
    report = rescore_nbest_dir(NbestJob(str(NBEST_SMALL), str(tmp_path / "r"), params=Params(0.5, mix=(0.2, 0.3, 0.5)),
                                        data_dir=str(NBEST_SMALL / "data"), nn_costs=tuple(files)))
    manifest = read_manifest(tmp_path / "r")
    assert manifest["complete"] and manifest["settings"]["params"]["mix"] == [0.2, 0.3, 0.5]
    assert {i["path"] for i in manifest["inputs"]} >= set(files)
    assert report["models"] == files and report["params"]["mix"] == [0.2, 0.3, 0.5]
    mixed = read_nn_costs(tmp_path / "r" / "lmwt.nn")
    costs = [read_nn_costs(f) for f in files]
    for key, c in mixed.items():
        assert c == pytest.approx([0.2 * x + 0.3 * y + 0.5 * z for x, y, z in zip(*(cs[key] for cs in costs))])


def test_oov_penalty_default_is_auto_where_words_are_known(tmp_path):
    # auto where a training text or a words.txt (given, or beside NBEST_DIR) is known, else 0;
    # without a model there is no NN LM to penalise: 0
    bare = tmp_path / "bare"  # no words.txt beside it
    bare.mkdir()
    for f in ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm"):
        (bare / f).write_bytes((NBEST_SMALL / f).read_bytes())
    (tmp_path / "train.txt").write_text("a b c\n")

    def penalty(nbest_dir, **kw):
        return NbestJob(str(nbest_dir), str(tmp_path / "o"), **kw).scoring.oov_penalty

    assert penalty(NBEST_SMALL, models=("m.pt",)) == "auto"  # NBEST_SMALL/words.txt
    assert penalty(bare, models=("m.pt",)) == 0.0
    assert penalty(bare, models=("m.pt",), words_txt=str(NBEST_SMALL / "words.txt")) == "auto"
    assert penalty(bare, models=("m.pt",), train_text=str(tmp_path / "train.txt")) == "auto"
    assert penalty(NBEST_SMALL) == 0.0
    assert penalty(NBEST_SMALL, models=("m.pt",), scoring=EngineSettings(oov_penalty=2.5)) == 2.5
    with pytest.raises(OptionError, match="words.txt for --oov-penalty auto"):
        NbestJob(str(bare), str(tmp_path / "o"), models=("m.pt",), scoring=EngineSettings(oov_penalty="auto"))
    with pytest.raises(OptionError, match="--model for an OOV penalty"):
        NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), scoring=EngineSettings(oov_penalty="auto"))


def test_the_input_format_is_a_field_of_every_nbest_job(tmp_path):
    """NbestJob declares the input's format (a Kaldi dir by default; every format of the registry,
    the TSV format also by its former name), and a format no reader knows is refused when the job
    is built."""
    assert NbestJob(str(NBEST_SMALL), str(tmp_path / "o")).fmt == "kaldi"
    assert NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), fmt="interchange").fmt == "tsv"
    with pytest.raises(OptionError, match="--format") as e:
        NbestJob(str(NBEST_SMALL), str(tmp_path / "o"), fmt="kaldi-ish")
    assert e.value.option == "--format"


def test_a_share_of_a_set_keeps_the_table_it_was_read_from():
    """A split share (NbestSet.subset, .subset_utts) still names the table an overflow comes
    from; a Kaldi dir has none."""
    nbest = load_nbest_dir(NBEST_SMALL)
    assert nbest.source_table is None
    nbest.source_table = ("x.tsv", {"u-1": 3}, {"acwt": "ac"})
    conv = nbest.conversations[0]
    assert nbest.subset([conv.id]).source_table == nbest.source_table
    assert nbest.subset_utts([conv.utterances[0].id]).source_table == nbest.source_table
