"""Lattice rescoring by path cover (rescore/nbest/lattice.py, rescore-lattice, recipes/steps/
lmrescore_lattice.sh).

* Kaldi's text form of CompactLattices: read, written, read back; bad input named by line.
* The path cover and the arc-cost estimation against slow references that enumerate every path
  of small random lattices (several arcs between the same states, epsilon arcs, final states
  with arcs out, unreachable parts): the cover is exactly the set of best paths through each
  arc and final state, and each arc gets the cost of its word after its best path's history.
* A lattice whose paths are exactly an N-best list (built as Kaldi's nbest-to-lattice builds
  it: the union of the linear entries, epsilon arcs from the start) gives the same 1-best as
  the N-best step, through the real rescore-lattice and rescore-nbest commands with a real
  (small, untrained) model. The Kaldi programs in between are played in Python; with
  RESCORE_KALDI_BIN set, the same checks run through the real Kaldi binaries.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rescore.errors import RescoreError
from rescore.nbest.lattice import (Arc, Lattice, arc_nn_costs, add_nn_costs, format_lattice, iter_lattices,
                             path_cover, read_lattices, write_lattices)

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
DEV = SHARED / "tts-wikitext2-dev"
FIXTURE = SHARED / "kaldi-nbest-fixture"
KALDI_BIN = os.environ.get("RESCORE_KALDI_BIN")

TEXT = """utt-a 
0\t1\t5\t1.5,10.25,1_2_2
0\t2\t0\t0,0,
2\t1\t6\t2,3,
1\t3\t7\t0.5,1,3
3\t0.25,0.5,4_4
1

