"""Training a word LM on concatenated sentences in BPTT chunks.

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

import filecmp
import logging
import math
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from rescore.train.data import Streams, load_streams
from rescore.errors import OptionError, RescoreError
from rescore.io.files import write_json
from rescore.io.outdir import remove_leftovers, sha256
from rescore.io.symbols import read_vocabulary
from rescore.models import ModelConfig, build_model, model_from_checkpoint, read_checkpoint, save_checkpoint
from rescore.models.base import HeadOutput, LMState
from rescore.nbest.refs import FINGERPRINT_KEY, text_fingerprint
from rescore.train.ppl import stream_loss
from rescore.progress import progress
from rescore.train.options import TrainOptions, check_config, check_out_dir, check_resume, plain_options
from rescore.train.state import TrainState, get_rng, set_rng
from rescore.vocab import read_sentences
from rescore.vocab import Vocabulary

log = logging.getLogger(__name__)


def train_lm(config: ModelConfig, opts: TrainOptions) -> Dict[str, Any]:
    """Train ``config`` on ``opts.train``; returns a summary (best valid ppl, tokens/s, paths)."""
    check_config(config)
    check_out_dir(opts)
    warn_valid_is_train(opts)
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


def warn_valid_is_train(opts: TrainOptions) -> None:
    """Warn when the validation text is the training text (the same file, or the same bytes):
    early stopping, annealing and the best model then follow the training loss."""
    train, valid = Path(opts.train), Path(opts.valid)
    try:
        same = train.resolve() == valid.resolve() or filecmp.cmp(train, valid, shallow=False)
    except OSError:  # unreadable: the readers name it
        return
    if same:
        log.warning("--valid %s is the training text --train %s: early stopping, annealing and the best "
                    "model follow the training loss (hold out other text, e.g. Kaldi's dev text)",
                    opts.valid, opts.train)


def _train(config: ModelConfig, opts: TrainOptions, rank: int, world: int, device) -> Dict[str, Any]:
    """The recipe: build the run (or restore it from last.pt), then epochs of training,
    validation, annealing and saving until the epochs, the anneals or the time budget run out."""
    run = restore_or_build(config, opts, rank, world, device)
    if rank == 0:
        run.out_dir.mkdir(parents=True, exist_ok=True)
    write_record(run, "running")
    with stop_on_signal(run.last_path, world) as stop, recorded_if_stopped(run, stop):
        while not finished(run):
            train_one_epoch(run, stop)
            end_epoch(run, validate(run))
    if budget_spent(run):
        log.info("stopped: the --max-minutes budget (%g min of training, %s) is spent after "
                 "epoch %d", opts.max_minutes, "CPU time" if run.device.type == "cpu"
                 else "wall time", run.ts.epoch)
    write_record(run, "done")
    return summary(run)


@dataclass
class TrainRun:
    """Everything the steps of a run share: built once by ``restore_or_build``."""

    config: ModelConfig  # the model's config (a resumed run: the one in last.pt)
    opts: TrainOptions  # the run's options
    rank: int  # this process among ``world`` (0 writes the files)
    world: int  # processes (torchrun), 1 without
    device: torch.device  # where this process trains
    model: torch.nn.Module  # the LM being trained
    net: torch.nn.Module  # what a step calls: the model, or its DistributedDataParallel wrapper
    optim: torch.optim.Optimizer  # SGD or Adam over the model's parameters
    train_data: Streams  # this process's training streams, on ``device``
    valid_data: Streams  # this process's share of the validation streams, on ``device``
    ts: TrainState  # the counters last.pt keeps
    info: Dict[str, Any]  # what last.pt keeps beside ``ts``: options, world size, text digest
    lm_state: Optional[LMState] = None  # the model state carried into the next chunk (detached)
    last_save: float = 0.0  # time.monotonic() of the last last.pt written
    fingerprint: Optional[Dict[str, Any]] = None  # of the training text, for model.pt (text_fingerprint)

    @property
    def out_dir(self) -> Path:
        return Path(self.opts.out_dir)

    @property
    def last_path(self) -> Path:  # everything the next step needs (read by --resume)
        return self.out_dir / "last.pt"

    @property
    def best_path(self) -> Path:  # the model best on the validation text
        return self.out_dir / "model.pt"

    @property
    def n_chunks(self) -> int:  # BPTT chunks in the training text
        return self.train_data.n_chunks(self.opts.bptt)

    @property
    def epoch_len(self) -> int:  # batches per epoch
        return self.opts.epoch_batches or self.n_chunks


def restore_or_build(config: ModelConfig, opts: TrainOptions, rank: int, world: int, device) -> TrainRun:
    """The model, data and optimizer of a run: from ``out_dir/last.pt`` with ``opts.resume``
    (exactly where it stopped), otherwise freshly initialised."""
    out_dir = Path(opts.out_dir)
    last_path = out_dir / "last.pt"
    if rank == 0:
        _remove_stale_temporaries(out_dir)
    train_digest = sha256(opts.train)
    saved: Dict[str, Any] = {}
    if opts.resume and last_path.exists():
        model, config, saved = _restore(last_path, config, opts, world, train_digest)
        ts = TrainState.from_saved(saved, lr=opts.lr)
        log.info("resuming from %s at epoch %d, step %d", last_path, ts.epoch, ts.step)
    else:
        if opts.resume:
            log.warning("no %s to resume from; starting afresh", last_path)
        model, ts = _build(config, opts), TrainState(lr=opts.lr)
    log.info("vocabulary %d words; model %s/%s, %d parameters", len(model.vocab), config.arch,
             config.head, sum(p.numel() for p in model.parameters()))
    model.to(device)
    train_data, valid_data = _load_data(opts, model.vocab, rank, world, device)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optim = _optimizer(opts, model, ts.lr, saved["optimizer"] if saved else None)
    lm_state = _restore_rng_and_state(saved, opts, ts, rank, device)
    info = {"options": plain_options(opts), "world_size": world, "train_sha256": train_digest}
    return TrainRun(config, opts, rank, world, device, model, net, optim, train_data, valid_data, ts,
                    info, lm_state, last_save=time.monotonic())


def _restore(last_path: Path, config: ModelConfig, opts: TrainOptions, world: int,
             train_digest: str) -> Tuple[torch.nn.Module, ModelConfig, Dict[str, Any]]:
    """(model, its config, the saved train_state) of a last.pt, checked against the options."""
    ckpt = read_checkpoint(last_path)
    if "train_state" not in ckpt:
        raise RescoreError("a last.pt with a training state (what rescore-train-lm writes)",
                           path=last_path)
    check_resume(ckpt, config, opts, world, train_digest, last_path)
    model = model_from_checkpoint(ckpt, path=last_path).train()
    return model, model.config, ckpt["train_state"]


def vocabulary(opts: TrainOptions) -> Vocabulary:
    """The vocabulary a fresh run trains: ``--words-txt``'s, or the training text's words
    (the ``--max-vocab`` most frequent)."""
    if opts.words_txt is not None and opts.max_vocab is not None:
        raise RescoreError("either a words.txt or a maximum vocabulary size, not both",
                           path=opts.words_txt)
    return (read_vocabulary(opts.words_txt) if opts.words_txt is not None
            else Vocabulary.from_text(opts.train, opts.max_vocab))


def auto_classes(opts: TrainOptions) -> int:
    """``--classes auto``: round(sqrt(V)) for the vocabulary ``opts`` trains, where a token's
    cost (C + V/C) x H is smallest (rescore.models.classes)."""
    n = len(vocabulary(opts))
    classes = max(1, round(math.sqrt(n)))
    log.info("--classes auto: %d classes for %d words (round(sqrt(V)))", classes, n)
    return classes


def _build(config: ModelConfig, opts: TrainOptions) -> torch.nn.Module:
    """A freshly initialised model, the same in every process, and its vocabulary."""
    vocab = vocabulary(opts)
    torch.manual_seed(opts.seed)  # same initial weights on every process
    counts = None
    if config.output == "class":
        if config.classes > len(vocab):
            raise OptionError(f"at most as many classes as vocabulary words ({len(vocab)})",
                              option="--classes", got=str(config.classes))
        counts = train_counts(opts.train, vocab)
    return build_model(config, vocab, counts)


def _load_data(opts: TrainOptions, vocab: Vocabulary, rank: int, world: int, device) -> Tuple[Streams, Streams]:
    """This process's training and validation streams, on ``device``."""
    train_data = load_streams(opts.train, vocab, opts.batch_size * world, pad=False,
                              what="a training text")
    train_data = train_data.shard(rank, world)
    valid_data = load_streams(opts.valid, vocab, opts.eval_batch_size, pad=True,
                              what="a validation text").shard(rank, world)
    return _to(train_data, device), _to(valid_data, device)


