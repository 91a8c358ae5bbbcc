#!/usr/bin/env python3
"""Check that two versions of rescore write byte-identical outputs on the dev N-best set.

A refactor must not change what the commands write. This runs, with the code of a base git
revision and with the working tree (or another checkout), the same commands on the same inputs:

  rescore-nbest   one model, no carry; one model, rescored carry; two models mixed, carried;
                  an LSTM with a softmax head at --precision int8 on one thread (the fused
                  one-call levels path), also with RESCORE_NATIVE=0 and RESCORE_NATIVE=generic,
                  --normalize none, both trie schedules (levels, segments), the neural cache;
                  a Hugging Face model (--model hf:DIR, a tiny random GPT-2)
  rescore-tune    plain and cross-validated, on the no-carry run's NN costs
  rescore-wer     first pass against the carried 1-best, bootstrap over recordings, JSON + plot
  rescore-lattice cover and apply on lattices whose paths are the first utterances' N-best lists

and compares every output file byte for byte (logs aside, which hold timings; a manifest.json
may differ in its writer's pid and time). The two models (an
LSTM with the implicit pointer and memory, and a Transformer with the class-factored output) are
trained briefly by the base revision, so both versions read the same checkpoints; so are a
self-normalised LSTM with a softmax head and the tiny GPT-2 (saved with save_pretrained).

With ``--fixtures`` it runs instead, without models or shared data, every format's commands on
the repository's fixtures (tests/fixtures/nbest-small and tests/fixtures/ecosystems):
rescore-convert-nbest from each format to TSV and from TSV to Kaldi, ESPnet, icefall and NeMo,
and rescore-nbest on each format (with --write-format, --score-weight, --split). One difference is
allowed there, by name: the TSV format's name (its former name 'interchange', now 'tsv') as the
value of a ``format`` key of report.json and manifest.json.

Example:
  python -m tools.bench.same_outputs --base main --out /tmp/same --utts 200
  python -m tools.bench.same_outputs --base main --out /tmp/same-fixtures --fixtures
  (exit 0: identical; 1: a difference, listed file by file)
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tools.common import REPO, SHARED_DATA as SHARED

DEV = SHARED / "tts-wikitext2-dev"
TRAIN = SHARED / "wikitext2-asr" / "train.txt"
VALID = SHARED / "wikitext2-asr" / "valid.nodev.txt"
ACWT = 1 / 9.5


def log(msg: str) -> None:
    print(f"same_outputs: {msg}", file=sys.stderr, flush=True)


def run(tree: Path, module: str, *args, cwd: Path, name: str, env: dict = None) -> None:
    """One command with the code of ``tree``; its stdout kept as an output, its stderr as a log;
    ``env``: extra environment variables."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", **(env or {}))
    cwd.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=cwd)
    (cwd / f"{name}.stdout").write_text(r.stdout)
    (cwd / f"{name}.log").write_text(r.stderr)
    if r.returncode != 0:
        sys.exit(f"same_outputs: {module} {' '.join(map(str, args))} failed in {tree} "
                 f"(exit {r.returncode}):\n{r.stderr[-3000:]}")


