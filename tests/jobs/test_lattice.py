"""rescore-lattice tune (rescore.jobs.lattice): the weight, inv-acwt and penalty by WER on
rescored decode dirs, read through lattice-copy (a stand-in here: the archives are text already);
lattices whose paths are the N-best entries give the N-best tuning's 1-bests."""

from __future__ import annotations

import gzip
import json
import os
import stat

from click.testing import CliRunner

from rescore.cli.lattice import main
from rescore.metrics import word_errors
from rescore.nbest.sets import load_nbest_dir


def write_lattices(nbest_dir, path, scale_graph=1.0):
    """Text CompactLattices whose paths are each utterance's N-best entries (entry 1 from the start
    state, the others through an epsilon arc; graph cost on the first word, acoustic cost spread)."""
    def table(name):
        return [line.split() for line in (nbest_dir / name).read_text().splitlines()]

    by_utt = {}
    for w, a, g in zip(table("words"), table("acwt"), table("lmwt.withlm")):
        by_utt.setdefault(w[0].rsplit("-", 1)[0], []).append(([int(x) for x in w[1:]], float(a[1]),
                                                             scale_graph * float(g[1])))
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
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def stand_in_lattice_copy(bin_dir):
    """lattice-copy 'ark:gunzip -c X|' ark,t:- for archives that are text already."""
    exe = bin_dir / "lattice-copy"
    exe.write_text('#!/bin/sh\nf=${1#ark:gunzip -c }\nf=${f%|}\nexec gunzip -c "$f"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_lattice_tune_finds_the_best_setting(nbest_small, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in_lattice_copy(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    dirs = []
    for w, scale in ((0.5, 1.0), (0.8, 0.2)):
        d = tmp_path / f"w{w}"
        d.mkdir()
        write_lattices(nbest_small, d / "lat.1.gz", scale)
        dirs.append(f"{w}={d}")
    report = tmp_path / "tune.json"
    r = CliRunner().invoke(main, ["tune", "--nbest-dir", str(nbest_small), "--data-dir", str(nbest_small / "data"),
                                  "--words-txt", str(nbest_small / "words.txt"), "--inv-acwts", "8,10",
                                  "--wips", "0,1", "--report", str(report), *dirs])
    assert r.exit_code == 0, r.output
    out = json.loads(report.read_text())
    assert r.output.startswith(f"tuned on {out['tuned_all']['utts']} utterances: WER ")
    best = out["tuned_all"]
    # its WER is that of each utterance's best entry by ac / inv_acwt + scaled graph cost + wip |h|
    nbest = load_nbest_dir(nbest_small, nbest_small / "data", nbest_small / "words.txt")
    scale = 1.0 if best["weight"] == 0.5 else 0.2
    errors = words = 0
    for u in nbest.utterances():
        h = min(u.hyps, key=lambda h: h.ac / best["inv_acwt"] + scale * h.withlm + best["wip"] * len(h.words))
        errors += word_errors(nbest.refs[u.id], list(h.words))
        words += len(nbest.refs[u.id])
    assert abs(100.0 * errors / words - best["wer"]) < 1e-9
    assert out["split_half"]["held_out_utts"] + out["split_half"]["tuned_utts"] == best["utts"]


def test_lattice_tune_names_a_bad_argument(nbest_small, tmp_path):
    base = ["tune", "--nbest-dir", str(nbest_small), "--data-dir", str(nbest_small / "data"),
            "--words-txt", str(nbest_small / "words.txt")]
    r = CliRunner().invoke(main, base + ["nonumber=x"])
    assert r.exit_code == 2 and "W=DIR" in r.output
    r = CliRunner().invoke(main, base + [f"0.5={tmp_path}"])
    assert r.exit_code != 0 and "lat.*.gz" in r.output
