"""rescore-tune on a Kaldi step's output dir (rescore.nbest.step_output): every job's archives.JOB and
their NN LM costs are tuned as one set, exactly as the same N-best lists in one N-best dir."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from click.testing import CliRunner

from rescore.cli.tune import main

NBEST_SMALL = Path(__file__).parent / "fixtures" / "nbest-small"
ARCHIVES = ("words_text", "acwt", "lmwt.nolm", "lmwt.withlm")


def lines_of(name: str) -> list:
    return (NBEST_SMALL / name).read_text().splitlines(keepends=True)


def nn_costs() -> list:
    """A made-up lmwt.nn of nbest-small (per-token costs), fixed by the seed."""
    rng = random.Random(7)
    return [f"{line.split()[0]} " + " ".join(f"{rng.uniform(0.5, 9):.4f}" for _ in range(len(line.split())))
            + "\n" for line in lines_of("words_text")]


def step_dir(tmp: Path, jobs: dict, costs: list, names=("lmwt.nn",)) -> Path:
    """A step's output dir: job n holds the utterances whose recording is jobs[n]."""
    d = tmp / "decode_dev_rescore"
    (d).mkdir()
    (d / "num_jobs").write_text(f"{len(jobs)}\n")
    for n, rec in jobs.items():
        a = d / f"archives.{n}"
        a.mkdir()
        for name in ARCHIVES:
            a.joinpath(name).write_text("".join(x for x in lines_of(name) if x.startswith(rec)))
        for name in names:
            a.joinpath(name).write_text("".join(x for x in costs if x.startswith(rec)))
    return d


def run(args: list):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


def test_step_dir_tunes_like_one_nbest_dir(tmp_path):
    costs = nn_costs()
    (tmp_path / "lmwt.nn").write_text("".join(costs))
    d = step_dir(tmp_path, {1: "rec1", 2: "rec2"}, costs)
    grid = ["--weights", "0:1:0.25", "--inv-acwts", "8,10,12", "--wips", "-1:1:1"]
    whole = run([NBEST_SMALL, "--data-dir", NBEST_SMALL / "data", "--nn-costs", tmp_path / "lmwt.nn", *grid,
                 "--report", tmp_path / "whole.json", "--hyp-out", tmp_path / "whole.txt"])
    assert whole.exit_code == 0, whole.output
    step = run([d, "--data-dir", NBEST_SMALL / "data", *grid, "--report", tmp_path / "step.json",
                "--hyp-out", tmp_path / "step.txt", "--params-out", tmp_path / "params.json"])
    assert step.exit_code == 0, step.output
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("whole.json", "step.json"))
    assert a["best"] == b["best"] and a["dev_wer"] == b["dev_wer"] and a["dev_utts"] == b["dev_utts"] == 5
    assert a["grid"] == b["grid"]
    assert (tmp_path / "whole.txt").read_text() == (tmp_path / "step.txt").read_text()
    assert json.loads((tmp_path / "params.json").read_text())["weight"] == a["best"]["weight"]
    assert "best setting:" in step.output


def test_step_dir_of_two_models_tunes_their_shares(tmp_path):
    costs = nn_costs()
    d = step_dir(tmp_path, {1: "rec1", 2: "rec2"}, costs, names=("lmwt.nn", "lmwt.nn.1", "lmwt.nn.2"))
    r = run([d, "--data-dir", NBEST_SMALL / "data", "--weights", "0,0.5", "--inv-acwts", "10", "--wips", "0",
             "--mixes", "0,1", "--report", tmp_path / "r.json"])
    assert r.exit_code == 0, r.output
    assert "mix" in json.loads((tmp_path / "r.json").read_text())["best"]


