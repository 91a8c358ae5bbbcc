"""The options of a training run, and their checks, torch-free: the command's ``--help`` and its
option checks need no torch import.

``TrainOptions`` holds what ``rescore-train-lm`` passes to ``rescore.train.loop.train_lm`` besides
the model config; every value is checked when it is built. ``check_config`` checks a
``ModelConfig`` the same way, ``check_out_dir`` the output directory, and ``check_resume`` that a
resumed run uses the options its ``last.pt`` was trained with.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from rescore.errors import OptionError, RescoreError, check, check_device
from rescore.io.outputs import check_output_dir
from rescore.settings import BODY_NAMES, TRANSFORMER_BODIES

if TYPE_CHECKING:
    from rescore.models import ModelConfig

log = logging.getLogger("rescore.train")  # the one log name of a training run

DEFAULT_LR = {"sgd": 20.0, "adam": 1e-3}  # initial learning rate by optimizer

# Options a resumed run may change: they decide when to stop or save, or where to run, never
# what a step computes. Any other difference from last.pt is an error (see check_resume).
RESUME_MAY_CHANGE = ("epochs", "max_anneals", "max_minutes", "save_every_steps",
                     "save_every_minutes", "device", "threads", "resume", "out_dir")
OPTION_NAMES = {"coverage_weight": "--coverage", "save_every_steps": "--save-every",
                "save_every_minutes": "--save-every", "train": "--train", "valid": "--valid"}


def option_name(field: str) -> str:
    """The command-line option of a TrainOptions or ModelConfig field: bptt -> --bptt."""
    return OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


@dataclass
class TrainOptions:
    """What a training run does besides the model (its ModelConfig): one field per option of
    rescore-train-lm."""

    train: Path  # training text, one sentence per line
    valid: Path  # validation text (learning-rate annealing, best-model choice)
    out_dir: Path  # where model.pt, last.pt and train.json go
    epochs: int = 10  # maximum number of epochs
    batch_size: int = 20  # parallel streams per process
    eval_batch_size: int = 10  # parallel streams for validation (in all)
    bptt: int = 100  # T: tokens per chunk (truncated back-propagation length)
    optimizer: str = "sgd"  # "sgd" or "adam"
    lr: float = 20.0  # initial learning rate (SGD on a word LM: ~20; Adam: ~1e-3)
    warmup: int = 0  # linear learning-rate warm-up over this many steps
    anneal: float = 4.0  # divide the learning rate by this when the valid loss does not improve
    max_anneals: int = 3  # early stop: the valid loss failed to improve this many times
    max_minutes: float = 0.0  # training-time budget: stop at the first epoch end past it (0: none)
    clip: float = 0.25  # gradient-norm clipping (0: none)
    max_vocab: Optional[int] = None  # vocabulary: the most frequent training words (None: all)
    words_txt: Optional[Path] = None  # vocabulary: a Kaldi words.txt instead (OOV words: <unk>)
    epoch_batches: Optional[int] = None  # batches per epoch (None: the whole training text)
    seed: int = 1  # random seed (init, dropout)
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1"...
    threads: int = 0  # torch CPU threads per process (0: torch's default)
    resume: bool = False  # continue from out_dir/last.pt
    save_every_steps: int = 0  # also write last.pt every this many steps (0: epoch ends only)
    save_every_minutes: float = 0.0  # also write last.pt every this many minutes (0: off)

    def __post_init__(self):
        """Every value checked before any work: an OptionError naming the option otherwise."""
        def need(field, ok, expected):
            check(ok, expected, option_name(field), getattr(self, field))

        for f in ("epochs", "batch_size", "eval_batch_size", "bptt", "max_anneals"):
            need(f, _integer(getattr(self, f)) and getattr(self, f) >= 1, "an integer >= 1")
        for f in ("warmup", "threads", "save_every_steps", "seed"):
            need(f, _integer(getattr(self, f)) and getattr(self, f) >= 0, "an integer >= 0")
        need("optimizer", self.optimizer in ("sgd", "adam"), "sgd or adam")
        need("lr", _finite(self.lr) and self.lr > 0, "a finite learning rate > 0")
        need("anneal", _finite(self.anneal) and self.anneal >= 1, "a finite divisor >= 1")
        need("clip", _finite(self.clip) and self.clip >= 0, "a finite gradient norm >= 0 (0: none)")
        need("save_every_minutes", _finite(self.save_every_minutes) and self.save_every_minutes >= 0,
             "a finite number of minutes >= 0")
        need("max_minutes", _finite(self.max_minutes) and self.max_minutes >= 0,
             "a finite number of minutes >= 0 (0: no budget)")
        need("max_vocab", self.max_vocab is None or (_integer(self.max_vocab) and self.max_vocab >= 3),
             "a vocabulary size >= 3 (it counts <eos> and <unk>)")
        need("words_txt", self.words_txt is None or self.max_vocab is None,
             "either --words-txt or --max-vocab, not both")
        need("epoch_batches", self.epoch_batches is None
             or (_integer(self.epoch_batches) and self.epoch_batches >= 1), "an integer >= 1")
        check_device(self.device, option_name("device"))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_save_every(spec: str) -> Tuple[int, float]:
    """``--save-every``: "500" (steps), "10m" or "10min" (minutes), "0" (epoch ends only) ->
    (save_every_steps, save_every_minutes)."""
    s = str(spec).strip().lower()
    try:
        if s.endswith("min") or s.endswith("m"):
            minutes = float(s[:-3] if s.endswith("min") else s[:-1])
            if math.isfinite(minutes) and minutes >= 0:
                return 0, minutes
        elif s.isdigit():
            return int(s), 0.0
    except ValueError:
        pass
    raise OptionError("a number of steps (500) or of minutes (10m), 0 for epoch ends only",
                      option="--save-every", got=str(spec))


def check_config(config: ModelConfig) -> None:
    """An OptionError naming the option when a config value is out of range or does nothing."""
    from rescore.models import HEADS  # (lazy: keeps torch out of rescore-train-lm's start-up)

    def need(field, ok, expected):
        check(ok, expected, option_name(field), getattr(config, field))

    def pos_int(x):
        return _integer(x) and x >= 1

    need("head", config.head in HEADS, f"a head among {sorted(HEADS)}")
    for f in ("hidden", "layers", "history", "n_heads", "context", "ff_mult"):
        need(f, pos_int(getattr(config, f)), "an integer >= 1")
    need("dropout", isinstance(config.dropout, (int, float)) and 0 <= config.dropout < 1,
         "a dropout probability in [0, 1)")
    need("coverage_weight", isinstance(config.coverage_weight, (int, float))
         and math.isfinite(config.coverage_weight) and config.coverage_weight >= 0,
         "a finite loss weight >= 0")
    need("self_norm", isinstance(config.self_norm, (int, float)) and math.isfinite(config.self_norm)
         and config.self_norm >= 0, "a finite weight >= 0 (0: off)")
    need("output", config.output in ("softmax", "class"), "softmax or class")
    if config.output == "class":
        need("classes", pos_int(config.classes), "an integer >= 1 (word classes; about sqrt(V))")
        need("head", getattr(HEADS[config.head], "supports_class_output", False),
             "a head with a class-factored output for --output class: " + ", ".join(
                 sorted(n for n, h in HEADS.items() if getattr(h, "supports_class_output", False))))
        need("self_norm", not config.self_norm or config.head == "softmax",
             "--self-norm with --output class only with --head softmax")
    else:
        need("classes", not config.classes, "--classes only with --output class")
    need("arch", config.arch in BODY_NAMES, ", ".join(BODY_NAMES))
    if config.arch in TRANSFORMER_BODIES:
        need("n_heads", config.hidden % config.n_heads == 0,
             f"a number of heads that divides --hidden {config.hidden}")
    if config.arch == "kaldi-transformer":  # (Kaldi's absolute positions, interleaved sin/cos)
        need("positions", config.positions == "sinusoidal", "--positions sinusoidal with --arch kaldi-transformer")
        need("hidden", config.hidden % 2 == 0, "an even --hidden with --arch kaldi-transformer")
    # options that would do nothing are refused rather than silently ignored
    need("memory_aug", not config.memory_aug or config.head == "pointer",
         f"--memory-aug only with --head pointer (it does nothing with --head {config.head})")
    need("coverage_weight", not config.coverage or config.head == "pointer-generator",
         f"--coverage only with --head pointer-generator (it does nothing with --head {config.head})")


def check_out_dir(opts: TrainOptions) -> None:
    """Before any work: OUT_DIR can be a writable directory, and a fresh run would not replace
    an earlier run's files (that needs ``resume``, or removing them).

    An error rather than a warning: a restart without --resume would overwrite the model.pt of
    what may be days of training, and a warning scrolls by in a cluster log unseen. Removing
    the files (or another --out-dir) says "start afresh" without doubt."""
    out = Path(opts.out_dir)
    check_output_dir(out, "--out-dir", names=("last.pt", "model.pt", "train.json"),
                     inputs=(opts.train, opts.valid, opts.words_txt))
    if not opts.resume and int(os.environ.get("RANK", "0")) == 0:  # (others: rank 0 may be writing)
        old = [n for n in ("last.pt", "model.pt", "train.json") if (out / n).exists()]
        if old:
            raise RescoreError(
                "an output dir without an earlier run: pass --resume to continue it, or remove "
                f"{', '.join(old)} (or choose another --out-dir) to start afresh",
                path=out, got=f"{', '.join(old)} already there")


def check_resume(ckpt: Dict[str, Any], config: ModelConfig, opts: TrainOptions, world: int,
                 train_digest: str, path) -> None:
    """A RescoreError naming every option that differs from the ones ``ckpt`` was trained with."""
    ts = ckpt["train_state"]
    saved = ts.get("options")
    if saved is None:  # a last.pt of an older version: nothing to compare against
        log.warning("%s records no options: resuming without checking them (and without the "
                    "RNG and carried state: not exact)", path)
        return
    from rescore.models import ModelConfig  # (lazy: keeps torch out of rescore-train-lm's start-up)

    now = plain_options(opts)
    diffs = []
    for k in sorted(set(saved) | set(now)):
        if k in RESUME_MAY_CHANGE or saved.get(k) == now.get(k):
            continue
        diffs.append(f"{option_name(k)} {saved.get(k)} (now {now.get(k)})")
    old_cfg = ModelConfig.from_dict(ckpt["config"], path=path).to_dict()
    new_cfg = config.to_dict()
    for k in sorted(set(old_cfg) | set(new_cfg)):
        if k != "vocab_size" and old_cfg.get(k) != new_cfg.get(k):
            diffs.append(f"{option_name(k)} {old_cfg.get(k)} (now {new_cfg.get(k)})")
    if ts.get("world_size", 1) != world:
        diffs.append(f"processes {ts.get('world_size', 1)} (now {world})")
    if ts.get("train_sha256") not in (None, train_digest):
        diffs.append(f"the content of --train {opts.train} (its SHA-256 changed)")
    if diffs:
        raise OptionError("--resume with the options the checkpoint was trained with; "
                          f"{path} was trained with " + "; ".join(diffs), option="--resume")


def plain_options(opts: TrainOptions) -> Dict[str, Any]:
    """``opts`` as plain data (paths as strings): what last.pt and train.json keep."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()}
