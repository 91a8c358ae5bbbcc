"""The Kaldi quickstart (docs/kaldi-quickstart.md), run as written: every ```bash block after
the install, in order, in one bash, from $HOME, on a small Kaldi system of stand-ins laid out
where the page's commands look (~/kaldi/egs/your_recipe/s5, ~/rescore the checkout): a dev and
a test decode of two jobs each, made from the dev N-best set's lists (six recordings each), the
LM text from a data/train/text and a corpus, with the real rescore-train-lm, rescore-nbest,
rescore-tune and rescore-wer and tests/kaldi_lattice_standin.py for Kaldi's lattice programs and
local/score.sh.

Only the model is made tiny (each replaced string must be on the page, so the test fails when
the page changes under it). Checked: the tuned setting goes from dev to test; each step's
printed WERs (first pass and rescored, best of local/score.sh's grid and at the step's setting)
equal rescore-wer's on the files they stand for; the README's own-system commands are the
page's."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, shared_data_path
from tests.test_recipes import PARSE_OPTIONS, RUN_PL, INT2SYM, system_bin, write_exe

PAGE = REPO_ROOT / "docs" / "kaldi-quickstart.md"
README_SECTION = "## On your own Kaldi system"
STANDIN = Path(__file__).parent / "kaldi_lattice_standin.py"
RECIPE = Path("kaldi") / "egs" / "your_recipe" / "s5"  # under $HOME, as the page's cd has it
# Tiny sizes for the test (the page's string -> the test's).
TINY = {
    "--hidden 256 --layers 2": "--hidden 16 --layers 1",
    "--bptt 100 --batch-size 20 --epochs 200 --epoch-batches 500":
        "--bptt 20 --batch-size 4 --epochs 1 --epoch-batches 3",
}
# The measured training command, every option given (docs/kaldi-quickstart.md says so).
MEASURED = ["--hidden 256", "--layers 2", "--output class", "--dropout 0.2", "--bptt 100", "--batch-size 20",
            "--epochs 200", "--epoch-batches 500", "--max-anneals 4", "--seed 1", "--max-minutes 80", "--threads 1"]
# Kaldi's utils/best_wer.sh (egs/wsj/s5/utils/best_wer.sh), its perl and awk as they are.
BEST_WER = r"""#!/usr/bin/env bash
perl -e 'while(<>){
    s/\|(\d)/\| $1/g; s/(\d)\|/$1 \|/g;
    if (m/[WS]ER (\S+)/ && (!defined $bestwer || $bestwer > $1)){ $bestwer = $1; $bestline=$_; } # noqa: E501
    elsif (m: (Mean|Sum/Avg|)\s*\|\s*\S+\s+\S+\s+\|\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\|:
        && (!defined $bestwer || $bestwer > $2)){ $bestwer = $2; $bestline=$_; } }  # sclite.
   if (defined $bestline){ print $bestline; } ' | \
  awk 'BEGIN{ FS="%WER"; } { if(NF == 2) { print FS$2" "$1; } else { print $0; }}' | \
  awk 'BEGIN{ FS="Sum/Avg"; } { if(NF == 2) { print $2" "$1; } else { print $0; }}' | \
  awk '{ if($1!~/%WER/) { print "%WER "$9" "$0; } else { print $0; }}' | \
  sed -e 's|\s\s*| |g' -e 's|\:$||' -e 's|\:\s*\|\s*$||'
