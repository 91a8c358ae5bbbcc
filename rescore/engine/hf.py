"""N-best costs by a Hugging Face causal LM (rescore.models.hf.HfLM): rescore.engine.score.score_nbest's
contract (``result[c][u][h]``: per-word costs, end of sentence last) for subword models.

Each hypothesis is scored after its utterance's context (rescore.models.hf: ``<bos>`` without
carry, else the conversation's stream of best hypotheses, each followed by ``<eos>``, kept within
``lm.context`` tokens by _slide); its subword costs are summed per word. Engines:

* ``naive``   one hypothesis at a time: context + hypothesis as one causal forward, no padding.
              The reference.
* ``padded``  the way Hugging Face users rescore: each hypothesis (with its context) one row,
              the hypotheses of an utterance batched with right padding and a 2-D mask.
* ``fast``    prefix sharing: the hypotheses of an utterance form a token trie; a row holds
              the context's last token, then every distinct token prefix once (the trie's
              nodes), under tree attention (a node sees the context and its own ancestors:
              _tree_attention, computed block by block over the keys each block can see; a
              dense tree mask for model types outside TREE_ATTENTION_TYPES) with position ids
              ``len(context) - 1 + depth``. The rest of the context
              is the conversation's KV cache: computed once, extended by each utterance's carried
              best hypothesis with the keys and values its trie call computed (recomputed only
              where the context window slides: a quarter window at a time, _slide), and shared
              by every part of a trie (one of more than ``max_tokens`` nodes is cut into parts
              of sorted hypotheses; the cache is cropped back after each). On a CPU one call per
              part; on a GPU the parts of the conversations' current utterances side by side,
              up to ``max_tokens`` positions a call (_kv_batch_call). Out of memory, the budget
              is halved and the utterances scored again (_kv_wave).

The output layer runs only where a token is scored; on a CPU, for the model types whose logits
are the last hidden state times the output layer (PLAIN_HEAD_TYPES), over HEAD_COLUMNS vocabulary
entries at a time, so that a call's logits are never held whole (_head_log_probs).

The carry picks the hypothesis by the rule of every engine (rescore.engine.carry): rank 1
(first-pass) or the best by ``fixed + weight * sum(costs)`` (rescored). On CUDA the forward runs
under rescore.engine.forward.autocast_for (bf16 where supported, else fp16); log-probabilities are
fp32.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import List, Optional, Sequence, Tuple

import torch

from rescore.engine.carry import carry_choice
from rescore.engine.forest import TokenTrie, token_tries
from rescore.engine.forward import autocast_for, is_oom, resolve_device
from rescore.engine.types import EngineStats
from rescore.errors import OptionError, RescoreError
from rescore.settings import OOV_AUTO, EngineSettings
from rescore.progress import progress as progress_bar

log = logging.getLogger(__name__)

Item = Tuple[List[int], List[List[int]]]  # (context tokens, token ids of each hypothesis)


def _check_settings(lm, s: EngineSettings) -> None:
    """The settings that do not apply to a subword LM refused rather than ignored: an OOV penalty
    other than 0 ('auto' is 0: rescore.models.hf.load_for_scoring), a schedule other than a trie
    per row, costs without the softmax normaliser."""
    if s.oov_penalty not in (None, OOV_AUTO) and s.oov_penalty != 0:
        raise RescoreError("OOV penalty 0 for an hf: model (its subword tokenizer has no "
                           "out-of-vocabulary word)", path=lm.path, got=str(s.oov_penalty))
    if s.schedule not in ("auto", "tree"):
        raise RescoreError("schedule auto or tree for an hf: model (a trie per row under a tree "
                           "mask)", path=lm.path, got=s.schedule)
    if s.normalize not in ("exact", "auto"):
        raise RescoreError("normalize exact (or auto) for an hf: model", path=lm.path, got=s.normalize)


def score_hf(lm, conversations, weight: float, settings: EngineSettings, device,
             stats: Optional[EngineStats] = None, progress: bool = True):
    """Per-word NN costs of every hypothesis (rescore.engine.score.score_nbest's result, its settings
    checked and ``device`` resolved: a spec or a torch.device; module docstring). Hypotheses
    longer than the model's positions (less one) are refused."""
    _check_settings(lm, settings)
    if settings.history_min_posterior > 0:
        raise OptionError("a model with a word history (a pointer head, or --cache-window > 0)",
                          "--history-min-posterior", got="a Hugging Face causal LM")
    engine, state_carry, conv_batch = settings.engine, settings.state_carry, settings.conv_batch
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    lm.to(dev)
    stats = stats if stats is not None else EngineStats()
    run = _Runner(lm, dev, settings.max_tokens, settings.precision, stats)
    enc = [[[lm.encode(h) for h in utt.hyps] for utt in conv] for conv in conversations]
    wave = {"padded": _padded_wave, "naive": _naive_wave}.get(engine)
    caches = _ContextCaches(run) if engine == "fast" else None
    choose = carry_choice(state_carry, weight, (1.0,))  # (rescore.engine.score's rule, one model)
    bar = progress_bar(total=sum(len(u.hyps) for c in conversations for u in c), desc=f"hf {engine}",
                       unit="hyp", enabled=progress)
    result: List[List[list]] = [[None] * len(conv) for conv in conversations]
    with torch.inference_mode():
        for b in range(0, len(conversations), conv_batch):
            block = range(b, min(len(conversations), b + conv_batch))
            history = {c: [lm.bos_id] for c in block}  # the stream <bos> s1 <eos> s2 <eos> ...
            for k in range(max(len(conversations[c]) for c in block)):
                convs = [c for c in block if k < len(conversations[c])]
                items = [(_context(lm, history[c], enc[c][k], c, k), [ids for ids, _ in enc[c][k]])
                         for c in convs]
                scored = _kv_wave(caches, convs, items) if caches is not None else wave(run, items)
                for c, tok_costs in zip(convs, scored):
                    costs = [_word_costs(t, lens) for t, (_, lens) in zip(tok_costs, enc[c][k])]
                    result[c][k] = costs
                    stats.hyps += len(costs)
                    stats.tokens += sum(len(x) for x in costs)
                    bar.update(len(costs))
                    if state_carry != "none" and costs:
                        best = choose([[(costs, conversations[c][k].fixed)]])[0]
                        history[c] = _slide(lm, history[c] + enc[c][k][best][0] + [lm.eos_id])
            if caches is not None:
                caches.clear()
    bar.close()
    log.info("%d hypotheses, %d word costs: %d token positions computed in %d forward calls",
             stats.hyps, stats.tokens, stats.rows, stats.calls)
    return result