def _optimizer(opts: TrainOptions, model: torch.nn.Module, lr: float,
               saved: Optional[Dict[str, Any]]) -> torch.optim.Optimizer:
    """SGD, or Adam for Transformers; with the saved state of a resumed run."""
    params = list(model.parameters())
    if opts.optimizer == "sgd":
        optim = torch.optim.SGD(params, lr=lr)
    else:
        optim = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98))
    if saved is not None:
        optim.load_state_dict(saved)
    return optim


def _restore_rng_and_state(saved: Dict[str, Any], opts: TrainOptions, ts: TrainState, rank: int,
                           device) -> Optional[LMState]:
    """This process's RNG state (dropout) and carried model state where last.pt has them;
    otherwise a seed of its own for each process."""
    rng, carried = saved.get("rng"), saved.get("carried")
    if rng is None:
        torch.manual_seed(opts.seed + 1000 * rank + ts.step)  # dropout differs per process
        return None
    set_rng(rng[rank], device)
    if carried is not None and carried[rank] is not None:
        return LMState({k: v.to(device) for k, v in carried[rank].items()})
    return None


def finished(run: TrainRun) -> bool:
    """The epochs, the anneals (early stop) or the time budget are spent."""
    return run.ts.epoch >= run.opts.epochs or run.ts.anneals >= run.opts.max_anneals or budget_spent(run)