"""
LATTICE_PROGS = ["lattice-to-nbest", "lattice-lmrescore-const-arpa", "nbest-to-linear", "linear-to-nbest",
                 "nbest-to-lattice", "lattice-rmali"]
COMMANDS = {"rescore-train-lm": "train_lm", "rescore-nbest": "nbest", "rescore-tune": "tune", "rescore-wer": "wer"}


def bash_blocks(text: str) -> list:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block: str) -> list:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [re.sub(r"\s+#.*$", "", ln).strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]


def page_blocks() -> tuple:
    """(the install block, the blocks after it) of the quickstart page."""
    blocks = bash_blocks(PAGE.read_text())
    assert len(blocks) >= 5, "the quickstart page lost its blocks"
    return blocks[0], blocks[1:]


def test_install_block_takes_cpu_torch_and_the_constraints():
    install, _ = page_blocks()
    assert "--index-url https://download.pytorch.org/whl/cpu" in install
    pins = (REPO_ROOT / "constraints.txt").read_text()
    m = re.search(r"torch==(\S+)", install)
    assert m and f"torch=={m.group(1)}" in pins, "the page's torch is not the one constraints.txt pins"
    assert "-c ~/rescore/constraints.txt ~/rescore" in install and "python3 -m venv" in install


def test_training_command_is_the_measured_one():
    _, blocks = page_blocks()
    train = [c for b in blocks for c in commands(b) if c.startswith("rescore-train-lm")]
    assert len(train) == 1
    for opt in MEASURED:
        assert f" {opt}" in train[0], f"the quickstart's training lost '{opt}'"
    for page_string in TINY:
        assert page_string in "\n".join(blocks), page_string


def test_train_lm_help_example_is_the_measured_command():
    """rescore-train-lm --help shows the recommended model as measured: every option of the
    quickstart's training command, and no --classes (auto: round(sqrt V), the measured count)."""
    from rescore.cli.examples import EXAMPLES

    example = re.sub(r"\\\n\s*", " ", EXAMPLES["rescore-train-lm"]).splitlines()[0]
    for opt in MEASURED:
        assert f" {opt}" in example, f"rescore-train-lm's example lost '{opt}'"
    assert "--classes" not in example


def test_readme_commands_are_the_quickstarts():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split(README_SECTION, 1)
    assert len(section) == 2, f"README.md has no '{README_SECTION}' section"
    blocks = bash_blocks(section[1].split("\n## ", 1)[0])
    assert blocks, f"no ```bash block under '{README_SECTION}'"
    install, rest = page_blocks()
    page = set(commands(install)) | {c for b in rest for c in commands(b)}
    for c in (c for b in blocks for c in commands(b)):
        assert c in page, f"README's command is not the quickstart's: {c}"


