#!/usr/bin/env python3
"""How long rescore-nbest's data path is: the modules of the package a run passes through, from
the command's entry to its written outputs, counted with the code of a git revision and of the
working tree (or another checkout).

A run of ``rescore-nbest`` (in-process, ``main(..., standalone_mode=False)``) is traced with
``sys.setprofile``: every call into a module of ``rescore/`` is recorded. Counted per run:

* modules: the distinct modules of the package called into (each file once);
* climbs: the distinct (caller module -> called module) pairs, a call crossing a module boundary
  (the arrows of the data path; a call inside a module is no climb);
* calls: every call into the package (the work, for comparison only: it follows the data);
* stops: from the job on (calls made in cli/ aside), the distinct (calling function -> called
  function) pairs that cross a module boundary: each place where the data is handed to
  another module;
* climbs back: the stops into a module of a higher layer than the caller's (the layers of
  tests/test_import_graph.py): a lower layer calling back into an object of a higher one, which
  its imports cannot show;
* read chain, write chain: the modules on the call stack, entry first (a module once per run of
  frames in it), where the input is opened and where each output is written (``open``/``os.open``
  of a path in OUT_DIR); their length is how many module boundaries the data crosses between
  the command and the file.

Each run rescores tests/fixtures/nbest-small (no model) as a Kaldi dir, and as a TSV file made
from it (``rescore-convert-nbest``), with its data dir. Imports are done before tracing, so the
numbers count the path of the data, not module loading.

Example:
  python -m tools.bench.data_path --base 6c4e9fb --out /tmp/data-path
  (prints one table row per tree and input; --json FILE keeps the counts)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_import_graph import BASE, LAYERS
from tools.bench.same_outputs import export
from tools.common import REPO

NBEST_SMALL = REPO / "tests" / "fixtures" / "nbest-small"

# Run in a fresh interpreter with the tree first on sys.path: argv = tree, input, out_dir, json file.
TRACER = r"""
import importlib, json, sys, os
from pathlib import Path
tree, src, out, dst = sys.argv[1:5]
pkg = str(Path(tree, "rescore")) + os.sep
import rescore
assert rescore.__file__.startswith(pkg), rescore.__file__
from rescore.cli.nbest import main
args = [src, out, "--data-dir", sys.argv[5]]
try:  # warm up: the imports a run makes happen here, not in the traced run
    main(args, standalone_mode=False)
except SystemExit:
    pass
calls, edges, modules, opened, stops = 0, set(), set(), [], set()

def name(code):
    f = code.co_filename
    return f[len(pkg):] if f.startswith(pkg) else None

def prof(frame, event, arg):
    global calls
    if event != "call":
        return
    callee = name(frame.f_code)
    if callee is None:
        return
    calls += 1
    modules.add(callee)
    back = frame.f_back
    while back is not None and name(back.f_code) is None:  # the nearest caller in the package
        back = back.f_back
    caller = name(back.f_code) if back is not None else "<entry>"
    if caller != callee:
        edges.add((caller, callee))
        if back is not None:
            stops.add((f"{caller}:{back.f_code.co_qualname}", f"{callee}:{frame.f_code.co_qualname}"))

def chain():
    out, f = [], sys._getframe(2)
    while f is not None:
        n = name(f.f_code)
        if n is not None and (not out or out[-1] != n):
            out.append(n)
        f = f.f_back
    return out[::-1]

src_p, out_p = Path(src).resolve(), Path(out).resolve()
real_open, real_os_open = open, os.open

def where(path):
    try:
        p = Path(os.fsdecode(path)).resolve()
    except (TypeError, ValueError):
        return None
    if p == src_p or src_p in p.parents:
        return "read"
    return "write" if p.parent == out_p else None

def traced_open(file, *a, **k):
    kind = where(file) if not isinstance(file, int) else None
    if kind is not None:
        opened.append([kind, os.path.basename(os.fsdecode(file)), chain()])
    return real_open(file, *a, **k)