def export(rev: str, dst: Path) -> Path:
    """The tree of ``rev`` (tracked files only) unpacked into ``dst``."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dst)
    return dst


def build(tree: Path) -> None:
    """The C kernels of ``tree`` compiled in place (the runs with RESCORE_NATIVE=1 use them)."""
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=tree,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"same_outputs: building the kernels in {tree} failed:\n{r.stderr[-3000:]}")


def subset(out: Path, n_utts: int, lattice_utts: int) -> tuple:
    """The first ``n_utts`` utterances of the dev set: an N-best dir and its data dir."""
    nb, data = out / "input" / "nbest", out / "input" / "data"
    if (nb / "done").exists():
        return nb, data
    nb.mkdir(parents=True, exist_ok=True)
    keys = [line.split(None, 1)[0] for line in (DEV / "nbest" / "acwt").read_text().splitlines()]
    utts = []
    for k in keys:
        u = k.rsplit("-", 1)[0]
        if not utts or utts[-1] != u:
            utts.append(u)
    keep = set(utts[:n_utts])
    for name in ("words_text", "words", "acwt", "lmwt.withlm", "lmwt.nolm"):
        lines = (DEV / "nbest" / name).read_text().splitlines(keepends=True)
        (nb / name).write_text("".join(x for x in lines if x.split(None, 1)[0].rsplit("-", 1)[0] in keep))
    (nb / "words.txt").write_bytes((DEV / "lang" / "words.txt").read_bytes())
    write_data(data, keep)
    write_data(out / "input" / "lattice-data", set(utts[:lattice_utts]))
    (nb / "done").write_text("")
    return nb, data


def write_data(data: Path, keep: set) -> None:
    """The dev data dir reduced to the utterances of ``keep``."""
    data.mkdir(parents=True, exist_ok=True)
    for name in ("text", "utt2spk", "segments"):
        lines = (DEV / "data" / name).read_text().splitlines(keepends=True)
        (data / name).write_text("".join(x for x in lines if x.split(None, 1)[0] in keep))
    spks = {x.split()[1] for x in (data / "utt2spk").read_text().splitlines()}
    (data / "spk2utt").write_text("".join(x for x in (DEV / "data" / "spk2utt").read_text().splitlines(True)
                                          if x.split()[0] in spks))


def train_models(base: Path, out: Path) -> tuple:
    """Three small models trained for a few hundred batches by the base revision, and a tiny
    random GPT-2 saved by its tools/bench/bench_hf.py."""
    common = ["--train", TRAIN, "--valid", VALID, "--bptt", 35, "--batch-size", 20, "--threads", 1,
              "--epochs", 2, "--epoch-batches", 150, "--max-vocab", 10000, "--device", "cpu"]
    models = []
    for name, extra in (("lstm-pointer", ["--arch", "lstm", "--head", "pointer", "--memory-aug",
                                          "--hidden", 64, "--layers", 1]),
                        ("transformer-class", ["--arch", "transformer", "--head", "softmax", "--hidden", 64,
                                               "--layers", 2, "--output", "class", "--classes", 100,
                                               "--optimizer", "adam"]),
                        ("lstm-softmax", ["--arch", "lstm", "--head", "softmax", "--hidden", 64,
                                          "--layers", 2, "--self-norm", 0.1])):
        d = out / "models" / name
        if not (d / "model.pt").exists():
            log(f"training {name}")
            run(base, "rescore.cli.train_lm", *common, *extra, "--out-dir", d, cwd=out / "models", name=name)
        models.append(d / "model.pt")
    hf = out / "models" / "gpt2"
    if not (hf / "config.json").exists():
        log("saving a tiny random GPT-2")
        lines = [x for x in TRAIN.read_text().splitlines()[:3000] if x.strip()]
        # (the base revision's own tool: tools/bench_hf.py before the tools were grouped)
        bench_hf = next(p for p in (base / "tools" / "bench" / "bench_hf.py", base / "tools" / "bench_hf.py")
                        if p.exists())
        code = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("bench_hf", {str(bench_hf)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.save_random_gpt2({str(hf)!r}, sys.stdin.read().splitlines(), vocab=500, layers=2, dim=32, heads=2,
                   positions=256, scale=4.0)
"""
        subprocess.run([sys.executable, "-c", code], input="\n".join(lines), text=True, check=True,
                       env=dict(os.environ, PYTHONPATH=str(base)))
    models.append(f"hf:{hf}")
    return tuple(models)


