"""Training a word LM on concatenated sentences in BPTT chunks (design §5).

One process, or several under ``torchrun`` (DistributedDataParallel: gloo on CPU, nccl on CUDA;
each process takes its own ``batch_size`` streams). SGD with learning-rate annealing on the
validation loss (divide by ``anneal`` when it does not improve; stop after ``max_anneals``), gradient
clipping and dropout, or Adam with linear warm-up for Transformers. The model state (LSTM h/c,
KV cache, pointer history with m_k) is carried across consecutive chunks, detached.

Files in ``out_dir``: ``model.pt`` (best on valid, what rescore-ppl and the engine load),
``last.pt`` (read by ``resume``), ``train.json`` (the options, one record per epoch, and
``"status"``: ``"running"`` until the run ends, then ``"done"`` or ``"interrupted"``; a run killed
with kill -9 leaves ``"running"``).

Exact resume: ``last.pt`` is written atomically at every epoch end, every ``save_every_steps``
steps or ``save_every_minutes`` minutes, and on Ctrl-C/SIGTERM. It holds everything the next step
depends on: the weights, the optimizer state, the step (= the data position: chunk
``step % n_chunks``), the learning rate and annealing state, every process's torch RNG state
(dropout) and carried model state, and the running sums of the epoch in progress. Resuming from it
continues to the same weights, bit for bit on the CPU, as a run that was never stopped (the tests
check it with ``torch.equal``). The options it was trained with are kept too: resuming with other
ones (except ``epochs``, ``max_anneals``, the save interval, the device and threads) is an error
that names them.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from rescore.progress import progress

from rescore.data import Streams, load_streams
from rescore.errors import OptionError, RescoreError
from rescore.io.files import write_json
from rescore.io.outputs import check_output_dir
from rescore.models import (HEADS, ModelConfig, build_model, model_from_checkpoint,
                            read_checkpoint, save_checkpoint)
from rescore.models.base import LMState
from rescore.ppl import stream_loss
from rescore.vocab import Vocabulary

log = logging.getLogger(__name__)

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


def _option_error(field: str, expected: str, value: Any) -> OptionError:
    return OptionError(expected, option=option_name(field), got=str(value))


@dataclass
class TrainOptions:
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
        """Every value checked before any work: a RescoreError naming the option otherwise."""
        def need(field, ok, expected):
            if not ok:
                raise _option_error(field, expected, getattr(self, field))

        def finite(x):
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

        def integer(x):
            return isinstance(x, int) and not isinstance(x, bool)

        for f in ("epochs", "batch_size", "eval_batch_size", "bptt", "max_anneals"):
            need(f, integer(getattr(self, f)) and getattr(self, f) >= 1, "an integer >= 1")
        for f in ("warmup", "threads", "save_every_steps", "seed"):
            need(f, integer(getattr(self, f)) and getattr(self, f) >= 0, "an integer >= 0")
        need("optimizer", self.optimizer in ("sgd", "adam"), "sgd or adam")
        need("lr", finite(self.lr) and self.lr > 0, "a finite learning rate > 0")
        need("anneal", finite(self.anneal) and self.anneal >= 1, "a finite divisor >= 1")
        need("clip", finite(self.clip) and self.clip >= 0, "a finite gradient norm >= 0 (0: none)")
        need("save_every_minutes", finite(self.save_every_minutes) and self.save_every_minutes >= 0,
             "a finite number of minutes >= 0")
        need("max_minutes", finite(self.max_minutes) and self.max_minutes >= 0,
             "a finite number of minutes >= 0 (0: no budget)")
        need("max_vocab", self.max_vocab is None or (integer(self.max_vocab) and self.max_vocab >= 3),
             "a vocabulary size >= 3 (it counts <eos> and <unk>)")
        need("words_txt", self.words_txt is None or self.max_vocab is None,
             "either --words-txt or --max-vocab, not both")
        need("epoch_batches", self.epoch_batches is None
             or (integer(self.epoch_batches) and self.epoch_batches >= 1), "an integer >= 1")
        need("device", isinstance(self.device, str) and (
            self.device in ("auto", "cpu", "cuda") or (self.device.startswith("cuda:")
                                                      and self.device[5:].isdigit())),
             "auto, cpu, cuda or cuda:N")


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
    """A RescoreError naming the option when a config value is out of range or does nothing."""
    def need(field, ok, expected):
        if not ok:
            raise _option_error(field, expected, getattr(config, field))

    def pos_int(x):
        return isinstance(x, int) and not isinstance(x, bool) and x >= 1

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
        need("self_norm", not config.self_norm, "no --self-norm with --output class (its "
             "normalisers are cheap and exact already)")
    else:
        need("classes", not config.classes, "--classes only with --output class")
    if config.arch == "transformer":
        need("n_heads", config.hidden % config.n_heads == 0,
             f"a number of heads that divides --hidden {config.hidden}")
    # options that would do nothing are refused rather than silently ignored
    need("memory_aug", not config.memory_aug or config.head == "pointer",
         f"--memory-aug only with --head pointer (it does nothing with --head {config.head})")
    need("coverage_weight", not config.coverage or config.head == "pointer-generator",
         f"--coverage only with --head pointer-generator (it does nothing with --head {config.head})")


def train_counts(path, vocab: Vocabulary) -> torch.Tensor:
    """(V,) float64 count of each vocabulary id as a training target (OOV words as ``<unk>``,
    one ``<eos>`` per sentence): what ``--output class`` bins its classes by."""
    from rescore.vocab import read_sentences

    sentences = read_sentences(path)
    ids = [i for sent in sentences for i in vocab.encode(sent)[0]]
    counts = torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=len(vocab)).double()
    counts[vocab.eos_id] += len(sentences)
    return counts


def _setup_distributed(device: str):
    """(rank, world, device) under torchrun, or (0, 1, device) for a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError("a CUDA device (torch sees none here; use --device cpu or auto)",
                          option="--device", got=device)
    if world == 1:
        return 0, 1, torch.device(device)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return rank, world, torch.device("cuda", local)
    dist.init_process_group("gloo")
    return rank, world, torch.device("cpu")