def traced_os_open(path, flags, *a, **k):
    kind = where(path)
    if kind is not None and flags & (os.O_WRONLY | os.O_RDWR):
        opened.append([kind, os.path.basename(os.fsdecode(path)), chain()])
    return real_os_open(path, flags, *a, **k)

import builtins, io
builtins.open = io.open = traced_open
os.open = traced_os_open
sys.setprofile(prof)
try:
    main(args, standalone_mode=False)
finally:
    sys.setprofile(None)
    builtins.open = io.open = real_open
    os.open = real_os_open
json.dump({"modules": sorted(modules), "climbs": sorted(map(list, edges)), "calls": calls, "opened": opened,
           "stops": sorted(map(list, stops))},
          real_open(dst, "w"))
"""


def layer(module_file: str) -> int:
    """The layer of a module of the package given by its file (``nbest/sets.py``): 0 for the
    top-level modules (BASE), then LAYERS bottom up."""
    top = module_file.split("/")[0]
    if top.endswith(".py"):
        assert f"rescore.{top[:-3]}" in BASE, module_file
        return 0
    return 1 + LAYERS.index(top)


def job_stops(c: dict) -> list:
    """The stops of a trace from the job on: (caller, callee) pairs of functions ('module:name'),
    those made in cli/ aside."""
    return [(a, b) for a, b in c["stops"] if not a.startswith("cli/")]


def climbs_back(stops: list) -> list:
    """The stops into a higher layer than the caller's."""
    return [(a, b) for a, b in stops if layer(b.split(":")[0]) > layer(a.split(":")[0])]


def trace(tree: Path, src: Path, work: Path, tag: str) -> dict:
    """The counts of one run of rescore-nbest on ``src`` with the code of ``tree``."""
    dst = work / f"{tag}.json"
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", TRACER, str(tree), str(src), str(work / f"{tag}.out"), str(dst),
                        str(NBEST_SMALL / "data")], env=env, capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        sys.exit(f"data_path: the run of {tree} on {src} failed:\n{r.stderr[-3000:]}")
    return json.loads(dst.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m tools.bench.data_path --base 6c4e9fb --out /tmp/data-path",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision of the code before the change")
    ap.add_argument("--new", type=Path, default=REPO, help="checkout with the code after it (default: this one)")
    ap.add_argument("--out", type=Path, required=True, help="work dir")
    ap.add_argument("--json", type=Path, help="also write every count (modules and climbs by name) here")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    base = export(a.base, a.out / "base")
    tsv = a.out / "nbest-small.tsv"
    r = subprocess.run([sys.executable, "-m", "rescore.cli.convert", str(NBEST_SMALL), str(tsv)],
                       env=dict(os.environ, PYTHONPATH=str(a.new)), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"data_path: converting {NBEST_SMALL} failed:\n{r.stderr[-3000:]}")
    found = {}
    print(f"{'tree':<6} {'input':<6} {'modules':>7} {'climbs':>6} {'calls':>7} {'stops':>5} {'back':>4} "
          f"{'read chain':>10} {'write chain':>11}")
    for tag, tree in (("base", base), ("new", a.new)):
        for kind, src in (("kaldi", NBEST_SMALL), ("tsv", tsv)):
            c = trace(tree, src, a.out, f"{tag}-{kind}")
            found[f"{tag}-{kind}"] = c
            reads = [len(ch) for k, _, ch in c["opened"] if k == "read"]
            writes = [len(ch) for k, _, ch in c["opened"] if k == "write"]
            stops = job_stops(c)
            c["climbs_back"] = climbs_back(stops)
            print(f"{tag:<6} {kind:<6} {len(c['modules']):>7} {len(c['climbs']):>6} {c['calls']:>7} {len(stops):>5} "
                  f"{len(c['climbs_back']):>4} {max(reads, default=0):>10} {max(writes, default=0):>11}")
    if a.json is not None:
        from rescore.io.files import write_json

        write_json(a.json, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
