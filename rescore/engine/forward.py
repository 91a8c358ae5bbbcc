"""What the engines (rescore.engine.score) share: one model's forward over rows of tokens (device,
precision, normaliser, a row budget with its out-of-memory back-off), the log-probability of
targets with the OOV penalty, and the context of one model's run.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from rescore.engine.forest import LevelForest
from rescore.engine.types import Costs, EngineStats, Hyp
from rescore.errors import RescoreError, check, check_device
from rescore.nbest.interp import total_cost, word_posterior_mass
from rescore.engine.lstm_steps import InferencePaths, LSTMLevels, linear_output
from rescore.models.base import HeadOutput, LanguageModel, LMState, forget_inputs
from rescore.settings import NORMALIZE, EngineSettings
import ctypes
import platform
from rescore.progress import progress
from rescore.engine.kernels import quant
from rescore.engine.kernels import native

log = logging.getLogger("rescore.engine")

# --------------------------------------------------------------------------------------------
# Device and precision


def resolve_device(spec: Union[str, torch.device] = "auto") -> torch.device:
    """The one place a device is opened: ``auto`` -> cuda when available, else cpu; ``cpu``;
    ``cuda`` or ``cuda:N`` (fails clearly without CUDA). A torch.device is returned as it is."""
    if isinstance(spec, torch.device):
        return spec
    check_device(spec)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec != "cpu" and not torch.cuda.is_available():
        raise RescoreError(f"a CUDA device (--device {spec})", got="torch.cuda.is_available() False")
    return torch.device(spec)


def autocast_for(device: torch.device, precision: str = "auto"):
    """The forward's autocast. ``auto``: on CUDA bf16 where the GPU has it, else fp16; on the
    CPU none (fp32: the engines agree to 1e-4). ``fp32``: none. ``bf16``: bf16 matrix products
    on either device (on a CPU with AVX512-BF16 or AMX about 3x the fp32 GEMM rate; costs move
    by a median ~0.05 nat per hypothesis, docs/benchmarks.md). Normalisers and costs stay fp32.
    ``int8`` (a CPU only): no autocast; the model's int8 products instead (``Forward``)."""
    if precision in ("fp32", "int8") or (precision == "auto" and device.type != "cuda"):
        return contextlib.nullcontext()
    if device.type == "cuda":
        bf16 = precision == "bf16" or torch.cuda.is_bf16_supported()
        return torch.autocast("cuda", dtype=torch.bfloat16 if bf16 else torch.float16)
    return torch.autocast(device.type, dtype=torch.bfloat16)