def test_step_dir_errors_name_the_file(tmp_path):
    costs = nn_costs()
    d = step_dir(tmp_path, {1: "rec1", 2: "rec2"}, costs)
    (d / "num_jobs").write_text("3\n")
    r = run([d, "--data-dir", NBEST_SMALL / "data"])
    assert r.exit_code != 0 and "archives.3" in r.output and "no such directory" in r.output
    (d / "num_jobs").write_text("2\n")
    (d / "archives.2" / "lmwt.nn").unlink()
    r = run([d, "--data-dir", NBEST_SMALL / "data"])
    assert r.exit_code != 0 and "archives.2/lmwt.nn" in r.output
    shutil.copy(d / "archives.1" / "lmwt.nn", d / "archives.2" / "lmwt.nn")  # job 1's costs in job 2
    r = run([d, "--data-dir", NBEST_SMALL / "data"])
    assert r.exit_code != 0 and "archives.2/lmwt.nn" in r.output
    # a job's utterance in another job too
    a1 = d / "archives.1"
    for name in ARCHIVES:
        (d / "archives.2" / name).write_text(a1.joinpath(name).read_text())
    (d / "archives.2" / "lmwt.nn").write_text(a1.joinpath("lmwt.nn").read_text())
    r = run([d, "--data-dir", NBEST_SMALL / "data"])
    assert r.exit_code != 0 and "one job only" in r.output


def test_step_dir_options_refused(tmp_path):
    d = step_dir(tmp_path, {1: "rec1", 2: "rec2"}, nn_costs())
    r = run([d, "--data-dir", NBEST_SMALL / "data", "--nn-costs", tmp_path / "x" / "lmwt.nn"])
    assert r.exit_code == 2 and "file names" in r.output
    r = run([d, "--data-dir", NBEST_SMALL / "data", "--apply-to", d, tmp_path / "out"])
    assert r.exit_code == 2 and "--params" in r.output
    r = run([d, "--data-dir", NBEST_SMALL / "data", "--refine-model", tmp_path / "m.pt"])
    assert r.exit_code == 2 and "--refine-model" in r.output


def test_step_dir_of_a_cascade_tunes_like_one_nbest_dir(tmp_path):
    # A cascade run by the step (--rescore-opts "--cascade-top K", two models): each archives.JOB has
    # its lmwt.cascade; rescore-tune --cascade lmwt.cascade reads every job's, as one N-best dir's.
    costs, rng = nn_costs(), random.Random(3)
    ranks = [f"{line.split()[0]} {rng.randint(1, 4)} {rng.uniform(0, 9)!r} {rng.randint(0, 1)} \n"
             for line in lines_of("words_text")]
    other = [f"{a.split()[0]} {' '.join(b.split()[1:2] * (len(a.split()) - 1))} \n" for a, b in zip(costs, costs[::-1])]
    for name, lines in (("lmwt.nn.1", costs), ("lmwt.nn.2", other), ("lmwt.cascade", ranks)):
        (tmp_path / name).write_text("".join(lines))
    d = step_dir(tmp_path, {1: "rec1", 2: "rec2"}, costs, names=("lmwt.nn.1",))
    for n, rec in ((1, "rec1"), (2, "rec2")):
        for name in ("lmwt.nn.2", "lmwt.cascade"):
            (d / f"archives.{n}" / name).write_text(
                "".join(x for x in (tmp_path / name).read_text().splitlines(keepends=True) if x.startswith(rec)))
    grid = ["--weights", "0.5,1", "--inv-acwts", "10", "--wips", "0", "--mixes", "0,0.5",
            "--cascade-tops", "1,2,4", "--cascade-margins", "3,9"]
    whole = run([NBEST_SMALL, "--data-dir", NBEST_SMALL / "data", "--nn-costs", tmp_path / "lmwt.nn.1",
                 "--nn-costs", tmp_path / "lmwt.nn.2", "--cascade", tmp_path / "lmwt.cascade", *grid,
                 "--report", tmp_path / "whole.json"])
    assert whole.exit_code == 0, whole.output
    step = run([d, "--data-dir", NBEST_SMALL / "data", "--nn-costs", "lmwt.nn.1", "--nn-costs", "lmwt.nn.2",
                "--cascade", "lmwt.cascade", *grid, "--report", tmp_path / "step.json"])
    assert step.exit_code == 0, step.output
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("whole.json", "step.json"))
    assert a["grid"] == b["grid"] and a["cascade"] == b["cascade"] and len(a["grid"]) == 2 * 2 * 3 * 2
    r = run([d, "--data-dir", NBEST_SMALL / "data", "--nn-costs", "lmwt.nn.1", "--nn-costs", "lmwt.nn.2",
             "--cascade", tmp_path / "lmwt.cascade"])
    assert r.exit_code == 2 and "--cascade" in r.output