utt-b 
0
"""


def parse(text: str):
    return list(iter_lattices(io.StringIO(text), "t.txt"))


# --- text form ------------------------------------------------------------------------------

def test_text_form_reads_and_round_trips():
    a, b = parse(TEXT + "\n")
    assert a.key == "utt-a" and a.start == 0 and a.num_states == 4
    assert a.arcs[0] == Arc(0, 1, 5, 1.5, 10.25, "1_2_2")
    assert a.arcs[1].word == 0 and a.arcs[2].ali == ""
    assert a.finals == {3: (0.25, 0.5, "4_4"), 1: (0.0, 0.0, "")}
    assert b.key == "utt-b" and b.start == 0 and b.finals == {0: (0.0, 0.0, "")} and not b.arcs
    text = format_lattice(a) + format_lattice(b)
    again = parse(text)
    # written state by state (this input is not): the same arcs and finals, and a fixed point
    for x, y in zip(again, [a, b]):
        assert (x.key, x.start, x.num_states, x.finals) == (y.key, y.start, y.num_states, y.finals)
        assert sorted(x.arcs, key=repr) == sorted(y.arcs, key=repr)
    assert "".join(map(format_lattice, again)) == text


def test_start_state_is_the_first_lines_state(tmp_path):
    lat = parse("u \n2\t0\t9\t1,1,\n0\t1,0,\n\n")[0]
    assert lat.start == 2 and lat.num_states == 3
    out = tmp_path / "l.txt.gz"
    write_lattices(out, [lat])
    assert read_lattices(out) == [lat]
    assert gzip.decompress(out.read_bytes()).decode().startswith("u \n2\t0\t9\t1,1,\n")


@pytest.mark.parametrize("text,expected,line", [
    ("u \n0\t1\t5\t3,4\n\n", "graph,acoustic,transition-ids", 2),        # a non-compact Lattice
    ("u \n0\t1\t5\t5\t3,4\n\n", "non-compact Lattice", 2),                # ditto, 5 fields
    ("u \n0\t1\tx\t1,2,\n\n", "word id", 2),
    ("u \n0\t1\t5\t1,abc,\n\n", "numeric costs", 2),
    ("u \n0\t1\t5\t1,inf,\n\n", "finite costs", 2),
    ("u \n0\t1\t5\t1,2,\n1\n1\n\n", "one final weight per state", 4),
    ("u \n0\t1\t5\t1,2,\n1\n", "the empty line that ends lattice 'u'", 4),   # cut short
    ("u v\n0\n\n", "a lattice key alone", 1),
])
def test_bad_text_is_named_by_line(text, expected, line):
    with pytest.raises(RescoreError) as e:
        parse(text)
    assert expected in str(e.value) and f"t.txt:{line}:" in str(e.value)


def test_cycle_is_an_error():
    lat = parse("u \n0\t1\t5\t1,1,\n1\t0\t6\t1,1,\n1\n\n")[0]
    with pytest.raises(RescoreError, match="acyclic"):
        path_cover(lat, 0.1)


# --- path cover and arc costs against slow references ----------------------------------------

def random_lattice(rng: random.Random, n_states: int) -> Lattice:
    """A random acyclic lattice; state numbers shuffled so that they are not in topological
    order; several arcs between the same states; epsilon arcs; finals with arcs out."""
    perm = list(range(n_states))
    rng.shuffle(perm)  # perm[r] = state number of the r-th state in topological order
    arcs = []
    for r in range(n_states - 1):
        for _ in range(rng.randint(1, 3)):
            r2 = rng.randint(r + 1, min(n_states - 1, r + 3))
            word = 0 if rng.random() < 0.15 else rng.randint(1, 6)
            arcs.append(Arc(perm[r], perm[r2], word, rng.uniform(0, 5), rng.uniform(0, 30), "1_2"))
            if rng.random() < 0.2:  # a second arc between the same states
                arcs.append(Arc(perm[r], perm[r2], rng.randint(1, 6), rng.uniform(0, 5), rng.uniform(0, 30)))
    finals = {perm[-1]: (rng.uniform(0, 2), 0.0, "")}
    for r in rng.sample(range(1, n_states - 1), k=min(2, n_states - 2)):
        finals[perm[r]] = (rng.uniform(0, 2), rng.uniform(0, 3), "")
    rng.shuffle(arcs)
    lat = Lattice("u", start=perm[0], num_states=n_states, arcs=arcs, finals=finals)
    if rng.random() < 0.3:  # an unreachable state with an arc into the lattice
        lat.num_states += 1
        lat.arcs.append(Arc(n_states, perm[-1], 3, 1.0, 1.0))
    return lat


def all_paths(lat: Lattice, acwt: float):
    """Every complete path: (arc indices, final state, cost), by depth-first enumeration."""
    out, by_state = [], lat.out_arcs()

    def go(s, arcs, cost):
        if s in lat.finals:
            g, a, _ = lat.finals[s]
            out.append((tuple(arcs), s, cost + g + acwt * a))
        for i in by_state[s]:
            arc = lat.arcs[i]
            go(arc.dst, arcs + [i], cost + arc.graph + acwt * arc.ac)

    go(lat.start, [], 0.0)
    return out


def toy_cost(history, word) -> float:
    """An LM cost that depends on the whole history (so a wrong history shows)."""
    return (hash((tuple(history), word)) % 997) / 100.0


def toy_costs(words):
    return [toy_cost(words[:k], w) for k, w in enumerate(words)] + [toy_cost(words, -1)]


@pytest.mark.parametrize("seed", range(40))
def test_path_cover_and_arc_costs_match_the_slow_reference(seed):
    rng = random.Random(seed)
    lat = random_lattice(rng, rng.randint(3, 9))
    acwt = 0.1
    paths = path_cover(lat, acwt)
    every = all_paths(lat, acwt)

    # the reference cover: the best path through each arc and each final state
    best_through, best_ending = {}, {}
    for arcs, end, cost in every:
        for i in arcs:
            if i not in best_through or cost < best_through[i][2]:
                best_through[i] = (arcs, end, cost)
        if end not in best_ending or cost < best_ending[end][2]:
            best_ending[end] = (arcs, end, cost)
    reference = {p[:2] for p in list(best_through.values()) + list(best_ending.values())}
    got = [(tuple(p.arcs), p.end) for p in paths]
    assert len(got) == len(set(got))           # each path once
    assert set(got) == reference
    costs = [p.cost for p in paths]
    assert costs == sorted(costs)               # best first
    for p in paths:
        assert math.isclose(p.cost, dict(((a, e), c) for a, e, c in every)[(tuple(p.arcs), p.end)])

    # each arc: its word's cost after the words of its best path before it
    est = arc_nn_costs(lat, paths, [toy_costs(p.words(lat)) for p in paths])
    for i, arc in enumerate(lat.arcs):
        if arc.word == 0:
            assert est.arcs[i] == 0.0
        elif i not in best_through:             # on no complete path
            assert est.arcs[i] is None
        else:
            arcs = best_through[i][0]
            history = [lat.arcs[j].word for j in arcs[: arcs.index(i)] if lat.arcs[j].word]
            assert est.arcs[i] == toy_cost(history, arc.word)
    for f, (arcs, _, _) in best_ending.items():
        assert est.finals[f] == toy_cost([lat.arcs[j].word for j in arcs if lat.arcs[j].word], -1)

    # added with a weight to the graph costs; nothing else changes
    out = add_nn_costs(lat, est, 0.5)
    for a, b, c in zip(lat.arcs, out.arcs, est.arcs):
        assert (b.src, b.dst, b.word, b.ac, b.ali) == (a.src, a.dst, a.word, a.ac, a.ali)
        assert b.graph == a.graph + (0.5 * c if c is not None else 0.0)
    for s, (g, a, ali) in lat.finals.items():
        assert out.finals[s] == (g + 0.5 * est.finals.get(s, 0.0), a, ali)


def test_arcs_between_the_same_states_get_their_own_costs():
    # Kaldi names an arc by its state pair: both arcs 0->1 would get one score there.
    lat = parse("u \n0\t1\t5\t1,0,\n0\t1\t6\t2,0,\n1\t2\t7\t0,0,\n2\n\n")[0]
    paths = path_cover(lat, 1.0)
    assert [p.words(lat) for p in paths] == [[5, 7], [6, 7]]
    est = arc_nn_costs(lat, paths, [toy_costs(p.words(lat)) for p in paths])
    assert est.arcs == [toy_cost([], 5), toy_cost([], 6), toy_cost([5], 7)]


def test_epsilon_arcs_do_not_shift_the_costs():
    # nbest-to-lattice's union: epsilon arcs from the start to entries 2..N. Kaldi's estimate
    # zips state pairs (epsilon arcs included) with word scores (without): off by one there.
    lat = parse("u \n0\t1\t5\t1,0,\n0\t3\t0\t0,0,\n1\t2\t6\t1,0,\n3\t4\t7\t3,0,\n4\t5\t8\t1,0,\n"
                "2\n5\n\n")[0]
    paths = path_cover(lat, 1.0)
    est = arc_nn_costs(lat, paths, [toy_costs(p.words(lat)) for p in paths])
    assert est.arcs == [toy_cost([], 5), 0.0, toy_cost([5], 6), toy_cost([], 7), toy_cost([7], 8)]
    assert est.finals == {2: toy_cost([5, 6], -1), 5: toy_cost([7, 8], -1)}


def test_an_unscored_path_leaves_its_arcs_to_the_next_path():
    lat = parse("u \n0\t1\t5\t1,0,\n1\t2\t6\t1,0,\n1\t2\t7\t2,0,\n2\n\n")[0]
    paths = path_cover(lat, 1.0)
    assert [p.words(lat) for p in paths] == [[5, 6], [5, 7]]
    est = arc_nn_costs(lat, paths, [None, toy_costs([5, 7])])  # e.g. dropped by G.fst
    assert est.arcs == [toy_cost([], 5), None, toy_cost([5], 7)] and est.missing == 1
    with pytest.raises(RescoreError, match="3 NN costs"):
        arc_nn_costs(lat, paths, [[1.0, 2.0], None])


# --- a lattice that is an N-best list gives the N-best step's 1-best --------------------------

def nbest_entries(n_utts: int):
    """The first n_utts utterances of the dev N-best: utt -> [(key, word ids, ac, withlm, nolm)]."""
    def table(name):
        return {l.split()[0]: l.split()[1:] for l in (DEV / "nbest" / name).read_text().splitlines()}

    words, ac = table("words"), table("acwt")
    withlm, nolm = table("lmwt.withlm"), table("lmwt.nolm")
    out = {}
    for key in words:
        utt = key.rsplit("-", 1)[0]
        if utt not in out and len(out) == n_utts:
            break
        out.setdefault(utt, []).append((key, [int(x) for x in words[key]], float(ac[key][0]),
                                         float(withlm[key][0]), float(nolm[key][0])))
    return out


def union_lattice(utt, entries) -> Lattice:
    """What nbest-to-lattice writes for linear entries: entry 1 from the start state, the others
    through an epsilon arc from it (OpenFst's Union of start-acyclic FSTs). Graph cost on the
    first word arc, acoustic cost spread over the words (any split gives the same path totals)."""
    arcs, finals, n = [], {}, 1
    for k, (_, ids, ac, withlm, _) in enumerate(entries):
        s = 0
        if k:
            arcs.append(Arc(0, n, 0, 0.0, 0.0))
            s, n = n, n + 1
        for j, w in enumerate(ids):
            arcs.append(Arc(s, n, w, withlm if j == 0 else 0.0, ac / len(ids)))
            s, n = n, n + 1
        finals[s] = (0.0 if ids else withlm, 0.0 if ids else ac, "")
    return Lattice(utt, start=0, num_states=n, arcs=arcs, finals=finals)


def run_cli(module, *args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    if not DEV.is_dir():
        pytest.skip(f"needs {DEV} (the shared data beside the checkout) which is absent")
    torch = pytest.importorskip("torch")
    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    sym = dict(l.split()[::-1] for l in (DEV / "lang" / "words.txt").read_text().splitlines())
    counts = Counter(sym[str(w)] for es in nbest_entries(6).values() for e in es for w in e[1])
    vocab = Vocabulary(["<eos>", "<unk>"] + [w for w, _ in counts.most_common(200)])
    cfg = ModelConfig(arch="lstm", head="pointer", hidden=16, layers=1, history=8)
    path = tmp_path_factory.mktemp("nnlm") / "model.pt"
    save_checkpoint(build_model(cfg, vocab).eval(), path)
    return path


def write_nbest_dir(d: Path, rows, data: Path):
    """An N-best dir (what nbest-to-linear + int2sym leave) from (key, ids, ac, withlm, nolm)."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "words", "w") as w, open(d / "acwt", "w") as a, \
            open(d / "lmwt.withlm", "w") as g, open(d / "lmwt.nolm", "w") as n:
        for key, ids, ac, withlm, nolm in rows:
            w.write(f"{key} {' '.join(map(str, ids))} \n")
            a.write(f"{key} {ac!r} \n")
            g.write(f"{key} {withlm!r} \n")
            n.write(f"{key} {nolm!r} \n")
    shutil.copy(DEV / "lang" / "words.txt", d / "words.txt")


def subset_data_dir(dst: Path, utts):
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("text", "utt2spk", "segments"):
        lines = [l for l in (DEV / "data" / name).read_text().splitlines() if l.split()[0] in utts]
        (dst / name).write_text("\n".join(lines) + "\n")
    spk = {l.split()[1] for l in (dst / "utt2spk").read_text().splitlines()}
    (dst / "spk2utt").write_text("".join(l + "\n" for l in (DEV / "data" / "spk2utt").read_text().splitlines()
                                         if l.split()[0] in spk))


def read_1best(path: Path):
    return {l.split()[0]: l.split()[1:] for l in path.read_text().splitlines()}


def kaldi(*args, stdout=None):
    """A real Kaldi binary of RESCORE_KALDI_BIN."""
    r = subprocess.run([str(Path(KALDI_BIN) / args[0]), *map(str, args[1:])], capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return r


needs_kaldi = pytest.mark.skipif(not KALDI_BIN, reason="needs real Kaldi binaries: set RESCORE_KALDI_BIN "
                                 "to their directory (a Kaldi build's src/*bin or a build-kaldi.sh OUT_DIR/bin)")


@pytest.mark.slow
@pytest.mark.parametrize("source", ["python", pytest.param("kaldi", marks=needs_kaldi)])
def test_nbest_shaped_lattice_gives_the_nbest_steps_1best(tmp_path, small_model, source):
    """python: the union lattice built here; kaldi: the fixture's lat.1.gz, which Kaldi's own
    nbest-to-lattice wrote from the dev N-best, read with lattice-copy; the cover archive goes
    through Kaldi's nbest-to-linear and the output lattices read back with lattice-copy."""
    inv_acwt, weight, wip = 9.5, 0.5, 0.5
    acwt = 1.0 / inv_acwt
    entries = nbest_entries(6 if source == "python" else 8)
    data = tmp_path / "data"
    subset_data_dir(data, set(entries))
    opts = ["--model", small_model, "--weight", weight, "--inv-acwt", inv_acwt, "--wip", wip,
            "--device", "cpu", "--data-dir", data]

    # the N-best step on the N-best lists themselves
    nb = tmp_path / "nbest"
    write_nbest_dir(nb, [e for es in entries.values() for e in es], data)
    run_cli("rescore.cli.nbest", nb, tmp_path / "nbest-out", *opts)
    expected = read_1best(tmp_path / "nbest-out" / "text")
    sym = {int(i): w for w, i in (l.split() for l in (DEV / "lang" / "words.txt").read_text().splitlines())}
    rank1 = {u: [sym[i] for i in es[0][1]] for u, es in entries.items()}
    changed = sum(expected[u] != rank1[u] for u in entries)
    assert changed >= 2, "the NN LM must change some 1-best for this test to mean anything"

    # the lattice step: cover -> (old LM removal, nbest-to-linear) -> rescore-nbest -> apply
    lats = tmp_path / "lat.txt"
    if source == "python":
        write_lattices(lats, [union_lattice(u, es) for u, es in entries.items()])
    else:
        kaldi("lattice-copy", f"ark:gunzip -c {FIXTURE / 'lat.1.gz'}|", f"ark,t:{lats}")
    run_cli("rescore.cli.lattice", "cover", "--acoustic-scale", acwt, lats, tmp_path / "cover.txt")
    cover = read_lattices(tmp_path / "cover.txt")
    assert sum(len(es) for es in entries.values()) == len(cover)  # every entry is a cover path
    by_words = {(u, tuple(e[1])): e for u, es in entries.items() for e in es}
    if source == "python":  # nbest-to-linear of the cover, played
        linear = {}
        for c in cover:
            linear[c.key] = ([a.word for a in c.arcs if a.word],
                             sum(a.ac for a in c.arcs) + sum(f[1] for f in c.finals.values()),
                             sum(a.graph for a in c.arcs) + sum(f[0] for f in c.finals.values()))
    else:
        lin = tmp_path / "linear"
        kaldi("nbest-to-linear", f"ark:{tmp_path / 'cover.txt'}", "ark:/dev/null", f"ark,t:{lin}.words",
              f"ark,t:{lin}.lm", f"ark,t:{lin}.ac")
        col = {x: {l.split()[0]: l.split()[1:] for l in Path(f"{lin}.{x}").read_text().splitlines()}
               for x in ("words", "lm", "ac")}
        linear = {k: ([int(i) for i in w], float(col["ac"][k][0]), float(col["lm"][k][0]))
                  for k, w in col["words"].items()}
    rows = []
    for key, (ids, ac, g) in linear.items():  # lmwt.nolm as the old-LM removal would give it
        e = by_words[(key.rsplit("-", 1)[0], tuple(ids))]
        # Kaldi's text lattices hold 6 significant digits
        assert math.isclose(g, e[3], rel_tol=1e-5) and math.isclose(ac, e[2], rel_tol=1e-5)
        rows.append((key, ids, ac, g, e[4]))
    arch = tmp_path / "cover-archives"
    write_nbest_dir(arch, rows, data)
    run_cli("rescore.cli.nbest", arch, arch, *opts)
    out = tmp_path / "rescored.txt"
    run_cli("rescore.cli.lattice", "apply", "--acoustic-scale", acwt, "--weight", weight, lats, arch, out)
    if source == "kaldi":  # Kaldi reads them back, and writes them as we do
        kaldi("lattice-copy", f"ark:{out}", f"ark,t:{out}.kaldi")
        for a, b in zip(read_lattices(f"{out}.kaldi"), read_lattices(out), strict=True):
            assert (a.key, a.start, a.num_states, sorted(a.finals)) == (b.key, b.start, b.num_states, sorted(b.finals))
            for x, y in zip(a.arcs, b.arcs, strict=True):  # 6 digits in Kaldi's print
                assert (x.src, x.dst, x.word) == (y.src, y.dst, y.word)
                assert math.isclose(x.graph, y.graph, rel_tol=1e-5, abs_tol=1e-4)

    # on disjoint paths every arc's best history is its own path's: the added costs are exact
    nn = {l.split()[0]: sum(map(float, l.split()[1:])) for l in (arch / "lmwt.nn").read_text().splitlines()}
    nn_by_words = {(c.key.rsplit("-", 1)[0], tuple(a.word for a in c.arcs if a.word)): nn[c.key] for c in cover}
    before = {lat.key: lat for lat in read_lattices(lats)}
    got = {}
    for lat in read_lattices(out):
        old = {arcs: cost for arcs, _, cost in all_paths(before[lat.key], 1.0)}
        for arcs, _, cost in all_paths(lat, 1.0):
            ids = tuple(lat.arcs[i].word for i in arcs if lat.arcs[i].word)
            assert math.isclose((cost - old[arcs]) / weight, nn_by_words[(lat.key, ids)], abs_tol=1e-6)
        # the union's paths are disjoint: lattice-lmrescore-const-arpa --lm-scale=-w takes
        # w * (withlm - nolm) off each path; lattice-add-penalty adds wip per word
        best = None
        for arcs, end, cost in all_paths(lat, acwt):
            ids = tuple(lat.arcs[i].word for i in arcs if lat.arcs[i].word)
            e = by_words[(lat.key, ids)]
            total = cost - weight * (e[3] - e[4]) + wip * len(ids)
            if best is None or total < best[0]:
                best = (total, ids)
        got[lat.key] = [sym[i] for i in best[1]]
    assert got == expected


@needs_kaldi
def test_kaldi_reads_what_we_write_and_we_read_what_kaldi_writes(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"needs {FIXTURE} (the shared data) which is absent")
    theirs = tmp_path / "kaldi.txt"
    kaldi("lattice-copy", f"ark:gunzip -c {FIXTURE / 'lat.1.gz'}|", f"ark,t:{theirs}")
    ours = tmp_path / "ours.txt"
    assert write_lattices(ours, read_lattices(theirs)) == 8
    assert ours.read_bytes() == theirs.read_bytes()       # byte for byte
    kaldi("lattice-copy", f"ark:{ours}", f"ark,t:{tmp_path / 'again.txt'}")
    assert (tmp_path / "again.txt").read_bytes() == theirs.read_bytes()


@needs_kaldi
def test_path_cover_equals_kaldis_lattice_path_cover(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"needs {FIXTURE} (the shared data) which is absent")
    lat_gz = FIXTURE / "lat.1.gz"
    acwt = 0.105263
    kaldi("lattice-path-cover", f"--acoustic-scale={acwt}", f"ark:gunzip -c {lat_gz}|",
          f"ark,t:{tmp_path / 'words'}", f"ark,t:{tmp_path / 'states'}", f"ark,t:{tmp_path / 'costs'}")
    words = {l.split()[0]: tuple(map(int, l.split()[1:])) for l in (tmp_path / "words").read_text().splitlines()}
    costs = {l.split()[0]: float(l.split()[1]) for l in (tmp_path / "costs").read_text().splitlines()}
    kaldi("lattice-copy", f"ark:gunzip -c {lat_gz}|", f"ark,t:{tmp_path / 'lat.txt'}")
    total = 0
    for lat in read_lattices(tmp_path / "lat.txt"):
        paths = path_cover(lat, acwt)
        keys = [f"{lat.key}-{k}" for k in range(1, len(paths) + 1)]
        assert sorted(tuple(p.words(lat)) for p in paths) == sorted(words[k] for k in keys)
        for p, k in zip(paths, keys):  # best first; Kaldi's text has 6 digits
            assert math.isclose(p.cost, costs[k], abs_tol=2e-3)
        total += len(paths)
    assert total == len(words) == 793


# --- the shell steps without Kaldi: usage, input and program checks --------------------------

STEP = REPO / "recipes" / "steps" / "lmrescore_lattice.sh"
KALDI_STEP = REPO / "recipes" / "steps" / "pytorchnn" / "lmrescore_lattice_pytorchnn.sh"
PARSE_OPTIONS = r"""
while true; do
  [ -z "${1:-}" ] && break
  case "$1" in
    --*) name=$(echo "$1" | sed s/^--// | sed s/-/_/g)
         eval '[ -z "${'"$name"'+xxx}" ]' && echo "$0: invalid option $1" 1>&2 && exit 1
         eval "$name=\"\$2\""; shift 2 ;;
    *) break ;;
  esac
done
true
"""


def recipe_dir(tmp: Path, g="G.carpa"):
    """A recipe dir (path.sh, steps/, utils/parse_options.sh as Kaldi's, utils/int2sym.pl and
    split_data.sh) and the step's inputs."""
    d = tmp / "s5"
    (d / "utils").mkdir(parents=True)
    (d / "steps").mkdir()
    (d / "path.sh").write_text("")
    (d / "utils" / "parse_options.sh").write_text(PARSE_OPTIONS)
    for prog in ("int2sym.pl", "split_data.sh"):
        (d / "utils" / prog).write_text("#!/bin/sh\n")
        (d / "utils" / prog).chmod(0o755)
    lang, mdl, data, dec = tmp / "lang", tmp / "nnlm", tmp / "data", tmp / "decode"
    for x in (lang, mdl, data, dec):
        x.mkdir()
    (lang / "words.txt").write_text("<eps> 0\n<unk> 1\n")
    if g:
        (lang / g).write_text("")
    (mdl / "model.pt").write_text("PK stand-in")  # the steps check that it is not empty
    (data / "utt2spk").write_text("u s\n")
    (dec / "num_jobs").write_text("2\n")
    (dec / "lat.1.gz").write_bytes(gzip.compress(b""))
    return d, [str(lang), str(mdl), str(data), str(dec), str(tmp / "out")]


def run_sh(script, cwd, args):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LC_ALL": "C"}
    return subprocess.run(["bash", str(script), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("script,nargs", [(STEP, 4), (STEP, 6), (KALDI_STEP, 5)])
def test_usage_on_wrong_argument_count(tmp_path, script, nargs):
    d, args = recipe_dir(tmp_path)
    r = run_sh(script, d, (args + ["x"])[:nargs])
    assert r.returncode == 1 and "Usage:" in r.stdout


@pytest.mark.parametrize("case,expected", [
    ("no-g", "G.carpa or "), ("lat2", "lat.2.gz to exist (num_jobs is 2)"),
    ("bad-weight", "--weight must be a number in [0, 1], got '0.x'"),
    ("programs", "not found on PATH: run.pl lattice-prune"),
])
def test_lattice_step_checks_inputs_before_any_work(tmp_path, case, expected):
    d, args = recipe_dir(tmp_path, g=None if case == "no-g" else "G.carpa")
    if case != "lat2":
        (Path(args[3]) / "lat.2.gz").write_bytes(gzip.compress(b""))
    extra = ["--weight", "0.x"] if case == "bad-weight" else []
    r = run_sh(STEP, d, extra + args)
    assert r.returncode == 1 and expected in r.stdout, r.stdout + r.stderr
    assert not Path(args[4]).exists()  # nothing written


def test_lattice_step_checks_each_of_several_models(tmp_path):
    d, args = recipe_dir(tmp_path)
    (Path(args[3]) / "lat.2.gz").write_bytes(gzip.compress(b""))
    args[1] = f"{args[1]}:{tmp_path / 'none.pt'}"  # a colon list, as lmrescore_nbest.sh takes
    r = run_sh(STEP, d, ["--mix", "0.5,0.5"] + args)
    assert r.returncode == 1 and f"expected file {tmp_path / 'none.pt'} to exist" in r.stdout, r.stdout + r.stderr
    assert not Path(args[4]).exists()


def test_kaldi_named_step_takes_kaldis_options_and_refuses_others(tmp_path):
    d, args = recipe_dir(tmp_path)
    lang, mdl, data, dec, out = args
    kaldi_args = [lang, mdl + "/model.pt", lang + "/words.txt", data, dec, out]
    opts = ["--model-type", "LSTM", "--embedding_dim", "8", "--hidden-dim", "8", "--nlayers", "1",
            "--nhead", "1", "--inv-acwt", "10", "--weight", "0.8", "--beam", "5", "--epsilon", "0.5",
            "--oov-symbol", "'<unk>'", "--cmd", "run.pl", "--stage", "0", "--skip-scoring", "true"]
    r = run_sh(KALDI_STEP, d, opts + kaldi_args)
    # every Kaldi option parsed; it stops at the first program it needs
    assert r.returncode == 1 and "not found on PATH: rescore-import-kaldi-lm" in r.stdout, r.stdout + r.stderr
    r = run_sh(KALDI_STEP, d, ["--max-arcs", "3"] + kaldi_args)
    assert r.returncode == 1 and "invalid option --max-arcs" in r.stderr


def test_kaldi_named_steps_share_one_cache_of_the_imported_model(tmp_path):
    """The lattice script imports the Kaldi model where the N-best one does (<nn-model>.rescore/,
    with the options in import.opts), so either reuses what the other imported."""
    d, args = recipe_dir(tmp_path)
    lang, mdl, data, dec, out = args
    (Path(dec) / "lat.2.gz").write_bytes(gzip.compress(b""))  # the inputs are checked before the import
    model = f"{mdl}/model.pt"
    kaldi_args = [lang, model, lang + "/words.txt", data, dec, out]
    opts = ["--model-type", "LSTM", "--embedding-dim", "8", "--hidden-dim", "8", "--nlayers", "1"]
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "rescore-import-kaldi-lm").write_text('#!/bin/sh\nmkdir -p "$3" && echo "$@" > "$3/model.pt"\n')
    (stubs / "rescore-import-kaldi-lm").chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(d), "LC_ALL": "C"}

    def run(script):
        return subprocess.run(["bash", str(script), *opts, *kaldi_args], cwd=d, env=env,
                              capture_output=True, text=True, timeout=60)

    r = run(KALDI_STEP)  # imports, then stops in lmrescore_lattice.sh (no Kaldi here)
    assert f"importing {model} (LSTM) into {model}.rescore/model.pt" in r.stdout, r.stdout + r.stderr
    assert "--model-type LSTM" in Path(f"{model}.rescore/model.pt").read_text()
    assert "model-type=LSTM" in Path(f"{model}.rescore/import.opts").read_text()
    nbest_step = REPO / "recipes" / "steps" / "pytorchnn" / "lmrescore_nbest_pytorchnn.sh"
    for script in (nbest_step, KALDI_STEP):
        r = run(script)
        assert f"using the imported model {model}.rescore/model.pt" in r.stdout, r.stdout + r.stderr
    opts[opts.index("--nlayers") + 1] = "2"  # other options: a new import, in the same place
    r = run(nbest_step)
    assert f"importing {model} (LSTM) into {model}.rescore/model.pt" in r.stdout, r.stdout + r.stderr
    assert "--nlayers 2" in Path(f"{model}.rescore/model.pt").read_text()


@pytest.mark.parametrize("seed", range(15))
def test_best_paths_over_a_grid_match_enumeration(seed):
    from rescore.nbest.lattice import best_paths

    rng = random.Random(100 + seed)
    lat = random_lattice(rng, rng.randint(3, 9))
    scales, wips = [0.05, 0.1, 0.3], [-2.0, 0.0, 1.5]
    got = best_paths(lat, scales, wips)
    for k, (a, p) in enumerate([(a, p) for a in scales for p in wips]):
        paths = all_paths(lat, a)
        cost = lambda x: x[2] + p * sum(1 for i in x[0] if lat.arcs[i].word)  # noqa: E731
        best = min(cost(x) for x in paths)
        # the words of a best path (another path may tie with other words)
        assert any(math.isclose(cost(x), best) and got[k] == tuple(lat.arcs[i].word for i in x[0]
                                                                    if lat.arcs[i].word) for x in paths)