def resolve_normalize(model: LanguageModel, normalize: str) -> str:
    """``exact`` or ``none`` for ``--normalize``: ``auto`` is ``none`` for a self-normalised
    model (``config.self_norm > 0``: trained with alpha (log Z)^2), else ``exact``. A
    class-factored model (``config.output == "class"``) takes ``none`` only when self-normalised:
    exact costs are already only (C + |c(w)|) x H per edge, and a class model trained without
    the penalty has two normalisers far from 1, so its raw scores would rank hypotheses by
    nothing the model learned."""
    check(normalize in NORMALIZE, f"one of {', '.join(NORMALIZE)}", "--normalize", normalize)
    if normalize == "auto":
        normalize = "none" if model.self_norm > 0 else "exact"
    if normalize == "none" and model.class_output and not model.self_norm > 0:
        raise RescoreError("normalize 'exact' (or auto) for a class-factored model trained "
                           "without --self-norm: its raw class and word scores are not "
                           "log-probabilities", got="none")
    if normalize == "none" and not model.supports_unnormalized:
        raise RescoreError("a model that can score without its normaliser (rescore.models) for "
                           "normalize 'none'", got=type(model).__name__)
    if normalize == "none" and not model.self_norm > 0:
        # allowed (a model imported from elsewhere may be self-normalised without saying so),
        # but its costs are log-probabilities only where log Z ~ 0
        log.warning("--normalize none with a model not trained with --self-norm: its costs are "
                    "log-probabilities only if its log Z stays near 0; else use "
                    "--normalize exact")
    return normalize


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` is an out-of-memory error (torch.OutOfMemoryError, or a CPU allocator's)."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err)


# Most bytes of one forward call's normalised (rows, V) output on a CPU (Forward.output_rows):
# under glibc's largest mmap threshold (keep_freed_memory), so that it comes from the heap.
OUTPUT_BYTES = 16 * 2**20


def keep_freed_memory() -> None:
    """Have glibc's malloc keep the memory of freed tensors for the next ones (once per process,
    on Linux with glibc; a no-op elsewhere). By default every block over a moving threshold
    (128 KB and up) is mapped afresh and unmapped when freed, and a freed heap top is returned
    to the system: each forward call's big temporaries then cost the kernel a page fault per
    4 KiB. Measured on the step's 4 jobs of exact scoring: 1.1M minor faults and 2.9 s of system
    time, 0.1M and 0.4 s with blocks up to 32 MiB from the heap (the most glibc allows) and up
    to 256 MiB of freed heap kept."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    libc.mallopt(m_mmap_threshold, 32 * 2**20)
    libc.mallopt(m_trim_threshold, 256 * 2**20)


_MALLOC_TUNED = False


class Forward:
    """Calls the model on row chunks of at most ``max_tokens`` token positions (at least one
    row); halves the budget and retries on an out-of-memory error.

    Rows are independent, so chunking changes nothing but memory and speed.
    """

    def __init__(self, model: LanguageModel, device: torch.device, max_tokens: int,
                 stats: EngineStats, precision: str = "auto", normalize: bool = True):
        self.model = model
        self.device = device
        self.precision = precision
        self.max_tokens = max(1, max_tokens)
        self.stats = stats
        self.normalize = normalize
        self.can_skip = model.supports_unnormalized
        # positions per call whose normalised output fits OUTPUT_BYTES on a CPU: a (rows, V)
        # softmax of 2,048 rows is 80 MB at V = 10k, which glibc maps afresh (and the kernel
        # zeroes page by page) on every call: seconds of system time on a dev set. A
        # class-factored output forms no (rows, V) tensor.
        vocab = len(model.vocab) or 1
        full = not model.class_output
        self.output_rows = (max(1, OUTPUT_BYTES // (4 * vocab)) if device.type == "cpu" and full
                            else self.max_tokens)
        if device.type == "cpu":
            keep_freed_memory()
        # bf16 on a CPU: oneDNN builds (and keeps) a kernel per new shape of a product, which
        # costs more time than the product at the engine's row counts and memory for each
        # shape kept, so rows are padded up to a few counts (padded_rows)
        self.pad_rows = device.type == "cpu" and precision == "bf16"
        self.int8 = contextlib.nullcontext
        # the engine's paths through the model's parts (its kernels; the outputs read for their
        # targets only), handed to a model that takes them (LanguageModel.takes_inference)
        self.paths = InferencePaths(int8=precision == "int8")
        self.inference = {"inference": self.paths} if model.takes_inference else {}
        if precision == "int8":
            if device.type != "cpu":
                raise RescoreError("--precision int8 on a CPU (--device cpu); on CUDA use bf16 or auto",
                                   got=f"device {device}")
            if quant.engine() is None:
                raise RescoreError("a PyTorch build with a quantised CPU engine for --precision int8",
                                   got=f"torch {torch.__version__}: none of {', '.join(quant.ENGINES)}")
            self.int8 = quant.int8_products
            log.info("int8 products: %s", "fused kernels (one torch thread)" if native.int8_fused_usable()
                     else f"PyTorch's dynamic int8 products ({torch.get_num_threads()} torch threads; "
                          "the fused kernels run with one thread and the compiled kernels)")

    def __call__(self, ids: Tensor, ident: Tensor, state: LMState, rows: Tensor,
                 reduce: Callable[[HeadOutput, int, int], None],
                 tree: Optional[Tuple[Tensor, Tensor]] = None,
                 outputs: bool = True) -> Optional[LMState]:
        """Consume ``ids``/``ident`` ((B, T) int64) from ``state.select(rows)`` ((B,) int64).

        ``reduce(out, start, stop)`` consumes each chunk's HeadOutput (rows start..stop-1), which
        is freed afterwards: the (B, T, V) output never exists at once. Returns the (B,) states
        after the last position; with ``tree`` = (depth (B, T), ancestor (B, T, T)) each row is
        a prefix tree (``model.forward_tree``) and nothing is returned. ``outputs=False``: only
        the states are wanted, so a model that can skips its normaliser.
        """
        B, T = ids.shape
        kw = {} if (self.normalize and outputs) or not self.can_skip else {"normalize": False}
        kw.update(self.inference)
        states: List[LMState] = []
        start = 0
        while start < B:
            n = self._rows_per_call(T, outputs)
            stop = min(B, start + n)
            try:
                with self.modes():
                    if tree is None:
                        sel = padded_rows(start, stop) if self.pad_rows else slice(start, stop)
                        out, st = self.model(ids[sel], ident[sel], state.select(rows[sel]), **kw)
                        if self.pad_rows and st is not None:
                            st = st.select(torch.arange(stop - start, device=ids.device))
                    else:
                        st = None
                        out = self.model.forward_tree(
                            ids[start:stop], ident[start:stop], tree[0][start:stop],
                            tree[1][start:stop], state.select(rows[start:stop]), **kw)
                reduce(out, start, stop)
            except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError
                if not is_oom(err) or n == 1:
                    raise
                del err
                self.max_tokens = max(1, (n // 2) * T)
                self.stats.oom_backoffs += 1
                log.warning("out of memory on %d x %d tokens; going on with %d tokens per call",
                            stop - start, T, self.max_tokens)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            self.stats.calls += 1
            self.stats.rows += (stop - start) * T
            states.append(st)
            start = stop
        if tree is not None:
            return None
        return states[0] if len(states) == 1 else LMState.cat(states)

    def _rows_per_call(self, T: int, outputs: bool = True) -> int:
        """Rows of T positions per model call: max_tokens, and with normalised outputs on a CPU
        output_rows."""
        n = max(1, self.max_tokens // T)
        if self.normalize and outputs:
            n = max(1, min(n, self.output_rows // T))
        return n

    @contextlib.contextmanager
    def modes(self):
        """The precision's contexts for the model's calls."""
        with autocast_for(self.device, self.precision), self.int8():
            yield

    def level_steps(self, starts: LMState) -> Optional["LevelSteps"]:
        """One-token steps over trie levels from the start states ``starts`` (LevelSteps), for a
        model the engine can run so itself (an LSTM body and a softmax head, rescore.models.lm.
        NeuralLM, at inference on a CPU in fp32 or int8: rescore.engine.lstm_steps.LSTMLevels),
        or None: then the engine calls this Forward per level. Call within ``modes()``."""
        model = self.model
        if (not model.lstm_levels() or self.pad_rows or set(starts.tensors) != {"h", "c"}
                or model.training or torch.is_grad_enabled() or self.device.type != "cpu"):
            return None
        low = self.paths.low_precision(self.device.type)
        if low not in (None, torch.qint8):  # (bf16: the engine pads rows, padded_rows)
            return None
        return LevelSteps(self, LSTMLevels(model.body, model.embedding.weight, low), starts)


class LevelSteps:
    """A Forward's calls over the levels of prefix tries, through level steps
    (rescore.engine.lstm_steps.LSTMLevels): the same rows in the same chunks as
    ``Forward.__call__`` on one-token rows, without a state object per call."""

    def __init__(self, forward: Forward, steps, starts: LMState):
        self.forward, self.steps = forward, steps
        steps.start(starts.tensors["h"], starts.tensors["c"])

    def level(self, ids: Tensor, parents: Tensor, reduce: Callable[[HeadOutput, int, int], None],
              ident: Optional[Tensor] = None) -> None:
        """Consume ``ids`` (B,) int64 from the previous level's rows ``parents`` (B,) (at the
        first level: rows of the start states); ``reduce`` as in ``Forward.__call__``. (A head
        without history takes no identities: ``ident`` is not read.)"""
        fw, B = self.forward, ids.shape[0]
        normalize = fw.normalize or not fw.can_skip
        n = fw._rows_per_call(1)
        self.steps.begin(B)
        for start in range(0, B, n):
            stop = min(B, start + n)
            hidden = self.steps.step(start, stop, ids[start:stop], parents[start:stop])
            out, _ = fw.paths.head(fw.model.head, fw.model.drop(hidden), None, None, {}, normalize)
            reduce(out, start, stop)
            fw.stats.calls += 1
            fw.stats.rows += stop - start
        self.steps.end()

    def states(self, rows: Tensor) -> LMState:
        """The states after the last level's ``rows``."""
        return LMState(self.steps.states(rows))

    def whole(self, forest, rows: Tensor, want_ends: bool,
              outputs: bool = True) -> Optional[Tuple[Tensor, Optional[LMState]]]:
        """Every level of ``forest`` (rescore.engine.levels.LevelForest; its roots from rows ``rows``
        of the start states) in one call where the model's steps and head have one (the fused
        int8 kernels, rescore.engine.kernels.native.levels_int8): the log P of every edge slot (before
        any OOV penalty: the caller's; zeros with ``outputs=False``, when only the states are
        wanted), and with ``want_ends`` the states after ``forest.ends``; else None."""
        fw = self.forward
        run = self.steps.whole
        normalize = (fw.normalize and outputs) or not fw.can_skip
        output = linear_output(fw.model.head, normalize, fw.paths.int8)
        if output is None:
            return None
        node, target, _, slot = forest.edges()
        if not outputs:
            node, target, slot = node[:0], target[:0], slot[:0]
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        done = run(t(forest.level_start), t(forest.parent), t(forest.tok_id), rows,
                   (t(node), t(target), t(slot)), 2 * forest.n_nodes, output,
                   t(forest.ends) if want_ends else None)
        if done is None:
            return None
        lp, ends = done
        fw.stats.calls += len(forest.level_start) - 1
        fw.stats.rows += forest.n_nodes
        return lp, None if ends is None else LMState(ends)


def padded_rows(start: int, stop: int) -> Tensor:
    """Indexes start..stop-1, then stop-1 repeated up to a multiple of 64 rows (256 past 1,024):
    the extra rows repeat the last one and their outputs are not read."""
    n = stop - start
    step = 64 if n <= 1024 else 256
    idx = torch.arange(start, start + n + (-n % step))
    return idx.clamp_(max=stop - 1)


def target_log_prob(out: HeadOutput, b: Tensor, t: Tensor, tid: Tensor, tident: Tensor,
                    oov: Tensor, oov_penalty: float) -> Tensor:
    """log P of targets at chosen positions, with the OOV penalty on the vocabulary part.

    b, t: (E,) int64 row and position in ``out``; tid, tident: (E,) target ids / identities;
    oov: (E,) bool, target outside the vocabulary. Returns (E,) float32.
    An OOV target scores as ``P(<unk>) * exp(-oov_penalty)`` plus the copy mass of the history
    slots holding the same identity: the mixture of ``HeadOutput.log_prob``.
    """
    lv = out.vocab_at(b, t, tid).float()  # (E,)
    if oov_penalty:
        lv = lv - oov_penalty * oov.to(lv.dtype)
    if out.log_slot is None:
        return lv
    E = b.shape[0]
    gathered = HeadOutput(
        log_vocab=lv.view(E, 1, 1),
        log_slot=out.log_slot[b, t].float().unsqueeze(1),      # (E, 1, L)
        slot_ident=out.slot_ident[b, t].unsqueeze(1),          # (E, 1, L)
    )
    return gathered.log_prob(torch.zeros(E, 1, dtype=torch.long, device=b.device),
                             tident.view(E, 1)).view(E)


@dataclass
class RunContext:
    """One model's run: the model on its device, the settings, and what they resolve to."""

    model: LanguageModel
    device: torch.device
    weight: float  # NN LM weight of the final cost (the carried best hypothesis)
    settings: EngineSettings
    eos: int
    n_vocab: int
    oov_penalty: float  # nats, resolved (settings.oov_penalty may be 'auto')
    forward: Forward
    stats: EngineStats
    progress: bool

    def tensor(self, x) -> Tensor:
        return torch.as_tensor(x, dtype=torch.long, device=self.device)

    def io(self, hyp: Hyp) -> Tuple[List[int], List[int], List[int], List[int]]:
        """Inputs ``<eos> w1..wn`` and targets ``w1..wn <eos>`` (ids, identities)."""
        return ([self.eos] + hyp.ids, [self.eos] + hyp.ident,
                hyp.ids + [self.eos], hyp.ident + [self.eos])

    def end_states(self, roots: LMState, root_rows: List[int], hyps: List[Hyp]) -> LMState:
        """States after ``<eos> w1..wn`` of each hypothesis from its root row, without padding.

        Shortest first, the hypotheses run side by side over the positions they all still have:
        one multi-token call per distinct length takes every unfinished hypothesis from the
        previous length to this one. A call's cost is mostly per position (its products are
        matrix-vector sized), so k hypotheses of k lengths cost about the longest one's positions,
        not the sum of all (the first-pass carry's chain of rank-1 hypotheses, one per job).
        Where the model runs whole tries in one call (LevelSteps.whole: the fused int8 kernels),
        the hypotheses go through it as tries of one hypothesis each, their outputs left out."""
        whole = self._end_states_whole(roots, root_rows, hyps)
        if whole is not None:
            return whole
        order = sorted(range(len(hyps)), key=lambda i: len(hyps[i].ids))
        seqs = [[self.eos] + hyps[i].ids for i in order]
        idents = [[self.eos] + hyps[i].ident for i in order]
        state, rows = roots, self.tensor([root_rows[i] for i in order])
        done, pos, finished = 0, 0, []
        while done < len(order):
            n = len(seqs[done])
            st = self.forward(self.tensor([s[pos:n] for s in seqs[done:]]),
                              self.tensor([s[pos:n] for s in idents[done:]]), state, rows,
                              lambda *a: None, outputs=False)
            k = sum(1 for s in seqs[done:] if len(s) == n)  # those that end here come first
            finished.append(st.select(self.tensor(list(range(k)))))
            state, rows = st, self.tensor(list(range(k, len(seqs) - done)))
            done, pos = done + k, n
        back = [0] * len(order)  # position in sorted order of each hypothesis
        for j, i in enumerate(order):
            back[i] = j
        return LMState.cat(finished).select(self.tensor(back))

    def _end_states_whole(self, roots: LMState, root_rows: List[int], hyps: List[Hyp]) -> Optional[LMState]:
        """end_states by LevelSteps.whole, or None where the model has no such call."""
        with self.forward.modes():
            steps = self.forward.level_steps(roots)
            if steps is None:
                return None
            forest = LevelForest.build([[h] for h in hyps], self.eos)
            done = steps.whole(forest, self.tensor(root_rows), want_ends=True, outputs=False)
        if done is None:
            return None
        return done[1].select(self.tensor(np.searchsorted(forest.ends, forest.end_node).tolist()))

    def carried(self, ends: LMState, utts: List[Tuple[List[Hyp], List[Costs], List[float], int]]) -> LMState:
        """The carried states ``ends`` (one row per utterance of ``utts``: (hypotheses, their
        costs, their fixed costs, the index of the best one)) with the history filter of
        ``--history-min-posterior``: each word of the best hypothesis whose posterior is below
        it is left out of the history (rescore.models.base.forget_inputs)."""
        floor = self.settings.history_min_posterior
        if floor <= 0:
            return ends
        forget_inputs(ends, [[p < floor for p in word_posteriors(hyps, costs, fixed, self.weight, best)]
                             for hyps, costs, fixed, best in utts])
        return ends

    def count(self, hyps: List[Hyp]):
        self.stats.hyps += len(hyps)
        self.stats.tokens += sum(len(h.ids) + 1 for h in hyps)


def word_posteriors(hyps: List[Hyp], costs: List[Costs], fixed: List[float], weight: float,
                    best: int) -> List[float]:
    """The N-best posterior of each word of ``hyps[best]`` (rescore.nbest.interp.word_posterior_mass
    over identities), the totals being fixed + weight * sum(costs)."""
    mass = word_posterior_mass([total_cost(f, sum(c), weight) for f, c in zip(fixed, costs)],
                               (h.ident for h in hyps))
    return [mass[w] for w in hyps[best].ident]


def progress_bar(ctx: RunContext, total: int, desc: str):
    return progress(total=total, desc=desc, unit="hyp", enabled=ctx.progress)