def union_lattices(nb: Path, path: Path, n_utts: int) -> None:
    """Text CompactLattices whose paths are the first ``n_utts`` utterances' N-best entries, as
    Kaldi's nbest-to-lattice builds them (entry 1 from the start state, the others through an
    epsilon arc; graph cost on the first word, acoustic cost spread over the words)."""
    def table(name):
        return [line.split() for line in (nb / name).read_text().splitlines()]

    rows = zip(table("words"), table("acwt"), table("lmwt.withlm"))
    by_utt = {}
    for w, a, g in rows:
        utt = w[0].rsplit("-", 1)[0]
        if utt not in by_utt and len(by_utt) == n_utts:
            break
        by_utt.setdefault(utt, []).append(([int(x) for x in w[1:]], float(a[1]), float(g[1])))
    lines = []
    for utt, entries in by_utt.items():
        lines.append(utt)
        n, finals = 1, []
        for k, (ids, ac, g) in enumerate(entries):
            s = 0
            if k:
                lines.append(f"0\t{n}\t0\t0,0,")
                s, n = n, n + 1
            for j, w in enumerate(ids):
                lines.append(f"{s}\t{n}\t{w}\t{g if j == 0 else 0.0:.6g},{ac / len(ids):.6g},")
                s, n = n, n + 1
            finals.append(f"{s}\t{0.0 if ids else g:.6g},{0.0 if ids else ac:.6g},")
        lines.extend(finals)
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def cover_archives(tree: Path, cover: Path, nb: Path, dst: Path) -> None:
    """The cover paths as an N-best dir (what nbest-to-linear and the old-LM removal would leave),
    each path's lmwt.nolm taken from its N-best entry; made with the tree's own lattice reader."""
    code = f"""
import sys
try:  # the module's place before and after the engine's packages
    from rescore.nbest.lattice import read_lattices
except ImportError:
    from rescore.lattice import read_lattices
nb, dst = {str(nb)!r}, {str(dst)!r}
tab = lambda n: {{l.split()[0]: l.split()[1:] for l in open(nb + '/' + n)}}
words, nolm = tab('words'), tab('lmwt.nolm')
entry = {{(k.rsplit('-', 1)[0], tuple(v)): k for k, v in words.items()}}
import os; os.makedirs(dst, exist_ok=True)
f = {{n: open(dst + '/' + n, 'w') for n in ('words', 'acwt', 'lmwt.withlm', 'lmwt.nolm')}}
for c in read_lattices({str(cover)!r}):
    ids = [a.word for a in c.arcs if a.word]
    ac = sum(a.ac for a in c.arcs) + sum(x[1] for x in c.finals.values())
    g = sum(a.graph for a in c.arcs) + sum(x[0] for x in c.finals.values())
    k = entry[(c.key.rsplit('-', 1)[0], tuple(map(str, ids)))]
    f['words'].write(c.key + ' ' + ' '.join(map(str, ids)) + ' \\n')
    f['acwt'].write(f'{{c.key}} {{ac!r}} \\n'); f['lmwt.withlm'].write(f'{{c.key}} {{g!r}} \\n')
    f['lmwt.nolm'].write(f'{{c.key}} {{nolm[k][0]}} \\n')
"""
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    (dst / "words.txt").write_bytes((nb / "words.txt").read_bytes())


