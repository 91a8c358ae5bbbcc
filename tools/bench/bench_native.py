#!/usr/bin/env python3
"""What an install without a C compiler costs: whole ``rescore-nbest`` processes with the fused
CPU kernels against the same runs with ``RESCORE_NATIVE=0`` (the path of an install whose kernels
were not compiled: PyTorch's kernels), rounds interleaved, CPU seconds (user + sys of the process,
from ``os.wait4``), medians.

The model is a random 2x256 LSTM over the most frequent words of --vocab-text, self-normalised so
that ``--normalize none`` is allowed (the work depends on the shapes only, not on the weights).

    python -m tools.bench.bench_native --split 1/10 --rounds 3 --json native.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rescore.io.files import write_json
from tools.common import SHARED_DATA as DATA

CONFIGS = {
    "exact-fp32": ["--normalize", "exact", "--precision", "fp32"],
    "none-fp32": ["--normalize", "none", "--precision", "fp32"],
    "none-int8": ["--normalize", "none", "--precision", "int8"],
    "exact-int8": ["--normalize", "exact", "--precision", "int8"],
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nbest-dir", type=Path, default=DATA / "tts-wikitext2-dev" / "nbest")
    p.add_argument("--data-dir", type=Path, default=DATA / "tts-wikitext2-dev" / "data")
    p.add_argument("--vocab-text", type=Path, default=DATA / "wikitext2-asr" / "train.txt")
    p.add_argument("--max-vocab", type=int, default=10000)
    p.add_argument("--split", default="1/10", help="rescore-nbest --split K/N: the share of the set scored")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--configs", default="exact-fp32,none-fp32,none-int8,exact-int8",
                   help=f"comma list of {','.join(CONFIGS)}")
    p.add_argument("--json", type=Path, help="write every run and the medians here")
    return p.parse_args(argv)


def random_model(vocab_text: Path, max_vocab: int, path: Path) -> None:
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    vocab = Vocabulary.from_text(vocab_text, max_vocab)
    save_checkpoint(build_model(ModelConfig(hidden=256, layers=2, self_norm=0.1), vocab), path)


def run(args, model: Path, out: Path, config: str, native: bool) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", RESCORE_NATIVE="1" if native else "0")
    cmd = [sys.executable, "-m", "rescore.cli.nbest", str(args.nbest_dir), str(out), "--data-dir",
           str(args.data_dir), "--model", str(model), "--device", "cpu", "--split", args.split,
           "--state-carry", "first-pass", "--oov-penalty", "0", "--weight", "0.5", "--no-plot",
           *CONFIGS[config]]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{err.decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> None:
    args = parse_args(argv)
    configs = args.configs.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench_native."))
    try:
        measure(args, configs, work, argv)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args, configs, work: Path, argv) -> None:
    model = work / "model.pt"
    random_model(args.vocab_text, args.max_vocab, model)
    runs = {(c, n): [] for c in configs for n in (True, False)}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for c in configs:
            for n in (True, False):
                runs[c, n].append(run(args, model, work / f"{c}-{n}-{r}", c, n))
        load.append(os.getloadavg()[0])
    result = {"command": " ".join(["python", "-m", "tools.bench.bench_native", *(argv or sys.argv[1:])]),
              "machine": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"),
              "load_1min": [round(x, 2) for x in load], "split": args.split, "runs": {}}
    print(f"{'configuration':<12} {'fused CPU-s':>12} {'PyTorch CPU-s':>14} {'PyTorch / fused':>16}")
    for c in configs:
        fused, torch_ = statistics.median(runs[c, True]), statistics.median(runs[c, False])
        result["runs"][c] = {"fused": runs[c, True], "pytorch": runs[c, False],
                             "fused_median": round(fused, 2), "pytorch_median": round(torch_, 2),
                             "ratio": round(torch_ / fused, 3)}
        print(f"{c:<12} {fused:>12.2f} {torch_:>14.2f} {torch_ / fused:>15.2f}x")
    print(f"load (1 min) before and after each round: {result['load_1min']}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