def budget_spent(run: TrainRun) -> bool:
    """``--max-minutes`` spent by the finished epochs' training steps (validation not counted):
    this process's CPU time on a CPU (the same compute for every model however busy the machine
    is), wall time on a GPU."""
    spent = run.ts.cpu_seconds if run.device.type == "cpu" else run.ts.train_seconds
    return bool(run.opts.max_minutes) and spent >= 60.0 * run.opts.max_minutes


def train_one_epoch(run: TrainRun, stop: "StopSignal") -> None:
    """The batches of one epoch (of its rest, in a run resumed inside it), with the periodic
    last.pt; after a stop signal, last.pt and KeyboardInterrupt after the step in progress."""
    ts = run.ts
    run.model.train()
    t0 = time.perf_counter() - ts.epoch_seconds
    c0 = time.process_time() - ts.epoch_cpu_seconds
    first = ts.step - ts.epoch_start  # > 0 when resuming inside an epoch
    bar = progress(range(first, run.epoch_len), initial=first, total=run.epoch_len,
                   desc=f"epoch {ts.epoch + 1}", unit="batch", enabled=run.rank == 0, leave=False)
    for b in bar:
        loss_value, tokens = train_step(run)
        ts.step += 1
        ts.epoch_tokens += tokens * run.world
        ts.epoch_loss += loss_value
        ts.epoch_seconds = time.perf_counter() - t0
        ts.epoch_cpu_seconds = time.process_time() - c0
        _show_progress(run, bar, b)
        if stop.signal is not None:
            save_last(run)
            log.warning("saved %s at step %d (continue with --resume)", run.last_path, ts.step)
            raise KeyboardInterrupt
        if b + 1 < run.epoch_len and _save_due(run.opts, ts.step, run.last_save, run.world, run.device):
            save_last(run)
            run.last_save = time.monotonic()
    bar.close()