def run_all(tree: Path, out: Path, nb: Path, data: Path, models: tuple, lattice_utts: int) -> None:
    a, b, c, hf = models
    nbest = ["--data-dir", data, "--train-text", TRAIN, "--device", "cpu", "--weight", 0.5,
             "--inv-acwt", 9.5, "--wip", 0.5]
    log(f"{tree}: rescore-nbest")
    run(tree, "rescore.cli.nbest", nb, out / "none", *nbest, "--model", a, "--state-carry", "none",
        "--oov-penalty", 0, cwd=out, name="nbest-none")
    run(tree, "rescore.cli.nbest", nb, out / "carry", *nbest, "--model", a, "--state-carry", "rescored",
        "--oov-penalty", "auto", cwd=out, name="nbest-carry")
    run(tree, "rescore.cli.nbest", nb, out / "two", *nbest, "--model", a, "--model", b, "--mix", "0.6,0.4",
        "--state-carry", "rescored", "--oov-penalty", "auto", cwd=out, name="nbest-two")
    log(f"{tree}: rescore-nbest, kernels and schedules")
    one = [*nbest, "--model", c, "--oov-penalty", "auto"]
    for native in ("1", "0", "generic"):  # int8 on one thread: the fused one-call levels path
        run(tree, "rescore.cli.nbest", nb, out / f"int8-native{native}", *one, "--precision", "int8",
            "--normalize", "none", cwd=out, name=f"nbest-int8-native{native}", env={"RESCORE_NATIVE": native})
    for schedule in ("levels", "segments"):
        for native in ("1", "0"):
            run(tree, "rescore.cli.nbest", nb, out / f"{schedule}-native{native}", *one, "--schedule", schedule,
                cwd=out, name=f"nbest-{schedule}-native{native}", env={"RESCORE_NATIVE": native})
    run(tree, "rescore.cli.nbest", nb, out / "exact-none", *one, "--normalize", "none", "--schedule", "levels",
        cwd=out, name="nbest-exact-none")
    run(tree, "rescore.cli.nbest", nb, out / "cache", *nbest, "--model", c, "--cache-window", 100,
        "--state-carry", "rescored", "--oov-penalty", "auto", cwd=out, name="nbest-cache")
    run(tree, "rescore.cli.nbest", nb, out / "hf", *nbest, "--model", hf, "--state-carry", "rescored",
        "--hf-context", 64, cwd=out, name="nbest-hf")
    log(f"{tree}: rescore-tune")
    grid = ["--weights", "0:1:0.25", "--inv-acwts", "8:12:2", "--wips", "0:1:0.5"]
    nn = out / "none" / "lmwt.nn"
    run(tree, "rescore.cli.tune", nb, "--data-dir", data, "--nn-costs", nn, *grid,
        "--params-out", out / "tune" / "params.json", cwd=out / "tune", name="tune")
    run(tree, "rescore.cli.tune", nb, "--data-dir", data, "--nn-costs", nn, *grid, "--cross-validate",
        "--hyp-out", out / "tune" / "cv.text", "--report", out / "tune" / "cv.json", cwd=out / "tune",
        name="tune-cv")
    log(f"{tree}: rescore-wer")
    first = nb.parent / "first-pass.text"
    run(tree, "rescore.cli.wer", data / "text", f"first-pass={first}",
        f"rescored={out / 'carry' / 'text'}", "--train-text", TRAIN,
        "--groups", data / "segments", "--report", out / "wer" / "compare.json",
        "--plot", out / "wer" / "compare.png", cwd=out / "wer", name="wer")
    log(f"{tree}: rescore-lattice")
    lat = nb.parent / "lattices.txt"
    lo = out / "lattice"
    run(tree, "rescore.cli.lattice", "cover", "--acoustic-scale", ACWT, lat, lo / "cover.txt", cwd=lo, name="cover")
    cover_archives(tree, lo / "cover.txt", nb, lo / "archives")
    run(tree, "rescore.cli.nbest", lo / "archives", lo / "archives", "--data-dir", nb.parent / "lattice-data",
        "--model", a,
        "--device", "cpu", "--weight", 0.5, "--inv-acwt", 9.5, "--oov-penalty", 0, cwd=lo, name="cover-nbest")
    run(tree, "rescore.cli.lattice", "apply", "--acoustic-scale", ACWT, "--weight", 0.5, lat, lo / "archives",
        lo / "rescored.txt", cwd=lo, name="apply")


FORMAT_NAMES = {"interchange": "tsv"}  # the formats renamed (their former names are still accepted)


def _renamed(j):
    """A JSON value with every ``format`` key's former format name as its current one."""
    if isinstance(j, dict):
        return {k: FORMAT_NAMES.get(v, v) if k == "format" and isinstance(v, str) else _renamed(v)
                for k, v in j.items()}
    return [_renamed(x) for x in j] if isinstance(j, list) else j