def _all_sum(values: List[float], world: int, device) -> List[float]:
    if world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def _all_gather(obj: Any, world: int) -> List[Any]:
    if world == 1:
        return [obj]
    out: List[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def file_digest(path) -> str:
    """SHA-256 of a file (the training text a checkpoint's data position refers to)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def train_lm(config: ModelConfig, opts: TrainOptions) -> Dict[str, Any]:
    """Train ``config`` on ``opts.train``; returns a summary (best valid ppl, tokens/s, paths)."""
    check_config(config)
    check_out_dir(opts)
    threads_before = torch.get_num_threads()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    rank, world, device = _setup_distributed(opts.device)
    try:
        return _train(config, opts, rank, world, device)
    finally:
        if world > 1:
            dist.destroy_process_group()
        torch.set_num_threads(threads_before)  # a library call leaves no global change behind


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
    now = _plain(asdict(opts))
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


def _train(config: ModelConfig, opts: TrainOptions, rank: int, world: int, device) -> Dict[str, Any]:
    out_dir = Path(opts.out_dir)
    last_path, best_path, json_path = out_dir / "last.pt", out_dir / "model.pt", out_dir / "train.json"
    if rank == 0:
        _remove_stale_temporaries(out_dir)
    train_digest = file_digest(opts.train)

    # epoch_start: the step at which the current epoch began (a resumed epoch finishes its batches)
    # epoch_loss / epoch_tokens / epoch_seconds: sums over the batches of the epoch in progress
    ts: Dict[str, Any] = {"epoch": 0, "step": 0, "epoch_start": 0, "lr": opts.lr, "anneals": 0,
                          "best": math.inf, "records": [], "epoch_loss": 0.0, "epoch_tokens": 0,
                          "epoch_seconds": 0.0, "train_seconds": 0.0, "epoch_cpu_seconds": 0.0,
                          "cpu_seconds": 0.0}
    optim_state = rng = carried = None
    if opts.resume and last_path.exists():
        ckpt = read_checkpoint(last_path)
        if "train_state" not in ckpt:
            raise RescoreError("a last.pt with a training state (what rescore-train-lm writes)",
                               path=last_path)
        check_resume(ckpt, config, opts, world, train_digest, last_path)
        model = model_from_checkpoint(ckpt, path=last_path).train()
        vocab, config = model.vocab, model.config
        ts.update({k: v for k, v in ckpt["train_state"].items()
                   if k not in ("optimizer", "rng", "carried", "options")})
        if "train_seconds" not in ckpt["train_state"]:  # a last.pt from before --max-minutes
            ts["train_seconds"] = sum(r["train_seconds"] for r in ts["records"])
        if "cpu_seconds" not in ckpt["train_state"]:  # before CPU budgets: wall time, an upper bound
            ts["cpu_seconds"] = ts["train_seconds"]
            ts["epoch_cpu_seconds"] = ts["epoch_seconds"]
        optim_state = ckpt["train_state"]["optimizer"]
        rng = ckpt["train_state"].get("rng")
        carried = ckpt["train_state"].get("carried")
        log.info("resuming from %s at epoch %d, step %d", last_path, ts["epoch"], ts["step"])
    else:
        if opts.resume:
            log.warning("no %s to resume from; starting afresh", last_path)
        if opts.words_txt is not None and opts.max_vocab is not None:
            raise RescoreError("either a words.txt or a maximum vocabulary size, not both",
                               path=opts.words_txt)
        vocab = (Vocabulary.from_words_txt(opts.words_txt) if opts.words_txt is not None
                 else Vocabulary.from_text(opts.train, opts.max_vocab))
        torch.manual_seed(opts.seed)  # same initial weights on every process
        counts = None
        if config.output == "class":
            if config.classes > len(vocab):
                raise OptionError(f"at most as many classes as vocabulary words ({len(vocab)})",
                                  option="--classes", got=str(config.classes))
            counts = train_counts(opts.train, vocab)
        model = build_model(config, vocab, counts)
    log.info("vocabulary %d words; model %s/%s, %d parameters", len(vocab), config.arch,
             config.head, sum(p.numel() for p in model.parameters()))
    model.to(device)

    train_data = load_streams(opts.train, vocab, opts.batch_size * world, pad=False,
                              what="a training text")
    train_data = train_data.shard(rank, world)
    valid_data = load_streams(opts.valid, vocab, opts.eval_batch_size, pad=True,
                              what="a validation text").shard(rank, world)
    train_data, valid_data = (_to(d, device) for d in (train_data, valid_data))
    n_chunks = train_data.n_chunks(opts.bptt)
    epoch_len = opts.epoch_batches or n_chunks

    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    params = list(model.parameters())
    if opts.optimizer == "sgd":
        optim = torch.optim.SGD(params, lr=ts["lr"])
    else:
        optim = torch.optim.Adam(params, lr=ts["lr"], betas=(0.9, 0.98))
    if optim_state is not None:
        optim.load_state_dict(optim_state)

    state: Optional[LMState] = None
    if rng is not None:
        _set_rng(rng[rank], device)
        if carried is not None and carried[rank] is not None:
            state = LMState({k: v.to(device) for k, v in carried[rank].items()})
    else:
        torch.manual_seed(opts.seed + 1000 * rank + ts["step"])  # dropout differs per process
    train_info = {"options": _plain(asdict(opts)), "world_size": world,
                  "train_sha256": train_digest}

    def save_last():
        """last.pt with everything the next step needs; between two steps, in every process."""
        mine = (_get_rng(device), None if state is None
                else {k: v.detach().cpu() for k, v in state.tensors.items()})
        gathered = _all_gather(mine, world)
        if rank == 0:
            save_checkpoint(model, last_path, train_state={
                **ts, **train_info, "optimizer": optim.state_dict(),
                "rng": [g[0] for g in gathered], "carried": [g[1] for g in gathered]})

    def write_record(status: str):
        if rank == 0:
            write_json(json_path, {"config": config.to_dict(), "options": _plain(asdict(opts)),
                                    "world_size": world, "status": status,
                                    "records": ts["records"]})

    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
    write_record("running")
    # Ctrl-C and SIGTERM (a cluster's kill) stop the run after the step in progress, with last.pt
    # saved: a step cut in the middle (half the weights updated) must never reach a checkpoint.
    # A second signal stops at once (last.pt keeps the last periodic checkpoint). Several
    # processes stop at once too: they cannot agree on a step to stop after.
    stop: Dict[str, Any] = {"signal": None}

    def on_signal(signum, frame):
        if world > 1 or stop["signal"] is not None:
            raise KeyboardInterrupt
        stop["signal"] = signum
        log.warning("%s: stopping after this step, with %s saved (again: stop at once)",
                    signal.Signals(signum).name, last_path)
    old_handlers = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old_handlers[sig] = signal.signal(sig, on_signal)
    except ValueError:  # not the main thread: leave signals alone
        pass
    # --max-minutes counts this process's CPU time on a CPU (the same compute for every model
    # however busy the machine is), wall time on a GPU
    budget_clock = "cpu_seconds" if device.type == "cpu" else "train_seconds"
    last_save = time.monotonic()
    try:
        def budget_spent() -> bool:  # training time of finished epochs (validation not counted)
            return bool(opts.max_minutes) and ts[budget_clock] >= 60.0 * opts.max_minutes

        while ts["epoch"] < opts.epochs and ts["anneals"] < opts.max_anneals and not budget_spent():
            model.train()
            t0 = time.perf_counter() - ts["epoch_seconds"]
            c0 = time.process_time() - ts["epoch_cpu_seconds"]
            first = ts["step"] - ts["epoch_start"]  # > 0 when resuming inside an epoch
            bar = progress(range(first, epoch_len), initial=first, total=epoch_len,
                           desc=f"epoch {ts['epoch'] + 1}", unit="batch", enabled=rank == 0, leave=False)
            for b in bar:
                c = ts["step"] % n_chunks
                if c == 0 or state is None:
                    state = model.initial_state(train_data.ids.shape[0], device)
                x, xi, y, yi, _ = train_data.chunk(c, opts.bptt)
                lr = ts["lr"] * min(1.0, (ts["step"] + 1) / opts.warmup) if opts.warmup else ts["lr"]
                for g in optim.param_groups:
                    g["lr"] = lr
                out, state = net(x, xi, state.detach())
                loss = -out.log_prob(y, yi).mean()
                if out.aux_loss is not None:  # a head's own term (pointer-generator coverage)
                    loss = loss + out.aux_loss.mean()
                if config.self_norm:  # alpha (log Z)^2: self-normalisation (Devlin et al. 2014)
                    loss = loss + config.self_norm * out.log_norm.float().pow(2).mean()
                optim.zero_grad(set_to_none=True)
                loss.backward()
                if opts.clip > 0:
                    torch.nn.utils.clip_grad_norm_(params, opts.clip)
                optim.step()
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    raise RescoreError("a finite training loss (try a lower --lr, or --clip)",
                                       path=opts.train, got=f"loss {loss_value} at step "
                                       f"{ts['step'] + 1}")
                state = state.detach()
                ts["step"] += 1
                ts["epoch_tokens"] += y.numel() * world
                ts["epoch_loss"] += loss_value
                ts["epoch_seconds"] = time.perf_counter() - t0
                ts["epoch_cpu_seconds"] = time.process_time() - c0
                done = b + 1
                if b % 10 == 0 or b == epoch_len - 1:
                    bar.set_postfix(loss=f"{ts['epoch_loss'] / done:.3f}",
                                    tok_s=f"{ts['epoch_tokens'] / ts['epoch_seconds']:.0f}")
                if bar.disable and rank == 0 and (b + 1) % 50 == 0:  # logs of background runs
                    log.info("epoch %d batch %d/%d: loss %.3f, %.0f tokens/s", ts["epoch"] + 1,
                             b + 1, epoch_len, ts["epoch_loss"] / done,
                             ts["epoch_tokens"] / ts["epoch_seconds"])
                if stop["signal"] is not None:
                    save_last()
                    log.warning("saved %s at step %d (continue with --resume)", last_path,
                                ts["step"])
                    raise KeyboardInterrupt
                if b + 1 < epoch_len and _save_due(opts, ts["step"], last_save, world, device):
                    save_last()
                    last_save = time.monotonic()
            bar.close()
            nll, count = stream_loss(model, valid_data, opts.bptt, device)
            nll, count = _all_sum([nll, count], world, device)
            valid_loss = nll / count
            ts["epoch"] += 1
            ts["epoch_start"] = ts["step"]
            improved = valid_loss < ts["best"]
            train_time = ts["epoch_seconds"]
            record = {"epoch": ts["epoch"], "step": ts["step"], "lr": ts["lr"],
                      "train_loss": ts["epoch_loss"] / epoch_len, "valid_loss": valid_loss,
                      "valid_ppl": math.exp(valid_loss),
                      "tokens_per_s": ts["epoch_tokens"] / train_time,
                      "train_seconds": train_time, "cpu_seconds": ts["epoch_cpu_seconds"]}
            ts["records"].append(record)
            ts["train_seconds"] += train_time
            ts["cpu_seconds"] += ts["epoch_cpu_seconds"]
            ts["epoch_loss"], ts["epoch_tokens"], ts["epoch_seconds"] = 0.0, 0, 0.0
            ts["epoch_cpu_seconds"] = 0.0
            log.info("epoch %d: train loss %.3f, valid ppl %.2f, lr %g, %.0f tokens/s%s",
                     ts["epoch"], record["train_loss"], record["valid_ppl"], ts["lr"],
                     record["tokens_per_s"], " (best)" if improved else "")
            if improved:
                ts["best"] = valid_loss
                if rank == 0:
                    save_checkpoint(model, best_path, valid_loss=valid_loss, epoch=ts["epoch"])
            else:
                ts["lr"] /= opts.anneal
                ts["anneals"] += 1
            # train.json first: killed between the two, the resumed run redoes this epoch and
            # writes the same record again; the other order could leave a record missing
            write_record("running")
            save_last()
            last_save = time.monotonic()
    except KeyboardInterrupt:
        if stop["signal"] is None:
            log.warning("interrupted: %s holds the last periodic checkpoint (continue with "
                        "--resume)", last_path)
        write_record("interrupted")
        raise
    except Exception:
        write_record("failed")
        raise
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    if budget_spent():
        log.info("stopped: the --max-minutes budget (%g min of training, %s) is spent after "
                 "epoch %d", opts.max_minutes, "CPU time" if budget_clock == "cpu_seconds"
                 else "wall time", ts["epoch"])
    write_record("done")
    recs = ts["records"]
    return {"model": str(best_path), "best_valid_ppl": math.exp(ts["best"]) if recs else None,
            "epochs": ts["epoch"],
            "tokens_per_s": sorted(r["tokens_per_s"] for r in recs)[len(recs) // 2] if recs else None}


def _save_due(opts: TrainOptions, step: int, last_save: float, world: int, device) -> bool:
    """Whether a periodic last.pt is due after ``step`` (the same answer in every process)."""
    if opts.save_every_steps and step % opts.save_every_steps == 0:
        return True
    if not opts.save_every_minutes:
        return False
    due = time.monotonic() - last_save >= 60 * opts.save_every_minutes
    if world > 1:  # clocks differ: process 0 decides for all
        t = torch.tensor([1.0 if due else 0.0], device=device)
        dist.broadcast(t, 0)
        due = bool(t.item())
    return due


def _get_rng(device) -> Dict[str, Any]:
    rng = {"torch": torch.get_rng_state(), "python": list(_flatten(random.getstate()))}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def _flatten(state):
    """random.getstate() as plain data (a checkpoint holds no tuples of tuples it cannot load)."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _set_rng(rng: Dict[str, Any], device) -> None:
    torch.set_rng_state(rng["torch"])
    if "python" in rng:
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)


def _remove_stale_temporaries(out_dir: Path) -> None:
    """Temporary files of a killed earlier run (save_checkpoint's and atomic_output's)."""
    if not out_dir.is_dir():
        return
    for p in out_dir.iterdir():
        if p.name.endswith(".tmp") and p.name.split(".")[0] in ("last", "model", "train") \
                or (p.name.startswith(".") and p.name.endswith(".tmp")):
            log.info("removing %s (left by a killed run)", p)
            p.unlink()


def _to(streams: Streams, device) -> Streams:
    return Streams(*(t.to(device) for t in (streams.ids, streams.ident, streams.target_ids,
                                             streams.target_ident, streams.mask)))


def _plain(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}
