"""Training a word LM on concatenated sentences in BPTT chunks (design §5).

One process, or several under ``torchrun`` (DistributedDataParallel: gloo on CPU, nccl on CUDA;
each process takes its own ``batch_size`` streams). SGD with learning-rate annealing on the
validation loss (divide by ``anneal`` when it does not improve; stop after ``max_anneals``), gradient
clipping and dropout, or Adam with linear warm-up for Transformers. The model state (LSTM h/c,
KV cache, pointer history with m_k) is carried across consecutive chunks, detached.

Files in ``out_dir``: ``model.pt`` (best on valid, what rescore-ppl and the engine load),
``last.pt`` (latest weights + optimizer state, written every epoch and on interrupt, read by
``resume``), ``train.json`` (one record per epoch).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from rescore.progress import progress

from rescore.data import Streams, load_streams
from rescore.errors import RescoreError
from rescore.models import (HEADS, ModelConfig, build_model, model_from_checkpoint,
                            read_checkpoint, save_checkpoint)
from rescore.ppl import stream_loss
from rescore.vocab import Vocabulary

log = logging.getLogger(__name__)

DEFAULT_LR = {"sgd": 20.0, "adam": 1e-3}  # initial learning rate by optimizer


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
    clip: float = 0.25  # gradient-norm clipping
    max_vocab: Optional[int] = None  # vocabulary: the most frequent training words (None: all)
    epoch_batches: Optional[int] = None  # batches per epoch (None: the whole training text)
    seed: int = 1  # random seed (init, dropout)
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1"...
    threads: int = 0  # torch CPU threads per process (0: torch's default)
    resume: bool = False  # continue from out_dir/last.pt


def _setup_distributed(device: str):
    """(rank, world, device) under torchrun, or (0, 1, device) for a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
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


def train_lm(config: ModelConfig, opts: TrainOptions) -> Dict[str, Any]:
    """Train ``config`` on ``opts.train``; returns a summary (best valid ppl, tokens/s, paths)."""
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


def _train(config: ModelConfig, opts: TrainOptions, rank: int, world: int, device) -> Dict[str, Any]:
    out_dir = Path(opts.out_dir)
    last_path, best_path = out_dir / "last.pt", out_dir / "model.pt"
    if config.head not in HEADS:
        raise RescoreError(f"a head among {sorted(HEADS)}", got=config.head)
    if opts.optimizer not in ("sgd", "adam"):
        raise RescoreError("optimizer sgd or adam", got=opts.optimizer)

    # epoch_start: the step at which the current epoch began (a resumed epoch finishes its batches)
    ts: Dict[str, Any] = {"epoch": 0, "step": 0, "epoch_start": 0, "lr": opts.lr, "anneals": 0,
                          "best": math.inf, "records": []}
    optim_state = None
    if opts.resume and last_path.exists():
        ckpt = read_checkpoint(last_path)
        model = model_from_checkpoint(ckpt, path=last_path).train()
        vocab, config = model.vocab, model.config
        ts = dict(ckpt["train_state"])
        optim_state = ts.pop("optimizer")
        log.info("resuming from %s at epoch %d, step %d", last_path, ts["epoch"], ts["step"])
    else:
        if opts.resume:
            log.warning("no %s to resume from; starting afresh", last_path)
        vocab = Vocabulary.from_text(opts.train, opts.max_vocab)
        torch.manual_seed(opts.seed)  # same initial weights on every process
        model = build_model(config, vocab)
    log.info("vocabulary %d words; model %s/%s, %d parameters", len(vocab), config.arch,
             config.head, sum(p.numel() for p in model.parameters()))
    model.to(device)
    torch.manual_seed(opts.seed + 1000 * rank + ts["step"])  # dropout differs per process

    train_data = load_streams(opts.train, vocab, opts.batch_size * world, pad=False)
    train_data = train_data.shard(rank, world)
    valid_data = load_streams(opts.valid, vocab, opts.eval_batch_size, pad=True).shard(rank, world)
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

    def save_last():
        if rank == 0:
            save_checkpoint(model, last_path, train_state={**ts, "optimizer": optim.state_dict()})

    # SIGTERM (a cluster's kill) behaves like Ctrl-C: save last.pt, then stop
    def on_term(signum, frame):
        raise KeyboardInterrupt
    try:
        old_term = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        old_term = None
    state = None
    try:
        while ts["epoch"] < opts.epochs and ts["anneals"] < opts.max_anneals:
            model.train()
            t0, tokens, loss_sum = time.perf_counter(), 0, 0.0
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
                ts["step"] += 1
                tokens += y.numel() * world
                loss_sum += loss.item()
                done = b + 1 - first
                if b % 10 == 0 or b == epoch_len - 1:
                    bar.set_postfix(loss=f"{loss_sum / done:.3f}",
                                    tok_s=f"{tokens / (time.perf_counter() - t0):.0f}")
                if bar.disable and rank == 0 and (b + 1) % 50 == 0:  # logs of background runs
                    log.info("epoch %d batch %d/%d: loss %.3f, %.0f tokens/s", ts["epoch"] + 1,
                             b + 1, epoch_len, loss_sum / done,
                             tokens / (time.perf_counter() - t0))
            bar.close()
            train_time = time.perf_counter() - t0
            nll, count = stream_loss(model, valid_data, opts.bptt, device)
            nll, count = _all_sum([nll, count], world, device)
            valid_loss = nll / count
            ts["epoch"] += 1
            ts["epoch_start"] = ts["step"]
            improved = valid_loss < ts["best"]
            record = {"epoch": ts["epoch"], "step": ts["step"], "lr": ts["lr"],
                      "train_loss": loss_sum / max(1, epoch_len - first), "valid_loss": valid_loss,
                      "valid_ppl": math.exp(valid_loss), "tokens_per_s": tokens / train_time,
                      "train_seconds": train_time}
            ts["records"].append(record)
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
            save_last()
            if rank == 0:
                _write_json(out_dir / "train.json",
                            {"config": config.to_dict(), "options": _plain(asdict(opts)),
                             "world_size": world, "records": ts["records"]})
    except KeyboardInterrupt:
        log.warning("interrupted: saving %s (resume with --resume)", last_path)
        save_last()
        raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    recs = ts["records"]
    return {"model": str(best_path), "best_valid_ppl": math.exp(ts["best"]) if recs else None,
            "epochs": ts["epoch"],
            "tokens_per_s": sorted(r["tokens_per_s"] for r in recs)[len(recs) // 2] if recs else None}


def _to(streams: Streams, device) -> Streams:
    return Streams(*(t.to(device) for t in (streams.ids, streams.ident, streams.target_ids,
                                             streams.target_ident, streams.mask)))


def _plain(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)