def same_file(a: Path, b: Path) -> bool:
    """Byte-identical; a manifest.json may differ only in who wrote it and when, a manifest.json
    or report.json also in a format's name (FORMAT_NAMES), and so a manifest.json in the size and
    hash of its report.json (compared on its own)."""
    if filecmp.cmp(a, b, shallow=False):
        return True
    if a.name not in ("manifest.json", "report.json"):
        return False
    ja, jb = (_renamed(json.loads(p.read_text())) for p in (a, b))
    if a.name == "report.json":
        return ja == jb
    for j in (ja, jb):
        j.pop("written_by", None)
        j.pop("time", None)
        for o in j.get("outputs", []):
            if isinstance(o, dict) and Path(str(o.get("path"))).name == "report.json":
                o.pop("bytes", None)
                o.pop("sha256", None)
    return ja == jb


def compare(a: Path, b: Path) -> list:
    """Relative paths of files that differ or exist on one side only (``*.log`` aside)."""
    files = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | \
            {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    bad = []
    for rel in sorted(files):
        if rel.suffix == ".log":
            continue
        pa, pb = a / rel, b / rel
        if not (pa.is_file() and pb.is_file() and same_file(pa, pb)):
            bad.append(str(rel))
    return bad


def run_fixtures(tree: Path, out: Path, fx: Path) -> None:
    """Every format's commands on the fixtures ``fx`` (a copy of tests/fixtures), into ``out``."""
    # (the converter's module before and after its rename)
    convert = "rescore.cli.convert" if (tree / "rescore" / "cli" / "convert.py").is_file() else \
        "rescore.cli.interchange"
    nb, eco, c = fx / "nbest-small", fx / "ecosystems", out / "convert"
    tsv, data = c / "nbest-small.tsv", ["--data-dir", fx / "nbest-small" / "data"]
    espnet = [eco / "espnet" / "decode_asr_nbest3" / "test_clean", "--format", "espnet", "--data-dir",
              eco / "espnet" / "data" / "test_clean"]
    icefall = [eco / "icefall" / "nbest-test-clean.jsonl", "--format", "icefall"]
    nemo = [eco / "nemo" / "preds_out_width3_alpha0.5_beta1.0.tsv", "--format", "nemo", "--manifest",
            eco / "nemo" / "test_manifest.json", "--nemo-text-processing", "lowercase,rm_punctuation"]
    conversions = {
        "nbest-small.tsv": [nb, tsv],
        "kaldi": [tsv, c / "kaldi", "--to", "kaldi", "--words-txt", nb / "words.txt"],
        "espnet": [tsv, c / "espnet", "--to", "espnet"],
        "icefall": [tsv, c / "icefall", "--to", "icefall", *data],
        "espnet.tsv": [espnet[0], c / "espnet.tsv", "--from", "espnet"],
        "espnet1.tsv": [eco / "espnet1" / "decode_test_clean_beam10_nbest2", c / "espnet1.tsv", "--from", "espnet"],
        "icefall.tsv": [icefall[0], c / "icefall.tsv", "--from", "icefall"],
        "nemo.tsv": [nemo[0], c / "nemo.tsv", "--from", "nemo", "--manifest", nemo[4]],
        "nemo-maes.tsv": [eco / "nemo" / "preds_out_maes_bw3_ma2_mg2.3.tsv", c / "nemo-maes.tsv", "--from", "nemo",
                          "--manifest", eco / "nemo" / "segments_manifest.json"],
        "nemo": [c / "nemo.tsv", c / "nemo", "--to", "nemo", "--manifest", nemo[4]],
    }
    for name, args in conversions.items():
        run(tree, convert, *args, cwd=c, name=f"convert-{name}")
    runs = {
        "kaldi": [nb, *data],
        "tsv": [tsv, *data],
        "tsv-weighted": [tsv, *data, "--score-weight", "ac=0.1", "--wip", 0.5],
        "tsv-split": [tsv, *data, "--split", "1/2", "--conv-batch", 1],
        "espnet": [espnet[0], *espnet[1:], "--write-format", "espnet"],
        "icefall": [icefall[0], *icefall[1:], "--write-format", "icefall"],
        "nemo": [nemo[0], *nemo[1:], "--write-format", "nemo"],
    }
    for name, (src, *rest) in runs.items():
        run(tree, "rescore.cli.nbest", src, out / "nbest" / name, *rest, cwd=out / "nbest", name=f"nbest-{name}")


def compare_fixtures(args) -> int:
    """--fixtures: run_fixtures with the base revision and the new tree, compared."""
    out = args.out.resolve()
    base = export(args.base, out / "code-base")
    fx = out / "fixtures"
    shutil.rmtree(fx, ignore_errors=True)
    shutil.copytree(REPO / "tests" / "fixtures", fx)
    for name, tree in (("base", base), ("new", args.new.resolve())):
        work = out / "runs" / "current"  # one path for both, since outputs name their paths
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out / "runs" / name, ignore_errors=True)
        run_fixtures(tree, work, fx)
        work.rename(out / "runs" / name)
    bad = compare(out / "runs" / "base", out / "runs" / "new")
    n = sum(1 for p in (out / "runs" / "base").rglob("*") if p.is_file() and p.suffix != ".log")
    if bad:
        print(f"same_outputs: {len(bad)} of {n} output files on the fixtures differ:")
        for rel in bad:
            print(f"  {rel}")
        return 1
    print(f"same_outputs: all {n} output files on the fixtures byte-identical (base {args.base}, new {args.new})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m tools.bench.same_outputs --base main --out /tmp/same",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision of the code before the change")
    ap.add_argument("--new", type=Path, default=REPO, help="checkout with the code after it (default: this one)")
    ap.add_argument("--out", type=Path, required=True, help="work dir (models are reused from a previous run)")
    ap.add_argument("--utts", type=int, default=627, help="dev utterances to rescore (default: all 627)")
    ap.add_argument("--lattice-utts", type=int, default=40, help="utterances for the lattice commands")
    ap.add_argument("--data", type=Path, default=SHARED,
                    help="the shared data folder (default: ../shared/data beside the checkout)")
    ap.add_argument("--fixtures", action="store_true",
                    help="run every format's commands on the repository's fixtures instead (no models, no data)")
    args = ap.parse_args(argv)
    if args.fixtures:
        return compare_fixtures(args)
    global DEV, TRAIN, VALID
    DEV = args.data / "tts-wikitext2-dev"
    TRAIN, VALID = args.data / "wikitext2-asr" / "train.txt", args.data / "wikitext2-asr" / "valid.nodev.txt"
    if not DEV.is_dir():
        return f"same_outputs: needs the dev N-best set at {DEV}"
    out = args.out.resolve()
    base = export(args.base, out / "code-base")
    nb, data = subset(out, args.utts, args.lattice_utts)
    models = train_models(base, out)
    first = nb.parent / "first-pass.text"
    with open(first, "w") as f:  # rank 1 of each utterance: the first pass
        for line in (nb / "words_text").read_text().splitlines():
            key, _, words = line.partition(" ")
            if key.endswith("-1"):
                f.write(f"{key[:-2]} {words.strip()}\n")
    union_lattices(nb, nb.parent / "lattices.txt", args.lattice_utts)
    for name, tree in (("base", base), ("new", args.new.resolve())):
        build(tree)
        work = out / "runs" / "current"  # one path for both, since outputs name their paths
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out / "runs" / name, ignore_errors=True)
        run_all(tree, work, nb, data, models, args.lattice_utts)
        work.rename(out / "runs" / name)
    bad = compare(out / "runs" / "base", out / "runs" / "new")
    n = sum(1 for p in (out / "runs" / "base").rglob("*") if p.is_file() and p.suffix != ".log")
    if bad:
        print(f"same_outputs: {len(bad)} of {n} output files differ:")
        for rel in bad:
            print(f"  {rel}")
        return 1
    print(f"same_outputs: all {n} output files byte-identical ({args.utts} utterances; base {args.base}, "
          f"new {args.new})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