def standin_layout(home: Path, dev_set: Path, lm_text: Path) -> dict:
    """The Kaldi system the page's commands run in; returns {set: its utterances}."""
    (home / "rescore").symlink_to(REPO_ROOT)
    s5 = home / RECIPE
    (s5 / "steps").mkdir(parents=True)
    (s5 / "path.sh").write_text("# stand-in for Kaldi's path.sh: PATH comes from the test\n")
    (s5 / "cmd.sh").write_text("export decode_cmd=run.pl\n")
    (s5 / "utils" / "parse_options.sh").parent.mkdir()
    (s5 / "utils" / "parse_options.sh").write_text(PARSE_OPTIONS)
    write_exe(s5 / "utils" / "int2sym.pl", INT2SYM)
    write_exe(s5 / "utils" / "best_wer.sh", BEST_WER)
    write_exe(s5 / "utils" / "split_data.sh", "#!/bin/sh\necho stand-in split_data.sh called >&2\nexit 1\n")
    write_exe(s5 / "local" / "score.sh", f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" score.sh "$@"\n')
    lang = s5 / "data" / "lang_test"
    lang.mkdir(parents=True)
    shutil.copy(dev_set / "lang" / "words.txt", lang / "words.txt")
    (lang / "G.carpa").write_bytes(b"stand-in")
    # LM text: transcripts of a training set and a corpus (wikitext-2 train lines, not the dev set's)
    lines = (lm_text / "train.txt").read_text().splitlines(keepends=True)
    (s5 / "data" / "train").mkdir()
    (s5 / "data" / "train" / "text").write_text("".join(f"train-{i:04d} {ln}" for i, ln in enumerate(lines[:300])))
    (s5 / "data" / "local" / "lm").mkdir(parents=True)
    (s5 / "data" / "local" / "lm" / "corpus.txt").write_text("".join(lines[300:400]))

    # dev and test: six recordings each of the dev N-best set, each decoded in two jobs
    segments = [ln.split() for ln in (dev_set / "data" / "segments").read_text().splitlines()]
    recordings = sorted({s[1] for s in segments if sum(1 for t in segments if t[1] == s[1]) > 5})
    nbest = {name: (dev_set / "nbest" / name).read_text().splitlines() for name in ("words", "acwt", "lmwt.withlm",
                                                                                     "lmwt.nolm")}
    sets = {}
    for name, recs in (("dev", recordings[:6]), ("test", recordings[6:12])):
        data = s5 / "data" / name
        utts = sorted(s[0] for s in segments if s[1] in recs)
        subset_data_dir(dev_set / "data", set(utts), data)
        speakers = sorted({ln.split()[1] for ln in (data / "utt2spk").read_text().splitlines()})
        jobs = [speakers[:len(speakers) // 2], speakers[len(speakers) // 2:]]  # as split_data.sh: in order
        decode = s5 / "exp" / "chain" / "tdnn" / f"decode_{name}"
        decode.mkdir(parents=True)
        (decode / "num_jobs").write_text("2\n")
        for n, spk in enumerate(jobs, 1):
            job_utts = {u for u in utts if u.rsplit("-", 1)[0] in spk}
            subset_data_dir(dev_set / "data", job_utts, data / "split2" / str(n))
            with gzip.open(decode / f"lat.{n}.gz", "wt") as f:
                for w, a, lm, nolm in zip(*nbest.values()):
                    key = w.split()[0]
                    utt = key.rsplit("-", 1)[0]
                    if utt in job_utts:
                        g, ac, n_lm = float(lm.split()[1]), float(a.split()[1]), float(lm.split()[1]) - float(
                            nolm.split()[1])
                        f.write(f"{utt}\t{' '.join(w.split()[1:])}\t{g!r}\t{ac!r}\t{n_lm!r}\n")
        sets[name] = utts
    return sets


def subset_data_dir(dev_data: Path, utts: set, out: Path) -> None:
    """The dev set's data dir restricted to utts (text, segments, utt2spk, spk2utt)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("text", "segments", "utt2spk"):
        lines = [line for line in (dev_data / name).read_text().splitlines() if line.split()[0] in utts]
        (out / name).write_text("".join(line + "\n" for line in lines))
    spk: dict = {}
    for line in (out / "utt2spk").read_text().splitlines():
        utt, s = line.split()
        spk.setdefault(s, []).append(utt)
    (out / "spk2utt").write_text("".join(f"{s} {' '.join(u)}\n" for s, u in sorted(spk.items())))


def standin_bin(tmp: Path) -> Path:
    b = tmp / "bin"
    write_exe(b / "run.pl", RUN_PL)
    for p in LATTICE_PROGS:
        write_exe(b / p, f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" {p} "$@"\n')
    for name, module in COMMANDS.items():
        write_exe(b / name,
                  f'#!/bin/sh\nPYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" -m rescore.cli.{module} "$@"\n')
    return b


def wer_of(ref: Path, hyp: Path, env: dict) -> str:
    """rescore-wer's '%WER x.xx [ e / n' of hyp against ref."""
    r = subprocess.run([str(Path(env["PATH"].split(os.pathsep)[0]) / "rescore-wer"), "--allow-missing", str(ref),
                        str(hyp)], env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("%WER"))
    return line.split(",")[0]


def printed_wers(out: str, step: str) -> dict:
    """What a step printed at its end: the grid lines (WER part, file) and the lines at its setting."""
    got = {}
    for what in ("first pass", "rescored"):
        m = re.search(rf"{step}:   {what},? *best of local/score.sh's grid: (%WER [\d.]+ \[ \d+ / \d+),[^\]]*\] (\S+)",
                      out)
        assert m, f"no '{what}' grid line in the output:\n{out}"
        got[f"{what} grid"] = (m.group(1), m.group(2))
    m = re.search(rf"{step}:   first pass, rank 1 of the N-best at inv-acwt \S+ \((\S+)\): (%WER [\d.]+ \[ \d+ / \d+),",
                  out)
    assert m, out
    got["first pass setting"] = (m.group(2), m.group(1))
    m = re.search(rf"{step}:   rescored \((\S+)\): (%WER [\d.]+ \[ \d+ / \d+),", out)
    assert m, out
    got["rescored setting"] = (m.group(2), m.group(1))
    return got


@pytest.mark.slow
@pytest.mark.shared_data
def test_kaldi_quickstart_runs(tmp_path):
    dev_set = shared_data_path("tts-wikitext2-dev")
    lm_text = shared_data_path("wikitext2-asr")
    if not shutil.which("perl"):
        pytest.skip("perl (Kaldi's utils/best_wer.sh) is not installed")
    home = tmp_path / "home"
    home.mkdir()
    sets = standin_layout(home, dev_set, lm_text)
    s5 = home / RECIPE
    bindir = standin_bin(tmp_path)
    env = {"PATH": os.pathsep.join([str(bindir), str(system_bin())]), "HOME": str(home), "LC_ALL": "C",
           "OMP_NUM_THREADS": "1"}
    # the user's decodes were scored by local/score.sh before (the first pass's wer_*)
    for name in sets:
        subprocess.run(["local/score.sh", "--cmd", "run.pl", f"data/{name}", "data/lang_test",
                        f"exp/chain/tdnn/decode_{name}"], cwd=s5, env=env, check=True)

    _, blocks = page_blocks()
    script = "\n".join(blocks)
    for page_string, tiny in TINY.items():
        script = script.replace(page_string, tiny)
    assert "--epochs 1" in script and "--hidden 16" in script
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=home, env=env, capture_output=True,
                       text=True, timeout=600)
    out = r.stdout + r.stderr
    (tmp_path / "output.txt").write_text(out)  # (for a look after a failure)
    assert r.returncode == 0, out

    # the LM text: transcripts without ids, the corpus after them, every 50th transcript line held out
    lm = s5 / "data" / "rescore_lm"
    train, valid = (lm / "train.txt").read_text().splitlines(), (lm / "valid.txt").read_text().splitlines()
    assert len(valid) == 6 and len(train) == 294 + 100 and not train[0].startswith("train-")
    assert "outside words.txt" in out
    # tuned on the dev step's two jobs together, the setting applied on test
    params = json.loads((s5 / "exp" / "rescore" / "params.json").read_text())
    best = re.search(r"best setting: weight (\S+)\s+inv_acwt (\S+)\s+wip (\S+)", out)
    assert best and [float(x) for x in best.groups()] == [params["weight"], params["inv_acwt"], params["wip"]]
    m = re.search(r"tuned on (\d+) utterances", out)
    assert m and int(m.group(1)) == len(sets["dev"])
    test_out = s5 / "exp" / "chain" / "tdnn" / "decode_test_rescore"
    log = (test_out / "log" / "rescore.log").read_text()
    assert f"--weight {params['weight']:g} " in log or f"--weight {params['weight']} " in log, log[:500]
    assert f"setting from exp/rescore/params.json: weight {params['weight']}" in out
    # the N-best lists of both sets cut at the step's --inv-acwt (10), as on the set tuned on
    assert out.count("to 100-best lists (acoustic scale 0.1)") == 2, out

    # each step's printed WERs are rescore-wer's on the files they come from
    step = str(home / "rescore" / "recipes" / "steps" / "lmrescore_nbest.sh")
    outputs = out.split(f"{step}: WER against ")
    assert len(outputs) == 3, out  # dev, then test
    for name, part in zip(("dev", "test"), outputs[1:]):
        data = s5 / "data" / name
        got = printed_wers(f"{step}: WER against " + part, re.escape(step))
        for what in ("first pass grid", "rescored grid"):
            wer, wer_file = got[what]
            lmwt, wip = Path(wer_file).name.split("_")[1:]
            hyp = s5 / Path(wer_file).parent / "scoring_kaldi" / f"penalty_{wip}" / f"{lmwt}.txt"
            expected_dir = f"exp/chain/tdnn/decode_{name}" + ("_rescore" if what == "rescored grid" else "")
            assert Path(wer_file).parent == Path(expected_dir), wer_file
            assert wer == wer_of(data / "text", hyp, env), (name, what)
        for what in ("first pass setting", "rescored setting"):
            wer, hyp = got[what]
            assert wer == wer_of(data / "text", s5 / hyp, env), (name, what)
        # the rescored 1-best covers every utterance of the set, from both jobs
        text = s5 / f"exp/chain/tdnn/decode_{name}_rescore" / "text"
        assert sorted(ln.split()[0] for ln in text.read_text().splitlines()) == sets[name]
    # the comparison command of the page ran: both systems and the interval
    assert "paired bootstrap" in out