def train_step(run: TrainRun) -> Tuple[float, int]:
    """One optimizer step on the chunk at ``run.ts.step``: (its loss, its target tokens here)."""
    ts, opts = run.ts, run.opts
    c = ts.step % run.n_chunks
    if c == 0 or run.lm_state is None:
        run.lm_state = run.model.initial_state(run.train_data.ids.shape[0], run.device)
    x, xi, y, yi, _ = run.train_data.chunk(c, opts.bptt)
    lr = ts.lr * min(1.0, (ts.step + 1) / opts.warmup) if opts.warmup else ts.lr
    for g in run.optim.param_groups:
        g["lr"] = lr
    out, state = run.net(x, xi, run.lm_state.detach())
    loss = compute_loss(run.config, out, y, yi)
    run.optim.zero_grad(set_to_none=True)
    loss.backward()
    if opts.clip > 0:
        torch.nn.utils.clip_grad_norm_(list(run.model.parameters()), opts.clip)
    run.optim.step()
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise RescoreError("a finite training loss (try a lower --lr, or --clip)",
                           path=opts.train, got=f"loss {loss_value} at step {ts.step + 1}")
    run.lm_state = state.detach()
    return loss_value, y.numel()


def compute_loss(config: ModelConfig, out: HeadOutput, y: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
    """The training loss of a chunk: the mean negative log-probability of its targets, plus the
    head's own term and the self-normalisation penalty where configured."""
    within_z = None
    if config.self_norm and out.target_norm is not None:  # class-factored: log P and the
        lp, within_z = out.log_prob_and_norm(y)  # within-class log Z of each target
        loss = -lp.mean()
    else:
        loss = -out.log_prob(y, yi).mean()
    if out.aux_loss is not None:  # a head's own term (pointer-generator coverage)
        loss = loss + out.aux_loss.mean()
    if config.self_norm:  # alpha (log Z)^2: self-normalisation (Devlin et al. 2014)
        loss = loss + config.self_norm * out.log_norm.float().pow(2).mean()
        if within_z is not None:  # and the class's: unnormalised scores add both log Zs
            loss = loss + config.self_norm * within_z.pow(2).mean()
    return loss


def _show_progress(run: TrainRun, bar, b: int) -> None:
    """The bar's loss and tokens/s after batch ``b``; a log line every 50 batches without a bar."""
    ts, done = run.ts, b + 1
    if b % 10 == 0 or b == run.epoch_len - 1:
        bar.set_postfix(loss=f"{ts.epoch_loss / done:.3f}", tok_s=f"{ts.epoch_tokens / ts.epoch_seconds:.0f}")
    if bar.disable and run.rank == 0 and (b + 1) % 50 == 0:  # logs of background runs
        log.info("epoch %d batch %d/%d: loss %.3f, %.0f tokens/s", ts.epoch + 1, b + 1, run.epoch_len,
                 ts.epoch_loss / done, ts.epoch_tokens / ts.epoch_seconds)


def validate(run: TrainRun) -> float:
    """The validation loss per token (natural log), summed over the processes."""
    nll, count = stream_loss(run.model, run.valid_data, run.opts.bptt, run.device)
    nll, count = _all_sum([nll, count], run.world, run.device)
    return nll / count


def end_epoch(run: TrainRun, valid_loss: float) -> None:
    """The epoch's record; the best model kept, or the learning rate annealed; train.json and
    last.pt written."""
    ts = run.ts
    ts.epoch += 1
    ts.epoch_start = ts.step
    improved = valid_loss < ts.best
    train_time = ts.epoch_seconds
    record = {"epoch": ts.epoch, "step": ts.step, "lr": ts.lr,
              "train_loss": ts.epoch_loss / run.epoch_len, "valid_loss": valid_loss,
              "valid_ppl": math.exp(valid_loss), "tokens_per_s": ts.epoch_tokens / train_time,
              "train_seconds": train_time, "cpu_seconds": ts.epoch_cpu_seconds}
    ts.records.append(record)
    ts.train_seconds += train_time
    ts.cpu_seconds += ts.epoch_cpu_seconds
    ts.epoch_loss, ts.epoch_tokens, ts.epoch_seconds = 0.0, 0, 0.0
    ts.epoch_cpu_seconds = 0.0
    log.info("epoch %d: train loss %.3f, valid ppl %.2f, lr %g, %.0f tokens/s%s", ts.epoch,
             record["train_loss"], record["valid_ppl"], ts.lr, record["tokens_per_s"],
             " (best)" if improved else "")
    if improved:
        ts.best = valid_loss
        if run.rank == 0:
            save_checkpoint(run.model, run.best_path, valid_loss=valid_loss, epoch=ts.epoch,
                            **{FINGERPRINT_KEY: text_fingerprint_of(run)})
    else:
        ts.lr /= run.opts.anneal
        ts.anneals += 1
    # train.json first: killed between the two, the resumed run redoes this epoch and writes the
    # same record again; the other order could leave a record missing
    write_record(run, "running")
    save_last(run)
    run.last_save = time.monotonic()


def save_last(run: TrainRun) -> None:
    """last.pt with everything the next step needs; between two steps, in every process."""
    state = run.lm_state
    mine = (get_rng(run.device), None if state is None
            else {k: v.detach().cpu() for k, v in state.tensors.items()})
    gathered = _all_gather(mine, run.world)
    if run.rank == 0:
        save_checkpoint(run.model, run.last_path, train_state={
            **run.ts.to_dict(), **run.info, "optimizer": run.optim.state_dict(),
            "rng": [g[0] for g in gathered], "carried": [g[1] for g in gathered]})


def write_record(run: TrainRun, status: str) -> None:
    """train.json: the config, the options, one record per epoch and the run's status."""
    if run.rank == 0:
        write_json(run.out_dir / "train.json", {
            "config": run.config.to_dict(), "options": plain_options(run.opts), "world_size": run.world,
            "status": status, "records": run.ts.records})


def summary(run: TrainRun) -> Dict[str, Any]:
    """What train_lm returns: the best model's path and validation perplexity, the median tokens/s."""
    recs = run.ts.records
    return {"model": str(run.best_path), "best_valid_ppl": math.exp(run.ts.best) if recs else None,
            "epochs": run.ts.epoch,
            "tokens_per_s": sorted(r["tokens_per_s"] for r in recs)[len(recs) // 2] if recs else None}


class StopSignal:
    """The signal (SIGINT or SIGTERM) that asked the run to stop after the step in progress."""

    signal: Optional[int] = None


@contextmanager
def stop_on_signal(last_path: Path, world: int) -> Iterator[StopSignal]:
    """Ctrl-C and SIGTERM (a cluster's kill) stop the run after the step in progress, with
    last.pt saved: a step cut in the middle (half the weights updated) must never reach a
    checkpoint. A second signal stops at once (last.pt keeps the last periodic checkpoint).
    Several processes stop at once too: they cannot agree on a step to stop after."""
    stop = StopSignal()

    def on_signal(signum, frame):
        if world > 1 or stop.signal is not None:
            raise KeyboardInterrupt
        stop.signal = signum
        log.warning("%s: stopping after this step, with %s saved (again: stop at once)",
                    signal.Signals(signum).name, last_path)
    old_handlers = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old_handlers[sig] = signal.signal(sig, on_signal)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield stop
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


@contextmanager
def recorded_if_stopped(run: TrainRun, stop: StopSignal) -> Iterator[None]:
    """train.json's status says "interrupted" or "failed" when the epochs end by an exception."""
    try:
        yield
    except KeyboardInterrupt:
        if stop.signal is None:
            log.warning("interrupted: %s holds the last periodic checkpoint (continue with "
                        "--resume)", run.last_path)
        write_record(run, "interrupted")
        raise
    except Exception:
        write_record(run, "failed")
        raise


def text_fingerprint_of(run: TrainRun) -> Dict[str, Any]:
    """The fingerprint of the training text that model.pt records (computed once a run), so that
    rescore-nbest can tell how much of its references the LM was trained on without the text
    (rescore.nbest.refs)."""
    if run.fingerprint is None:
        t0 = time.process_time()
        run.fingerprint = text_fingerprint(read_sentences(run.opts.train))
        log.info("fingerprint of the training text for model.pt: %.1f CPU-s", time.process_time() - t0)
    return run.fingerprint


def train_counts(path, vocab: Vocabulary) -> torch.Tensor:
    """(V,) float64 count of each vocabulary id as a training target (OOV words as ``<unk>``,
    one ``<eos>`` per sentence): what ``--output class`` bins its classes by."""
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


def _remove_stale_temporaries(out_dir: Path) -> None:
    """Temporary files of a killed earlier run (save_checkpoint's and write_json's)."""
    remove_leftovers(out_dir)


def _to(streams: Streams, device) -> Streams:
    return Streams(*(t.to(device) for t in (streams.ids, streams.ident, streams.target_ids,
                                             streams.target_ident, streams.mask)))