CONTEXT_SLIDE = 4  # past its window, the carried stream drops a quarter of the window at a time


def _slide(lm, stream: List[int]) -> List[int]:
    """The carried stream kept within the context window (``lm.context`` tokens, at most the
    model's positions): past it, only the last three quarters of the window are kept, so the
    context starts at the same token for the next utterances, and the fast engine extends its
    cache of the context instead of recomputing all of it after every utterance (about once per
    quarter window of carried tokens)."""
    window = min(lm.context, lm.max_positions)
    if len(stream) <= window:
        return stream
    return stream[-max(1, window - window // CONTEXT_SLIDE):]


def _context(lm, history: List[int], hyps, c: int, k: int) -> List[int]:
    """The carried stream ``history`` (_slide: at most ``lm.context`` tokens; at least the boundary
    token), its last tokens only where the utterance's longest hypothesis would not fit in the
    model's positions with all of it."""
    longest = max((len(ids) for ids, _ in hyps), default=0)
    if longest + 1 > lm.max_positions:
        raise RescoreError(f"hypotheses of at most {lm.max_positions - 1} tokens for a model of "
                           f"{lm.max_positions} positions", path=lm.path,
                           got=f"{longest} tokens in utterance {k + 1} of conversation {c + 1}")
    return history[-max(1, min(lm.context, lm.max_positions - longest)):]


def _word_costs(tok_costs: List[float], lens: List[int]) -> List[float]:
    """Subword costs (end of sentence last) summed per word: len(lens) + 1 values."""
    out, pos = [], 0
    for n in lens:
        out.append(sum(tok_costs[pos:pos + n]))
        pos += n
    out.append(tok_costs[pos])
    return out


class _Runner:
    """The model's forward: autocast, fp32 log-probabilities of chosen targets, counts."""

    def __init__(self, lm, device: torch.device, max_tokens: int, precision: str, stats: EngineStats):
        self.lm, self.device, self.max_tokens, self.precision, self.stats = lm, device, max_tokens, precision, stats

    def tensor(self, x, dtype=torch.long):
        return torch.as_tensor(x, dtype=dtype, device=self.device)

    def log_probs(self, ids, b: List[int], pos: List[int], tgt: List[int], **kw) -> List[float]:
        """log P(tgt[j] | row b[j] up to position pos[j]) after one forward of ``ids`` (B, L)."""
        model = self.lm.model
        head = _plain_head(model) if self.device.type == "cpu" else None
        with autocast_for(self.device, self.precision):
            kw.setdefault("use_cache", False)
            if head is not None:  # the body only: the output layer below, in slices
                x = model.base_model(input_ids=ids, **kw).last_hidden_state
            else:
                x = model(input_ids=ids, **kw).logits
        B, L = ids.shape
        self.stats.calls += 1
        self.stats.rows += B * L
        bt, pt = self.tensor(b), self.tensor(pos)
        # only the distinct (row, position) pairs read (every one in a trie call: no copy then)
        flat = bt * L + pt
        uniq, inv = torch.unique(flat, return_inverse=True)
        x = x.reshape(B * L, -1)
        if uniq.numel() < B * L:
            x = x[uniq]
        tgt_t = self.tensor(tgt)
        if head is not None:
            lp = _head_log_probs(x, head, inv, tgt_t)
        else:
            lp = x[inv, tgt_t].float() - _log_normaliser(x)[inv]
        return lp.double().tolist()


HEAD_COLUMNS = 2048  # output-layer rows (vocabulary entries) per product on a CPU
PLAIN_HEAD_TYPES = ("llama", "gpt2", "qwen2", "qwen3", "mistral")  # logits = lm_head(last hidden state)


def _plain_head(model) -> Optional[torch.nn.Linear]:
    """The output layer of a model type whose logits are its last hidden state times it (no
    scaling or soft cap), else None."""
    head = model.get_output_embeddings()
    if model.config.model_type in PLAIN_HEAD_TYPES and isinstance(head, torch.nn.Linear):
        return head
    return None


def _head_log_probs(h: torch.Tensor, head: torch.nn.Linear, inv: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """fp32 log P(tgt[j]) from the last hidden states ``h`` (rows, dim) at rows ``inv[j]``: the
    target's logit as one dot product, the normaliser over HEAD_COLUMNS vocabulary entries at a
    time. The logits of all rows at once (hundreds of MB for a large vocabulary) made the product
    wait on memory and logsumexp pass over them several times; the slices stay in cache (about
    1.3x faster for SmolLM2's 49,152 entries, costs equal to 1e-5)."""
    w, bias = head.weight, head.bias
    h = h.to(w.dtype)
    logit = (h[inv] * w[tgt]).sum(-1).float()
    if bias is not None:
        logit = logit + bias[tgt].float()
    parts = [torch.logsumexp(torch.nn.functional.linear(h, w[j:j + HEAD_COLUMNS],
                                                        None if bias is None else bias[j:j + HEAD_COLUMNS]).float(), -1)
             for j in range(0, w.shape[0], HEAD_COLUMNS)]
    return logit - torch.logsumexp(torch.stack(parts, -1), -1)[inv]


NORMALISER_ROWS = 16  # rows of logits per logsumexp on a CPU: a few MB, in cache


def _log_normaliser(x: torch.Tensor) -> torch.Tensor:
    """fp32 log of the softmax normaliser of each row of ``x`` (rows, vocabulary). On a CPU in
    slices of NORMALISER_ROWS rows: logsumexp makes several passes (max, difference, exp, sum), each
    over the whole matrix it is given; over all of a call's logits at once (hundreds of MB for a
    large vocabulary) that was 11 % of a SmolLM2 call, about 3x what the slices take."""
    if x.device.type != "cpu" or x.shape[0] <= NORMALISER_ROWS:
        return torch.logsumexp(x.float(), -1)
    return torch.cat([torch.logsumexp(x[i:i + NORMALISER_ROWS].float(), -1)
                      for i in range(0, x.shape[0], NORMALISER_ROWS)])


def _batches(lengths: Sequence[int], max_tokens: int) -> List[List[int]]:
    """Indexes of rows sorted by length, cut into calls of at most max_tokens positions
    (rows x longest; at least one row)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    out: List[List[int]] = []
    for i in order:
        if out and (len(out[-1]) + 1) * lengths[i] <= max_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _targets(hyp: List[int], eos: int) -> List[int]:
    return hyp + [eos]


def _naive_wave(run: _Runner, items: List[Item]) -> List[List[List[float]]]:
    out = []
    for ctx, hyps in items:
        costs = []
        for h in hyps:
            tgt = _targets(h, run.lm.eos_id)
            pos = list(range(len(ctx) - 1, len(ctx) + len(h)))
            lp = run.log_probs(run.tensor([ctx + h]), [0] * len(tgt), pos, tgt)
            costs.append([-x for x in lp])
        out.append(costs)
    return out


def _padded_wave(run: _Runner, items: List[Item]) -> List[List[List[float]]]:
    eos = run.lm.eos_id
    out = []
    for ctx, hyps in items:
        costs: List[Optional[List[float]]] = [None] * len(hyps)
        for batch in _batches([len(ctx) + len(h) for h in hyps], run.max_tokens):
            L = max(len(ctx) + len(hyps[i]) for i in batch)
            rows = [ctx + hyps[i] + [eos] * (L - len(ctx) - len(hyps[i])) for i in batch]
            mask = [[1] * (len(ctx) + len(hyps[i])) + [0] * (L - len(ctx) - len(hyps[i])) for i in batch]
            b, pos, tgt = [], [], []
            for r, i in enumerate(batch):
                t = _targets(hyps[i], eos)
                b += [r] * len(t)
                pos += range(len(ctx) - 1, len(ctx) + len(hyps[i]))
                tgt += t
            lp = run.log_probs(run.tensor(rows), b, pos, tgt, attention_mask=run.tensor(mask))
            at = 0
            for i in batch:
                n = len(hyps[i]) + 1
                costs[i] = [-x for x in lp[at:at + n]]
                at += n
        out.append(costs)
    return out


class _ContextCaches:
    """The KV cache of each conversation's context less its last token (the fast engine):
    extended by the tokens carried since, rebuilt from scratch where the context is not an
    extension of the cached tokens (the window slid, or a new conversation). The carried tokens
    (the context's last token and the chosen hypothesis) take the keys and values the trie call
    already computed for them (``keep``): the carry computes nothing."""

    def __init__(self, run: _Runner):
        self.run = run
        self.tokens = {}
        self.cache = {}
        self.kept = {}  # c -> (cached length P, the context's last token, {hypothesis tokens: (kv, rows)})

    def clear(self) -> None:
        self.tokens.clear()
        self.cache.clear()
        self.kept.clear()

    def keep(self, c: int, ctx: List[int], kv, trie: TokenTrie, hyps: List[List[int]]) -> None:
        """Hold the keys and values ``kv`` (per layer, (1, heads, positions, dim)) of a trie call
        (before its crop) for the carry: row P the context's last token, row P + 1 + n trie node n."""
        P = len(ctx) - 1
        kept = self.kept.get(c)
        if kept is None or kept[0] != P:
            kept = self.kept[c] = (P, ctx[-1], {})
        for i, path in zip(trie.hyps, trie.path):
            kept[2][tuple(hyps[i])] = (kv, [P] + [P + 1 + n for n in path])

    def get(self, c: int, prefix: List[int]):
        """The cache of ``prefix`` (the context less its last token) for conversation c."""
        from transformers import DynamicCache  # (lazy: transformers is the optional 'hf' extra)

        old = self.tokens.get(c)
        if old is None or len(old) > len(prefix) or prefix[:len(old)] != old:
            old, self.cache[c] = [], DynamicCache(config=self.run.lm.model.config)
        new = prefix[len(old):]
        kept = self.kept.pop(c, None)
        if new and not self._from_kept(self.cache[c], kept, len(old), new):
            run = self.run
            try:  # (in calls of at most max_tokens positions)
                for n in range(len(old), len(prefix), run.max_tokens):
                    chunk = prefix[n:n + run.max_tokens]
                    with autocast_for(run.device, run.precision):
                        run.lm.model(input_ids=run.tensor([chunk]), past_key_values=self.cache[c], use_cache=True,
                                     position_ids=run.tensor([list(range(n, n + len(chunk)))]), logits_to_keep=1)
                    run.stats.calls += 1
                    run.stats.rows += len(chunk)
            except BaseException:  # (an out-of-memory error part-way: the cache is rebuilt next time)
                self.tokens.pop(c, None)
                self.cache.pop(c, None)
                raise
        self.tokens[c] = list(prefix)
        return self.cache[c]

    def _from_kept(self, cache, kept, P: int, new: List[int]) -> bool:
        """Extend ``cache`` (P positions) by ``new`` from the kept rows of the last trie call,
        where ``new`` is that call's context's last token and one of its hypotheses."""
        if kept is None or kept[0] != P or new[0] != kept[1] or tuple(new[1:]) not in kept[2]:
            return False
        kv, rows = kept[2][tuple(new[1:])]
        if len(kv) != len(cache.layers) or any(getattr(layer, "keys", None) is None for layer in cache.layers):
            return False
        idx = self.run.tensor(rows)
        for layer, (k, v) in zip(cache.layers, kv):
            layer.keys = torch.cat([layer.keys[..., :P, :], k.index_select(-2, idx)], -2)
            layer.values = torch.cat([layer.values[..., :P, :], v.index_select(-2, idx)], -2)
        return True


# The fast engine's calls: each conversation's trie cut into parts of at most max_tokens nodes (one
# row each: the context's last token, then the part's nodes). On a CPU a call is one row under tree
# attention: every position a row holds is computed whole by the CPU, so padding would cost in
# proportion (SmolLM2, 4 dev conversations' first 2 utterances, one thread: 26.5 CPU-s side by side
# against 20.0 one trie per call; tools/bench/bench_hf.py --engines fast-single,fast-batched). On a
# GPU one row leaves the device mostly idle: the rows of several conversations' current utterances
# (and of the parts of one) go side by side into one call, up to max_tokens positions (rows x
# longest row), each row after its own conversation's cached context under a dense tree mask
# (_kv_batch_call). Out of memory, the budget is halved and the wave run again.
SIDE_BY_SIDE_DEVICES = ("cuda",)  # device types whose calls hold the rows of several tries


def _kv_wave(caches: _ContextCaches, convs: List[int], items: List[Item]) -> List[List[List[float]]]:
    """The fast engine with the context from each conversation's KV cache: the tries of the
    wave's utterances (utterance k of each conversation ``convs``) in calls of at most
    ``max_tokens`` positions; on an out-of-memory error the budget is halved (stats.oom_backoffs)
    for the rest of the run and the wave scored again (a budget of one position that still runs
    out raises the error: a call of one hypothesis cannot be cut)."""
    run = caches.run
    while True:
        out: List[List[Optional[List[float]]]] = [[None] * len(hyps) for _, hyps in items]
        try:
            _kv_wave_once(caches, convs, items, out)
            return out
        except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError
            if not is_oom(err) or run.max_tokens <= 1:
                raise
            del err
            run.max_tokens = max(1, run.max_tokens // 2)
            run.stats.oom_backoffs += 1
            log.warning("out of memory in a forward call; going on with %d tokens per call", run.max_tokens)
            if run.device.type == "cuda":
                torch.cuda.empty_cache()


def _kv_wave_once(caches: _ContextCaches, convs: List[int], items: List[Item],
                  out: List[List[Optional[List[float]]]]) -> None:
    run = caches.run
    parts: List[Tuple[int, TokenTrie]] = []  # (index in the wave, a part of its trie)
    for i, (c, (ctx, hyps)) in enumerate(zip(convs, items)):
        if hyps:
            caches.get(c, ctx[:-1])
            parts += [(i, trie) for trie in token_tries(hyps, max(1, run.max_tokens - 1))]
    for call in _side_by_side(parts, run.max_tokens, run.device.type in SIDE_BY_SIDE_DEVICES):
        if len(call) == 1:
            i, trie = call[0]
            c, (ctx, hyps) = convs[i], items[i]
            cache = caches.cache[c]
            try:
                _kv_call(run, cache, ctx, trie, out[i])
                caches.keep(c, ctx, [(layer.keys, layer.values) for layer in cache.layers], trie, hyps)
            finally:  # (also after an error part-way, some layers extended)
                _crop(cache, len(ctx) - 1)
        else:
            _kv_batch_call(caches, [(convs[i], items[i][0], items[i][1], trie, out[i]) for i, trie in call])


def _side_by_side(parts: List[Tuple[int, TokenTrie]], max_tokens: int, batch: bool) -> List[list]:
    """The calls: one part each, or (``batch``) parts sorted by size, as many side by side as fit
    in ``max_tokens`` positions (rows x (1 + the most nodes))."""
    if not batch:
        return [[p] for p in parts]
    calls: List[list] = []
    for p in sorted(parts, key=lambda p: len(p[1].tok)):
        if calls and (len(calls[-1]) + 1) * (1 + len(p[1].tok)) <= max_tokens:
            calls[-1].append(p)
        else:
            calls.append([p])
    return calls


def _kv_batch_call(caches: _ContextCaches, rows) -> None:
    """One forward of several trie parts side by side, ``rows`` of (conversation, context, its
    hypotheses' tokens, part, the utterance's costs to fill). Row b holds its conversation's
    cached context (P_b positions) left-padded to the longest (P), then its context's last token
    and its part's nodes, right-padded to the longest (Q):

        keys of row b:  [ pad .. pad | context (P_b) | last token, node 0 .. node N_b-1 | pad ]
                          P - P_b                      1 + N_b                              Q - 1 - N_b

    A dense mask (B, 1, Q, P + Q) lets a row's last token see its context and itself, a node its
    context, the last token and its ancestors-or-self, a padding row itself (its outputs unread).
    The keys and values of the call are kept for the carry (_ContextCaches.keep)."""
    from transformers import DynamicCache  # (lazy: transformers is the optional 'hf' extra)

    run, eos = caches.run, caches.run.lm.eos_id
    B = len(rows)
    P = max(len(ctx) - 1 for _, ctx, _, _, _ in rows)
    Q = 1 + max(len(trie.tok) for _, _, _, trie, _ in rows)
    ids = torch.full((B, Q), eos, dtype=torch.long)
    posid = torch.zeros((B, Q), dtype=torch.long)
    mask = torch.zeros((B, 1, Q, P + Q), dtype=torch.bool)
    b, pos, tgt = [], [], []
    for r, (_, ctx, _, trie, _) in enumerate(rows):
        Pb, N = len(ctx) - 1, len(trie.tok)
        ids[r, :1 + N] = torch.tensor([ctx[-1]] + trie.tok)
        posid[r, :1 + N] = torch.tensor([Pb] + [Pb + d for d in trie.depth])
        mask[r, 0, :, P - Pb:P] = True
        mask[r, 0, :1 + N, P:P + 1 + N] = _tree_mask(1, trie, 1 + N)
        pad = torch.arange(1 + N, Q)
        mask[r, 0, pad, P + pad] = True
        for path, h in zip(trie.path, trie.tok_of_paths()):
            pos += [0] + [1 + n for n in path]
            tgt += h + [eos]
            b += [r] * (len(h) + 1)
    cache = DynamicCache(config=run.lm.model.config)
    if P > 0:
        for n, layers in enumerate(zip(*(caches.cache[c].layers for c, _, _, _, _ in rows))):
            k, v = zip(*(_left_pad(layer, P, layers) for layer in layers))
            cache.update(torch.cat(k), torch.cat(v), n)
    mask = mask.to(run.device)
    if getattr(run.lm.model.config, "_attn_implementation", "sdpa") == "eager":
        mask = torch.zeros(mask.shape, device=run.device).masked_fill(~mask, torch.finfo(torch.float32).min)
    lp = run.log_probs(ids.to(run.device), b, pos, tgt, attention_mask=mask,
                       position_ids=posid.to(run.device), past_key_values=cache, use_cache=True)
    at = 0
    for r, (c, ctx, hyps, trie, out) in enumerate(rows):
        Pb = len(ctx) - 1
        caches.keep(c, ctx, [(layer.keys[r:r + 1, :, P - Pb:], layer.values[r:r + 1, :, P - Pb:])
                             for layer in cache.layers], trie, hyps)
        for i, path in zip(trie.hyps, trie.path):
            out[i] = [-x for x in lp[at:at + len(path) + 1]]
            at += len(path) + 1


def _left_pad(layer, length: int, like) -> Tuple[torch.Tensor, torch.Tensor]:
    """A cache layer's keys and values (1, heads, P_b, dim) with zeros before them to ``length``
    positions; a layer of an empty context (P_b = 0) all zeros, shaped as the first non-empty
    layer among ``like``."""
    k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
    if k is None or k.numel() == 0:
        k, v = next((x.keys, x.values) for x in like if getattr(x, "keys", None) is not None and x.keys.numel())
        k, v = k[:, :, :0], v[:, :, :0]
    if k.shape[-2] == length:
        return k, v
    return tuple(torch.nn.functional.pad(x, (0, 0, length - x.shape[-2], 0)) for x in (k, v))


def _crop(cache, length: int) -> None:
    """Keep the first ``length`` positions of every layer of a DynamicCache (its own crop's
    argument changed meaning between transformers versions)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def _kv_call(run: _Runner, cache, ctx: List[int], trie: TokenTrie, out: List[Optional[List[float]]]) -> None:
    """One forward of [last context token] + the trie's nodes after the cached context: under tree
    attention (_tree_attention) where the model's attention allows it, else a dense tree mask."""
    eos, P, N = run.lm.eos_id, len(ctx) - 1, len(trie.tok)
    ids = [ctx[-1]] + trie.tok
    posid = [P] + [P + d for d in trie.depth]
    b, pos, tgt = [], [], []
    for path, h in zip(trie.path, trie.tok_of_paths()):
        pos += [0] + [1 + n for n in path]
        tgt += h + [eos]
    b = [0] * len(tgt)
    kw = dict(position_ids=run.tensor([posid]), past_key_values=cache, use_cache=True)
    if _tree_attention_applies(run.lm.model):
        with _tree_mode(run.lm.model, _tree_blocks(trie, P + 1, run.device)):
            lp = run.log_probs(run.tensor([ids]), b, pos, tgt, **kw)
    else:
        m = torch.ones(1 + N, P + 1 + N, dtype=torch.bool)
        m[:, P + 1:] = _tree_mask(1, trie, 1 + N)[:, 1:]
        m[0, P + 1:] = False
        mask = m[None, None].to(run.device)
        if getattr(run.lm.model.config, "_attn_implementation", "sdpa") == "eager":
            mask = torch.zeros(mask.shape, device=run.device).masked_fill(~mask, torch.finfo(torch.float32).min)
        lp = run.log_probs(run.tensor([ids]), b, pos, tgt, attention_mask=mask, **kw)
    at = 0
    for i, path in zip(trie.hyps, trie.path):
        out[i] = [-x for x in lp[at:at + len(path) + 1]]
        at += len(path) + 1


# Tree attention: the fast engine's call holds Q = 1 + N query rows (the context's last token, then
# the trie's N nodes) against C + Q keys (C cached context positions, then the same Q rows). Every
# row sees the C + 1 "dense" keys (the context and its last token); a node also sees its
# ancestors-or-self among the nodes. A dense (Q, C + Q) mask makes the products compute Q x N node
# scores of which all but Q x depth are masked: on a CPU that was a fifth of the call. The nodes are
# numbered in the order of the sorted hypotheses, a depth-first preorder, so the ancestors of any
# node of a block of consecutive rows are the ancestors of the block's first node or in the block:
# each block of TREE_BLOCK rows attends the dense keys and at most depth + TREE_BLOCK node keys.

TREE_ATTENTION_TYPES = ("llama", "gpt2", "qwen2", "qwen3", "mistral")  # plain scaled dot-product attention
TREE_BLOCK = 64
_TREE_NAME = "rescore_tree"
_TREE: "contextvars.ContextVar[Optional[List[Tuple[int, int, torch.Tensor, torch.Tensor]]]]" = \
    contextvars.ContextVar("rescore_tree", default=None)


def _tree_attention_applies(model) -> bool:
    """Whether the fast engine's calls may run under _tree_attention: a model type whose attention
    is plain scaled dot-product (no bias, soft cap or sliding window) behind sdpa or eager."""
    cfg = model.config
    windowed = getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
    return (getattr(cfg, "model_type", None) in TREE_ATTENTION_TYPES and not windowed
            and getattr(cfg, "_attn_implementation", None) in ("sdpa", "eager"))


def _tree_blocks(trie: TokenTrie, dense: int, device) -> List[Tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Per block of query rows [r0, r1): the node keys it reads (indexes among the nodes) and its
    mask (rows, dense + those keys), True where a row may attend."""
    N = len(trie.tok)
    anc = _tree_mask(0, trie, N)  # (N, N) ancestors-or-self
    parent = trie.parent
    blocks = []
    for r0 in range(0, 1 + N, TREE_BLOCK):
        r1 = min(1 + N, r0 + TREE_BLOCK)
        n0, n1 = max(r0 - 1, 0), r1 - 1          # the block's nodes (row 1 + n is node n)
        head, p = [], parent[n0] if N else -1
        while p >= 0:
            head.append(p)
            p = parent[p]
        sel = torch.tensor(head[::-1] + list(range(n0, n1)), dtype=torch.long)
        mask = torch.ones(r1 - r0, dense + len(sel), dtype=torch.bool)
        mask[r0 == 0:, dense:] = anc[n0:n1][:, sel]
        if r0 == 0:
            mask[0, dense:] = False
        if int(mask[:, dense:].sum()) != int(anc[n0:n1].sum()):  # (a trie not in preorder)
            raise AssertionError("tree attention: a block's ancestors outside its keys")
        blocks.append((r0, r1, sel.to(device), mask.to(device)))
    return blocks


@contextlib.contextmanager
def _tree_mode(model, blocks):
    """The model's attention as _tree_attention over ``blocks`` for the duration (no mask is
    built: the implementation has none registered)."""
    from transformers import AttentionInterface  # (lazy: transformers is the optional 'hf' extra)

    if _TREE_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(_TREE_NAME, _tree_attention)
    cfg, token = model.config, _TREE.set(blocks)
    before = cfg._attn_implementation
    cfg._attn_implementation = _TREE_NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before
        _TREE.reset(token)


def _tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """transformers' attention interface: query (1, H, Q, D), key/value (1, Hkv, C + Q, D) (the
    query rows' own keys last; query heads grouped as repeat_kv does); returns ((1, Q, H, D), None).
    A block's H query heads go in as Hkv heads of g x rows (no copy of the keys per group)."""
    if kw.get("softcap") is not None or kw.get("sliding_window") is not None:
        raise RescoreError("plain attention (no soft cap, no sliding window) for the fast engine's "
                           "tree attention", got=type(module).__name__)
    _, H, Q, D = query.shape
    Hkv, K = key.shape[1], key.shape[2]
    g, dense = H // Hkv, K - Q + 1
    kd, vd, kn, vn = key[:, :, :dense], value[:, :, :dense], key[:, :, dense:], value[:, :, dense:]
    outs = []
    for r0, r1, sel, mask in _TREE.get():
        B = r1 - r0
        q = query[:, :, r0:r1].reshape(1, Hkv, g * B, D)
        k = torch.cat([kd, kn.index_select(2, sel)], 2)
        v = torch.cat([vd, vn.index_select(2, sel)], 2)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.repeat(g, 1), scale=scaling)
        outs.append(o.view(1, H, B, D))
    return torch.cat(outs, 2).transpose(1, 2).contiguous(), None


def _tree_mask(ctx_len: int, trie: TokenTrie, L: int) -> torch.Tensor:
    """(L, L) bool, True where a query position may attend: the context causally, a node the
    context and its ancestors-or-self, a padding position itself."""
    N = len(trie.tok)
    m = torch.zeros(L, L, dtype=torch.bool)
    m[:ctx_len, :ctx_len] = torch.ones(ctx_len, ctx_len, dtype=torch.bool).tril()
    m[ctx_len:ctx_len + N, :ctx_len] = True
    anc = torch.eye(N, dtype=torch.bool)
    depth, parent = torch.tensor(trie.depth, dtype=torch.long), torch.tensor(trie.parent, dtype=torch.long)
    for d in range(2, int(depth.max()) + 1 if N else 0):  # parents before children, level by level
        idx = (depth == d).nonzero().squeeze(1)
        anc[idx] |= anc[parent[idx]]
    m[ctx_len:ctx_len + N, ctx_len:ctx_len + N] = anc
    pad = torch.arange(ctx_len + N, L)
    m[pad, pad] = True
    return m
