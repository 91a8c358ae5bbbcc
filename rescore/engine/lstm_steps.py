"""The engine's inference paths of the models it knows, and the kernel each takes: chosen here,
from the engine's settings, and handed to a model's forward explicitly (``inference=``; see
rescore.models.base.Inference), never read by the model from ambient state.

* An LSTM body's one-token step (``step_ids``): layer 0's input projection read from a (V, 4H)
  table, in fp32 (PyTorch's products, the cell one fused kernel where rescore.engine.kernels.native
  runs), bf16, or int8 (the fused int8 layers on one torch thread, else PyTorch's dynamic int8
  products, rescore.engine.kernels.quant); ``LSTMLevels``: the same steps over the levels of
  prefix tries, states kept in arrays, with the fused int8 kernels all levels in one call.
* A softmax output layer read for its targets only (``softmax_output``): each row's log Z by one
  kernel (fp32, or int8 fused), never the (B, T, V) log-probabilities; an unnormalised one's
  target rows by one dot product each (``rows_scorer``).

The arithmetic is the models' (rescore.models.bodies, rescore.models.heads): the same costs to
the kernels' rounding.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from rescore.engine.kernels import native, quant
from rescore.models.base import HeadOutput
from rescore.models.bodies import LSTMBody
from rescore.models.heads import OutputRows, SoftmaxHead, log_norm
from rescore.engine.kernels.quant import Int8Linear


class InferencePaths:
    """What a model's forward asks the engine for (rescore.models.base.Inference), for one run:
    ``int8`` (``--precision int8``: int8 products on a CPU), the outputs read for their targets
    only (the engine's edges; a softmax head then writes no (B, T, V) log-probabilities)."""

    def __init__(self, int8: bool = False):
        self.int8 = int8

    def low_precision(self, dev: str) -> Optional[torch.dtype]:
        """The products' dtype on device type ``dev``: autocast's, torch.qint8 under int8 on a CPU,
        else None (the weights')."""
        low = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        if dev == "cpu" and self.int8:
            low = torch.qint8
        return low

    def body_step(self, body, ids: Tensor, embedding: Tensor,
                  state: Dict[str, Tensor]) -> Optional[Tuple[Tensor, Dict[str, Tensor]]]:
        """A body's one-token step ((B, 1) ids at inference), or None where the engine has none
        for this body (then the body's forward)."""
        dev = ids.device.type
        low = self.low_precision(dev)
        if not body.lstm_step or not (low is None or dev == "cpu"):
            return None
        with torch.autocast(dev, enabled=False):
            return step_ids(body, ids, embedding, state, low)

    def head(self, head, hidden: Tensor, emb: Optional[Tensor], ident: Optional[Tensor],
             state: Dict[str, Tensor], normalize: bool) -> Tuple[HeadOutput, Dict[str, Tensor]]:
        """A head's output read for its targets only: a softmax head's through the kernels
        (softmax_output), another head's forward with its unnormalised target rows
        (OutputRows) scored by rows_scorer."""
        if head.softmax_output is not None:
            return softmax_output(head, hidden, normalize, self.int8), {}
        out, new = head(hidden, emb, ident, state, normalize=normalize)
        if isinstance(out.vocab_score, OutputRows):
            out.vocab_score = rows_scorer(out.vocab_score)
        return out, new


def step_ids(body: LSTMBody, ids: Tensor, embedding: Tensor, state: Dict[str, Tensor],
             low: Optional[torch.dtype] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
    """``forward(embedding[ids])`` for one token per row ((B, 1) int64 ids; inference: no
    dropout, no autograd) with layer 0's input projection read from a (V, 4H) table
    ``embedding @ W_ih0^T + b_ih0 + b_hh0`` instead of computed: a quarter of the body's
    multiply-adds per row (the rescoring engine's one-token rows).

    ``low`` (torch.bfloat16: ``--precision bf16``): the matrix products in that dtype with
    float32 accumulation (AMX / AVX-512 BF16 on a CPU that has them), the gates, the cell
    and the returned states in float32 (the engine pads the rows of such calls to a few
    counts: rescore.engine.forward.padded_rows). torch.qint8 (``--precision int8``): int8
    products, the rest in float32 likewise: where the kernels of rescore.engine.kernels.native run
    (one torch thread), each layer is one fused kernel with the states quantised on a fixed
    scale (``_step_int8``); else PyTorch's dynamic int8 products (rescore.engine.kernels.quant)."""
    H = body.hidden
    fused_int8 = (low is torch.qint8 and native.int8_layers_usable(H)
                  and native.usable(embedding, state["h"], state["c"]))
    table, upper = step_weights(body, embedding, low, fused_int8)
    x = None
    # the new state, written in place layer by layer: (B, layers, H) each
    hs, cs = table.new_empty(ids.shape[0], body.layers, H), table.new_empty(ids.shape[0], body.layers, H)
    if fused_int8:
        return _step_int8(body, ids, table, upper, state, hs, cs)
    if native.usable(table, state["h"], state["c"]):
        return _step_native(body, ids, table, upper, state, low, hs, cs)
    for k in range(body.layers):
        h = state["h"][:, k]
        if k == 0:
            w_hh = upper[0]
            g = table[ids[:, 0]]  # (B, 4H) float32, a copy: safe to add into
            if low is None:
                g = g.addmm_(h.to(g.dtype), w_hh.t())
            elif low is torch.qint8:
                g += w_hh(h)
            else:
                g += torch.mm(h.to(low), w_hh.t()).float()
        else:  # one product [x, h] @ [W_ih; W_hh]^T instead of two (K = 2H, not H)
            w, b = upper[k]
            xh = torch.cat([x, h.to(x.dtype)], 1)
            if low is None:
                g = torch.addmm(b, xh, w.t())
            elif low is torch.qint8:
                g = w(xh)  # the bias is packed with the weight
            else:
                g = torch.mm(xh.to(low), w.t()).float().add_(b)
        # every gate by one sigmoid: the weights hold the cell input u's rows doubled
        # (_step_weights), and tanh(a) = 2 sigmoid(2a) - 1, since PyTorch's CPU tanh costs
        # about 3.5x its sigmoid per element (PyTorch's gate order i, f, u, o)
        i, f, s, o = g.sigmoid_().chunk(4, 1)
        c = torch.mul(f, state["c"][:, k].to(g.dtype), out=cs[:, k])
        c.addcmul_(i, s, value=2.0).sub_(i)  # f c + i tanh(u) (B, H)
        x = torch.mul(c, 2.0, out=hs[:, k]).sigmoid_().mul_(2.0).sub_(1.0).mul_(o)  # o tanh(c) (B, H)
    return x.unsqueeze(1), {"h": hs, "c": cs}

def _step_native(body: LSTMBody, ids: Tensor, table: Tensor, upper: list, state: Dict[str, Tensor],
                 low: Optional[torch.dtype], hs: Tensor, cs: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
    """step_ids with each layer's cell one fused kernel (rescore.engine.kernels.native): the same
    products, then the table row, the gates and the cell in one pass; an upper layer's
    input [x, h] is written in place (the lower cell writes x into it) instead of
    concatenated."""
    B, H = ids.shape[0], body.hidden
    xh = table.new_empty(B, 2 * H) if body.layers > 1 else None
    for k in range(body.layers):
        h = state["h"][:, k]
        if k == 0:
            w_hh = upper[0]
            if low is None:
                pre = torch.mm(h, w_hh.t())
            elif low is torch.qint8:
                pre = w_hh(h)
            else:
                pre = torch.mm(h.to(low), w_hh.t()).float()
            tab, rows = table, ids[:, 0]
        else:
            w, b = upper[k]
            xh[:, H:].copy_(h)
            if low is None:
                pre = torch.addmm(b, xh, w.t())
            elif low is torch.qint8:
                pre = w(xh)
            else:
                pre = torch.mm(xh.to(low), w.t()).float().add_(b)
            tab = rows = None
        native.lstm_cell(pre.contiguous(), state["c"][:, k], cs[:, k], hs[:, k], table=tab, ids=rows,
                         h_copy=xh[:, :H] if k + 1 < body.layers else None)
    return hs[:, -1].unsqueeze(1), {"h": hs, "c": cs}

def _step_int8(body: LSTMBody, ids: Tensor, table: Tensor, layers: list, state: Dict[str, Tensor],
               hs: Tensor, cs: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
    """step_ids with int8 products, each layer one kernel (rescore.engine.kernels.native.lstm_int8):
    the states quantised with a fixed scale, the product and the cell in one pass, the
    (B, 4H) pre-activations never written; a layer writes its h, quantised, straight into
    the next layer's input rows."""
    B, H = ids.shape[0], body.hidden
    xq = [torch.empty(B, H if k == 0 else 2 * H, dtype=torch.uint8) for k in range(body.layers)]
    for k in range(body.layers):  # the recurrent inputs: the previous h of each layer
        native.quantize_rows(state["h"][:, k], xq[k] if k == 0 else xq[k][:, H:])
    for k in range(body.layers):
        native.lstm_int8(xq[k], layers[k], state["c"][:, k], cs[:, k], hs[:, k],
                         table=table if k == 0 else None, ids=ids[:, 0] if k == 0 else None,
                         q_out=xq[k + 1][:, :H] if k + 1 < body.layers else None)
    return hs[:, -1].unsqueeze(1), {"h": hs, "c": cs}

def step_weights(body: LSTMBody, embedding: Tensor, low: Optional[torch.dtype] = None, fused_int8: bool = False):
    """Cached while the weights stay: the (V, 4H) layer-0 input projection of every word,
    W_hh0 and, for each upper layer, ([W_ih, W_hh] (4H, 2H), b_ih + b_hh), in the weights'
    dtype; with ``low`` the matrices in ``low`` (torch.qint8: packed int8 products of
    rescore.engine.kernels.quant, with the upper layers' biases in them), the rest in float32."""
    rnn = body.rnn
    tensors = [embedding] + [getattr(rnn, f"{n}_l{k}") for k in range(body.layers)
                             for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    key = (low, fused_int8) + tuple((t.data_ptr(), t._version) for t in tensors)
    cache = body.__dict__.setdefault("_step_cache", {})
    if key not in cache:
        if len(cache) > 1:  # one entry per precision in use; new weights replace them
            cache.clear()
        dt = torch.float32 if low is not None else embedding.dtype  # the table, gates, cell
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            u2 = _double_cell_input(body.hidden).to(dt)
            table = torch.addmm((rnn.bias_ih_l0 + rnn.bias_hh_l0).to(dt), embedding.to(dt),
                                rnn.weight_ih_l0.to(dt).t()) * u2
            w_hh0 = rnn.weight_hh_l0.to(dt) * u2[:, None]  # (4H, H)
            ws = [(torch.cat([getattr(rnn, f"weight_ih_l{k}"), getattr(rnn, f"weight_hh_l{k}")],
                             1).to(dt) * u2[:, None],  # (4H, 2H)
                   (getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}")).to(dt) * u2)
                  for k in range(1, body.layers)]
            if fused_int8:  # rescore.engine.kernels.native.lstm_int8's packed layers
                upper = [native.Int8LSTMLayer(w_hh0)] + [native.Int8LSTMLayer(w, b) for w, b in ws]
            elif low is torch.qint8:
                upper = [Int8Linear(w_hh0)] + [(Int8Linear(w, b), b) for w, b in ws]
            else:
                upper = [w_hh0.to(low or dt)] + [(w.to(low or dt).contiguous(), b) for w, b in ws]
        cache[key] = (table, upper)
    return cache[key]




class LSTMLevels:
    """An LSTM's one-token steps over trie levels: ``start(h, c)`` takes the roots' states
    ((B, layers, H) each), then each level is ``begin(n)``, ``step`` on its chunks of rows
    (row b consumes ``ids[b]`` from row ``parents[b]`` of the level before), ``end()``.

    The same arithmetic as ``LSTMBody.step_ids`` on the parents' states, without a state object
    per call. With the fused int8 kernels (``_step_int8``'s) each level also keeps its h
    quantised, as the kernels write it, so that the next level reads its parents' quantised
    states rather than quantising them again."""

    def __init__(self, body: LSTMBody, embedding: Tensor, low: Optional[torch.dtype]):
        self.body, self.embedding, self.low = body, embedding, low
        self.fused_int8 = (low is torch.qint8 and native.int8_layers_usable(body.hidden)
                           and native.usable(embedding))
        self.table, self.layers = step_weights(body, embedding, low, self.fused_int8)

    def start(self, h: Tensor, c: Tensor) -> None:
        self.h, self.c = h.float().contiguous(), c.float().contiguous()
        self.q = None  # (with the fused int8 kernels: the start states quantised at the first step)

    def begin(self, n: int) -> None:
        L, H = self.body.layers, self.body.hidden
        self.new_h, self.new_c = self.h.new_empty(n, L, H), self.c.new_empty(n, L, H)
        self.new_q = torch.empty(n, L, H, dtype=torch.uint8) if self.fused_int8 else None

    def step(self, start: int, stop: int, ids: Tensor, parents: Tensor) -> Tensor:
        """Rows start..stop-1 of the level: ids, parents (stop - start,) int64. Returns their
        top layer's h (stop - start, 1, H)."""
        hs, cs = self.new_h[start:stop], self.new_c[start:stop]
        c_prev = self.c.index_select(0, parents)
        if not self.fused_int8:
            state = {"h": self.h.index_select(0, parents), "c": c_prev}
            hidden, new = step_ids(self.body, ids.view(-1, 1), self.embedding, state, self.low)
            hs.copy_(new["h"])
            cs.copy_(new["c"])
            return hidden
        L = self.body.layers
        if self.q is None:  # the start states (whole runs quantise their own)
            B, H = self.h.shape[0], self.body.hidden
            self.q = torch.empty(B, L, H, dtype=torch.uint8)
            native.quantize_rows(self.h.view(B * L, H), self.q.view(B * L, H))
        q_prev, qs = self.q.index_select(0, parents), self.new_q[start:stop]
        x = q_prev[:, 0]
        for k in range(L):
            if k:  # [this level's h of layer k - 1, the parents' h of layer k], quantised
                x = torch.cat([qs[:, k - 1], q_prev[:, k]], 1)
            native.lstm_int8(x, self.layers[k], c_prev[:, k], cs[:, k], hs[:, k],
                             table=self.table if k == 0 else None, ids=ids if k == 0 else None,
                             q_out=qs[:, k])
        return hs[:, -1].unsqueeze(1)

    def end(self) -> None:
        self.h, self.c, self.q = self.new_h, self.new_c, self.new_q

    def whole(self, level_start: Tensor, parent: Tensor, token: Tensor, rows: Tensor,
              edges: Tuple[Tensor, Tensor, Tensor], n_slots: int, output, ends: Optional[Tensor]):
        """Every level of tries in one call (native.levels_int8), from rows ``rows`` of the
        start states, with the fused int8 kernels; None without them. ``output``: the head's
        (weight, bias, int8 log-normaliser or None). Returns (edge log P (n_slots,), the
        states {"h", "c"} of the ``ends`` nodes or None)."""
        if not self.fused_int8:
            return None
        w, b, logz = output
        lp, h, c = native.levels_int8(level_start, parent, token, self.layers, self.table,
                                      self.h.index_select(0, rows), self.c.index_select(0, rows), edges,
                                      n_slots, w.detach().float().contiguous(),
                                      None if b is None else b.detach().float().contiguous(), logz, ends)
        return lp, None if ends is None else {"h": h, "c": c}

    def states(self, rows: Tensor) -> Dict[str, Tensor]:
        """The body states of the last level's ``rows``."""
        return {"h": self.h.index_select(0, rows), "c": self.c.index_select(0, rows)}


def _double_cell_input(hidden: int) -> Tensor:
    """(4H,) float32 factors of the LSTM gate rows, PyTorch's order i, f, u, o: 2 for the cell
    input u, 1 elsewhere. Doubling is exact in floating point, so the step's products give 2a
    for u exactly, and one sigmoid over every gate gives sigmoid(2a) for tanh(a) = 2 sigmoid(2a) - 1."""
    u2 = torch.ones(4 * hidden)
    u2[2 * hidden:3 * hidden] = 2.0
    return u2


def rows_scorer(rows: OutputRows):
    """``rows`` (an unnormalised output layer's target rows, rescore.models.heads.OutputRows) by
    native.rows_dot where it runs: no (E, H) copies of the rows and hidden states."""
    decoder, hidden, offset = rows.decoder, rows.hidden, rows.offset

    def score(b: Tensor, t: Tensor, ids: Tensor) -> Tensor:
        if (native.usable(hidden, decoder.weight) and hidden.dim() == 3 and hidden.stride(-1) == 1
                and (decoder.bias is None or decoder.bias.dtype == torch.float32)):
            s = native.rows_dot(hidden, b, t, decoder.weight, decoder.bias, ids)  # no (E, H) copies
            return s if offset is None else s + offset[b, t].float()
        return rows(b, t, ids)

    return score


def softmax_output(head: SoftmaxHead, hidden: Tensor, normalize: bool, int8: bool) -> HeadOutput:
    """SoftmaxHead's output at inference, read for its targets only (the engine's edges): as
    ``head.forward``, with each row's log Z by one kernel where one runs (int8: the fused int8
    output layer on one torch thread; else the float logits' logsumexp_rows) and no (B, T, V)
    log-probabilities written; ``int8``: the output layer's products in int8 on a CPU."""
    if head.softmax_output == "class":
        out, _ = head(hidden, None, None, {}, normalize=normalize)
        return out
    if not normalize:
        return HeadOutput(None, hidden=hidden, vocab_score=rows_scorer(OutputRows(head.decoder, hidden)))
    if (int8 and not head.training and native.int8_fused_usable()
            and native.usable(hidden, head.decoder.weight)):
        # each row's log Z by one fused int8 kernel (no (B, T, V) logits), the targets' logits
        # in float32
        log_z = native.logsumexp_int8(hidden, int8_output(head))
        score = rows_scorer(OutputRows(head.decoder, hidden))
        return HeadOutput(None, hidden=hidden, log_norm=log_z,
                          vocab_score=lambda b, t, ids: score(b, t, ids) - log_z[b, t])
    if int8 and hidden.device.type == "cpu" and not head.training:
        logits = quant.linear(head, "decoder", head.decoder.weight, head.decoder.bias)(hidden)
    else:
        logits = head.decoder(hidden)  # (B, T, V)
    if native.usable(logits) and logits.is_contiguous():
        # each row's log Z, not (B, T, V) log-probabilities
        log_z = native.logsumexp_rows(logits)  # (B, T)
        return HeadOutput(None, hidden=hidden, log_norm=log_z,
                          vocab_score=lambda b, t, ids: logits[b, t, ids] - log_z[b, t])
    log_vocab = F.log_softmax(logits, dim=-1)  # (B, T, V)
    return HeadOutput(log_vocab, hidden=hidden, log_norm=log_norm(logits, log_vocab))


def linear_output(head, normalize: bool, int8: bool):
    """(weight (V, H), bias (V,) or None, the int8 log-normaliser layer or None) of a softmax
    head, where a target's log P is ``h . weight[target] + bias[target]`` less, with the layer,
    the row's ``native.logsumexp_int8``: unnormalised output, or exact under int8 with the fused
    kernels (as ``softmax_output``); else None (another head, a class-factored output; exact in
    float)."""
    if head.softmax_output != "softmax" or head.training:
        return None
    w, b = head.decoder.weight, head.decoder.bias
    if not normalize:
        return w, b, None
    if int8 and native.int8_fused_usable() and native.usable(w):
        return w, b, int8_output(head)
    return None


def int8_output(head: SoftmaxHead) -> native.Int8OutputLayer:
    """The head's output layer packed for native.logsumexp_int8, kept while the weights stay."""
    w, b = head.decoder.weight, head.decoder.bias
    return quant.kept(head, "decoder-fused", lambda: native.Int8OutputLayer(w, b),
                      *(t for t in (w, b) if t is not None))
