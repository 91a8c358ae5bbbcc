"""Stand-ins for the Kaldi programs of the N-best step and for a recipe's local/score.sh, for the
tests that run a whole decode of several jobs without Kaldi (tests/test_quickstart.py).

A "lattice" here is what it stands for reduced to its paths: a gzipped text archive with one line
per path, ``<utt> <TAB> <word ids> <TAB> <graph cost> <TAB> <acoustic cost> <TAB> <n-gram LM
cost>`` (the last: the part of the graph cost that the decoding LM contributed, what
lattice-lmrescore-const-arpa --lm-scale=-1.0 takes out). Each program plays its part on such
archives with Kaldi's semantics as the step uses them:

* lattice-to-nbest --acoustic-scale=a --n=N: per utterance the N paths of lowest
  graph + a * acoustic (ties in archive order), keys ``<utt>-1 .. <utt>-n``;
* lattice-lmrescore-const-arpa --lm-scale=-1.0 RSPEC LM WSPEC: graph cost minus the n-gram cost;
* nbest-to-linear RSPEC ali words lm ac: Kaldi's four text archives (the alignment empty);
* linear-to-nbest ali words lm ac WSPEC, nbest-to-lattice: back to paths, keys ``<utt>-<k>``
  grouped by utterance (the n-gram part no longer known: 0);
* lattice-rmali: a copy.

local/score.sh DATA LANG DIR (as Kaldi's steps/score_kaldi.sh): for every LMWT in 7..17 and
insertion penalty in 0.0, 0.5, 1.0, each utterance's path of lowest graph + acoustic / LMWT +
penalty * words, written as ``DIR/scoring_kaldi/penalty_P/LMWT.txt`` (words) and scored against
DATA/text into ``DIR/wer_LMWT_P`` in compute-wer's format, with its own edit distance.

Run as ``python kaldi_lattice_standin.py PROGRAM ARGS...`` (tests link each program name to a
small script that does that).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path


def read_spec(spec: str) -> str:
    """The text of a Kaldi rspecifier: ark:-, ark[,t]:FILE, ark:COMMAND|."""
    target = spec.split(":", 1)[1]
    if target == "-":
        return sys.stdin.read()
    if target.endswith("|"):
        return subprocess.run(target[:-1], shell=True, check=True, capture_output=True).stdout.decode()
    return Path(target).read_text()


def write_spec(spec: str, text: str) -> None:
    """Write a Kaldi wspecifier: ark:-, ark[,t]:FILE, ark:|COMMAND."""
    target = spec.split(":", 1)[1]
    if target == "-":
        sys.stdout.write(text)
    elif target.startswith("|"):
        subprocess.run(target[1:], shell=True, input=text.encode(), check=True)
    elif target != "/dev/null":
        Path(target).write_text(text)


def parse_paths(text: str) -> "OrderedDict[str, list]":
    """lattice key -> [(key, ids, graph, acoustic, lm)] of its paths, in archive order."""
    out: "OrderedDict[str, list]" = OrderedDict()
    for line in text.splitlines():
        key, ids, graph, ac, lm = line.split("\t")
        out.setdefault(key, []).append((key, ids, float(graph), float(ac), float(lm)))
    return out


def path_line(key: str, ids: str, graph: float, ac: float, lm: float) -> str:
    return f"{key}\t{ids}\t{graph!r}\t{ac!r}\t{lm!r}\n"


def options(args: list) -> tuple:
    opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--"))
    return opts, [a for a in args if not a.startswith("--")]


def lattice_to_nbest(args: list) -> None:
    opts, (rspec, wspec) = options(args)
    scale, n = float(opts["acoustic-scale"]), int(opts["n"])
    lines = []
    for utt, paths in parse_paths(read_spec(rspec)).items():
        best = sorted(paths, key=lambda p: p[2] + scale * p[3])[:n]  # (sorted is stable)
        lines += [path_line(f"{utt}-{k}", ids, g, a, lm) for k, (_, ids, g, a, lm) in enumerate(best, 1)]
    write_spec(wspec, "".join(lines))


def remove_lm(args: list) -> None:
    opts, (rspec, _lm, wspec) = options(args)
    assert float(opts["lm-scale"]) == -1.0, opts
    lines = [path_line(k, ids, g - lm, a, 0.0) for paths in parse_paths(read_spec(rspec)).values()
             for k, ids, g, a, lm in paths]
    write_spec(wspec, "".join(lines))


def nbest_to_linear(args: list) -> None:
    rspec, ali, words, lm, ac = args
    paths = [p for ps in parse_paths(read_spec(rspec)).values() for p in ps]
    write_spec(ali, "".join(f"{k} \n" for k, *_ in paths))
    write_spec(words, "".join(f"{k} {ids} \n".replace("  ", " ") for k, ids, *_ in paths))
    write_spec(lm, "".join(f"{k} {g!r}\n" for k, _, g, _, _ in paths))
    write_spec(ac, "".join(f"{k} {a!r}\n" for k, _, _, a, _ in paths))


def linear_to_nbest(args: list) -> None:
    ali_s, words_s, lm_s, ac_s, wspec = args

    def table(spec: str) -> "OrderedDict[str, str]":
        return OrderedDict((ln.split(" ", 1) + [""])[:2] for ln in read_spec("ark:" + spec.split(":", 1)[1])
                           .splitlines())

    ali, words, lm, ac = (table(s) for s in (ali_s, words_s, lm_s, ac_s))
    lines = []
    for key in ali:  # Kaldi's reader: ali drives, the others looked up
        if key not in words or key not in lm or key not in ac:
            sys.exit(f"linear-to-nbest: no entry for {key}")
        lines.append(path_line(key, words[key].strip(), float(lm[key]), float(ac[key]), 0.0))
    write_spec(wspec, "".join(lines))


def nbest_to_lattice(args: list) -> None:
    """The entries <utt>-<k> of an N-best archive as the paths of lattice <utt>."""
    _, (rspec, wspec) = options(args)
    lines = [path_line(k.rsplit("-", 1)[0], ids, g, a, lm) for ps in parse_paths(read_spec(rspec)).values()
             for k, ids, g, a, lm in ps]
    write_spec(wspec, "".join(lines))


def copy(args: list) -> None:
    _, (rspec, wspec) = options(args)
    write_spec(wspec, read_spec(rspec))


def edit_errors(ref: list, hyp: list) -> tuple:
    """(insertions, deletions, substitutions) of a minimum edit-distance alignment."""
    # d[j] = (cost, ins, del, sub) for ref[:i] against hyp[:j]
    prev = [(j, j, 0, 0) for j in range(len(hyp) + 1)]
    for i in range(1, len(ref) + 1):
        cur = [(i, 0, i, 0)]
        for j in range(1, len(hyp) + 1):
            same = ref[i - 1] == hyp[j - 1]
            d = prev[j - 1]
            options_ = [(d[0] + (0 if same else 1), d[1], d[2], d[3] + (0 if same else 1))]
            d = prev[j]
            options_.append((d[0] + 1, d[1], d[2] + 1, d[3]))
            d = cur[j - 1]
            options_.append((d[0] + 1, d[1] + 1, d[2], d[3]))
            cur.append(min(options_))
        prev = cur
    _, ins, dels, subs = prev[-1]
    return ins, dels, subs


def score(args: list) -> None:
    rest = list(args)
    while rest and rest[0].startswith("--"):
        rest = rest[2:]
    data, lang, d = (Path(x) for x in rest)
    words = dict(line.split()[::-1] for line in (lang / "words.txt").read_text().splitlines() if line.strip())
    refs = {ln.split()[0]: ln.split()[1:] for ln in (data / "text").read_text().splitlines() if ln.strip()}
    nj = int((d / "num_jobs").read_text())
    paths: "OrderedDict[str, list]" = OrderedDict()
    for n in range(1, nj + 1):
        with gzip.open(d / f"lat.{n}.gz", "rt") as f:
            paths.update(parse_paths(f.read()))
    for wip in ("0.0", "0.5", "1.0"):
        out = d / "scoring_kaldi" / f"penalty_{wip}"
        out.mkdir(parents=True, exist_ok=True)
        for lmwt in range(7, 18):
            hyps = {}
            for utt, ps in paths.items():
                best = min(ps, key=lambda p: p[2] + p[3] / lmwt + float(wip) * len(p[1].split()))
                hyps[utt] = [words[i] for i in best[1].split()]
            (out / f"{lmwt}.txt").write_text("".join(" ".join([u, *h]) + "\n" for u, h in sorted(hyps.items())))
            ins = dels = subs = n_ref = 0
            for u, ref in refs.items():
                i, de, s = edit_errors(ref, hyps.get(u, []))
                ins, dels, subs, n_ref = ins + i, dels + de, subs + s, n_ref + len(ref)
            err = ins + dels + subs
            (d / f"wer_{lmwt}_{wip}").write_text(
                f"compute-wer --text --mode=present ark:{data}/text ark,p:-\n"
                f"%WER {100.0 * err / n_ref:.2f} [ {err} / {n_ref}, {ins} ins, {dels} del, {subs} sub ]\n"
                f"%SER 100.00 [ {len(refs)} / {len(refs)} ]\n"
                f"Scored {len(refs)} sentences, 0 not present in hyp.\n")


PROGRAMS = {"lattice-to-nbest": lattice_to_nbest, "lattice-lmrescore-const-arpa": remove_lm,
            "nbest-to-linear": nbest_to_linear, "linear-to-nbest": linear_to_nbest,
            "nbest-to-lattice": nbest_to_lattice, "lattice-rmali": copy, "score.sh": score}


def main(argv: list) -> None:
    prog, args = os.path.basename(argv[1]), argv[2:]
    PROGRAMS[prog](args)


if __name__ == "__main__":
    main(sys.argv)
