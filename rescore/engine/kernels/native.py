"""Fused CPU kernels for scoring, where the install compiled them: the LSTM cell, the target
rows of an unnormalised output layer, and the row-wise log-normaliser of an exact one.

``rescore.engine.kernels._kernels`` (this folder's C files, one per kernel, built by ``pip
install``; optional: without a C compiler the install goes on without it) runs an LSTM cell
step in one pass, with a vectorised exp (AVX2 where the CPU has it). PyTorch runs the same cell
as about ten separate kernels, each a pass over memory; on the scoring engine's one-token rows
the fused cell takes about a sixth off the engine's time (docs/benchmarks.md). ``rows_dot``
scores an output layer's target rows without PyTorch's gathered (E, H) copies of them and of
the hidden states; ``logsumexp_rows`` gives the engine each row's log Z without writing (rows,
V) log-probabilities (rescore.engine.lstm_steps.softmax_output).

With ``--precision int8`` and one torch thread two more kernels replace PyTorch's dynamic int8
products (rescore.engine.kernels.quant) where they apply: ``lstm_int8`` runs a whole LSTM layer step
(the states quantised on a fixed scale, as an LSTM's h lies in [-1, 1]; the product in integer
sums and the cell on each tile of it while it is in registers) and ``logsumexp_int8`` a softmax
output layer's log Z per row (each row quantised on its own scale; the (rows, V) logits never
written). Both are about 1.5x PyTorch's int8 products with the separate passes around them on
the engine's rows, and a row's result no longer depends on the other rows of its call.

Used at inference on CPU float32 tensors only (training keeps PyTorch's autograd); the results
equal PyTorch's to a few units in the last place. ``RESCORE_NATIVE=0`` in the environment turns
them off (the PyTorch path, for comparison).
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

import torch
from torch import Tensor

try:
    from rescore.engine.kernels import _kernels
except ImportError:  # not compiled at install: the PyTorch path
    _kernels = None
if _kernels is not None and not hasattr(_kernels, "levels_fields"):
    raise ImportError("rescore.engine.kernels._kernels was built from older sources: rebuild it "
                      "(pip install ., or python setup.py build_ext --inplace)")


def available() -> bool:
    """Whether the kernels are compiled here and not turned off by ``RESCORE_NATIVE=0``
    (``RESCORE_NATIVE=generic``, read at import, keeps the generic code on a CPU with AVX2)."""
    return _kernels is not None and os.environ.get("RESCORE_NATIVE", "1") != "0"


def variant() -> str:
    """'avx2', 'generic' (compiled, no AVX2 path on this CPU), 'off' or 'absent'."""
    if _kernels is None:
        return "absent"
    return _kernels.variant() if available() else "off"


def describe() -> str:
    """One line for the scoring log: which code runs the cell here."""
    return {"avx2": "fused CPU kernels: AVX2",
            "generic": "fused CPU kernels: generic (this CPU has no AVX2 and FMA)",
            "off": "fused CPU kernels: off (RESCORE_NATIVE=0)",
            "absent": "fused CPU kernels: not compiled at install (no C compiler?); the LSTM cell "
                      "runs as separate PyTorch kernels, up to a fifth slower"}[variant()]


def _rows_ok(t: Tensor, width: int) -> bool:
    """A CPU float32 (rows, width) tensor whose rows are contiguous."""
    return (t.device.type == "cpu" and t.dtype == torch.float32 and t.dim() == 2
            and t.shape[1] == width and (t.stride(1) == 1 or width == 1))


def _table_rows(kernel: str, table: Optional[Tensor], ids: Optional[Tensor], B: int, width: int):
    """(table address, ids address, ids kept alive) for a kernel that adds row ids[b] of a
    (V, width) table to row b; (0, 0, None) without a table. Checked: a contiguous float32 CPU
    table, B int64 ids within its rows."""
    if table is None:
        return 0, 0, None
    if not (table.is_contiguous() and _rows_ok(table, width)):
        raise ValueError(f"{kernel}: table must be a contiguous (V, {width}) float32 CPU tensor")
    if ids is None or ids.dtype != torch.int64 or ids.numel() != B:
        raise ValueError(f"{kernel}: ids must be {B} int64 rows of the table")
    ids = ids.reshape(B).contiguous()
    if B and (int(ids.min()) < 0 or int(ids.max()) >= table.shape[0]):
        raise IndexError(f"{kernel}: ids outside the table's {table.shape[0]} rows")
    return table.data_ptr(), ids.data_ptr(), ids


def usable(*tensors: Tensor) -> bool:
    """The kernels run for these tensors: available, CPU float32, no autograd."""
    return (available() and not torch.is_grad_enabled()
            and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors))


def lstm_cell(pre: Tensor, c_prev: Tensor, c_out: Tensor, h_out: Tensor,
              table: Optional[Tensor] = None, ids: Optional[Tensor] = None,
              h_copy: Optional[Tensor] = None) -> None:
    """One LSTM cell step, in place: ``c_out = f c_prev + i tanh(a)``, ``h_out = o tanh(c_out)``
    (and ``h_copy`` = ``h_out`` where given), from the (B, 4H) pre-activations ``pre`` (gate
    order i, f, u, o, the cell input's rows doubled: u = 2a, as rescore.engine.lstm_steps.step_weights makes
    them) plus, with ``table``, row ``ids[b]`` of the (V, 4H) ``table``. c_prev, c_out, h_out,
    h_copy: (B, H) float32 with contiguous rows (any row stride)."""
    B, H4 = pre.shape
    H = H4 // 4
    if not pre.is_contiguous() or not _rows_ok(pre, H4) or H4 != 4 * H:
        raise ValueError(f"lstm_cell: pre must be a contiguous (B, 4H) float32 CPU tensor, got {tuple(pre.shape)}")
    for name, t in (("c_prev", c_prev), ("c_out", c_out), ("h_out", h_out)) + (
            (("h_copy", h_copy),) if h_copy is not None else ()):
        if not _rows_ok(t, H) or t.shape[0] != B:
            raise ValueError(f"lstm_cell: {name} must be ({B}, {H}) float32 on the CPU with contiguous rows, "
                             f"got {tuple(t.shape)} {t.dtype}")
    tab_ptr, ids_ptr, ids = _table_rows("lstm_cell", table, ids, B, H4)
    if B == 0:
        return
    h2_ptr, h2_stride = (0, 0) if h_copy is None else (h_copy.data_ptr(), h_copy.stride(0))
    _kernels.lstm_cell(pre.data_ptr(), tab_ptr, ids_ptr, B, H, c_prev.data_ptr(), c_prev.stride(0),
                       c_out.data_ptr(), c_out.stride(0), h_out.data_ptr(), h_out.stride(0),
                       h2_ptr, h2_stride)


def rows_dot(hidden: Tensor, b: Tensor, t: Tensor, weight: Tensor, bias: Optional[Tensor],
             ids: Tensor) -> Tensor:
    """``(hidden[b, t] * weight[ids]).sum(-1) + bias[ids]`` -> (E,) float32, without the (E, H)
    copies: hidden (B, T, H), weight (V, H), bias (V,) or None, all CPU float32 with
    contiguous last dimensions; b, t, ids (E,) int64."""
    B, T, H = hidden.shape
    V = weight.shape[0]
    if hidden.stride(2) != 1 or not _rows_ok(weight, H) or (bias is not None and (
            bias.dtype != torch.float32 or bias.shape != (V,) or not bias.is_contiguous())):
        raise ValueError("rows_dot: CPU float32 hidden (B, T, H), weight (V, H) and bias (V,) with contiguous rows")
    b, t, ids = (x.reshape(-1).to(torch.int64).contiguous() for x in (b, t, ids))
    E = ids.numel()
    out = torch.empty(E, dtype=torch.float32)
    if E == 0:
        return out
    for name, x, n in (("rows", b, B), ("positions", t, T), ("ids", ids, V)):
        if x.numel() != E or int(x.min()) < 0 or int(x.max()) >= n:
            raise IndexError(f"rows_dot: {name} outside 0..{n - 1} or not {E} of them")
    _kernels.rows_dot(hidden.data_ptr(), hidden.stride(0), hidden.stride(1), b.data_ptr(), t.data_ptr(),
                      weight.data_ptr(), weight.stride(0), 0 if bias is None else bias.data_ptr(),
                      ids.data_ptr(), E, H, out.data_ptr())
    return out


def logsumexp_rows(x: Tensor) -> Tensor:
    """``torch.logsumexp(x, -1)`` of a CPU float32 (..., V) tensor: a max pass and an exp pass
    per row, no (..., V) result written (as log_softmax writes)."""
    V = x.shape[-1]
    x2 = x.reshape(-1, V)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if not _rows_ok(x2, V) or V == 0:
        raise ValueError(f"logsumexp_rows: a float32 CPU tensor with rows of V > 0, got {x.dtype} {tuple(x.shape)}")
    out = torch.empty(x2.shape[0], dtype=torch.float32)
    if x2.shape[0]:
        _kernels.row_logsumexp(x2.data_ptr(), x2.shape[0], V, x2.stride(0), out.data_ptr())
    return out.view(x.shape[:-1])


# int8 LSTM layers (--precision int8): states quantised with a fixed scale, q = round(63 x) +
# 64 (an LSTM's h lies in [-1, 1]; 7 bits), weights per gate row on 63 levels a side (kernels.h
# says why).
Q_ZERO, Q_SCALE = 64, 63.0
W_MAX = 63


def int8_fused_usable() -> bool:
    """The int8 kernels (an LSTM layer's step, an output layer's log-normaliser) run here:
    compiled and on, and one torch thread (they run on one; with more, PyTorch's threaded int8
    products are used)."""
    return available() and torch.get_num_threads() == 1


def int8_layers_usable(hidden: int) -> bool:
    """``lstm_int8`` runs here for this width: int8_fused_usable, whole blocks of 8 units."""
    return int8_fused_usable() and hidden % 8 == 0 and hidden >= 8


def _int8_rows(weight: Tensor) -> Tuple[Tensor, Tensor, int]:
    """(q, scale, K) of a (N, K) float weight: q (N, K rounded up to 4) int8, each row on its
    own scale max |w_n| / W_MAX (scale (N,); 63 levels a side, kernels.h says why), the padded
    inputs' weights 0."""
    w = weight.detach().float()
    N, K = w.shape
    scale = (w.abs().amax(dim=1) / W_MAX).clamp_min(1e-12)
    q = torch.round(w / scale[:, None]).clamp_(-W_MAX, W_MAX).to(torch.int8)
    return torch.cat([q, q.new_zeros(N, -K % 4)], 1), scale, K


def _zero_sums(q: Tensor) -> Tensor:
    """(N,) int32: 64 times each row's sum, what the inputs' zero point adds to its sums."""
    return (Q_ZERO * q.to(torch.int32).sum(1)).to(torch.int32).contiguous()


def pack_int8_blocks(q: Tensor) -> Tensor:
    """The int8 weight layout of kernels.h (tile_generic, tile_avx2), the one place Python writes
    it: ``q`` (N, Kp) int8, one row per output column in the kernels' order, N a multiple of 32
    and Kp of 4, becomes (N / 32, Kp / 4, 32, 4) contiguous: block jb, group kq holds its 32
    columns x 4 inputs, byte ``jb * Kp * 32 + kq * 128 + n * 4 + k`` = q[32 jb + n, 4 kq + k]."""
    N, Kp = q.shape
    if N % 32 or Kp % 4:
        raise ValueError(f"pack_int8_blocks: (N, Kp) with N a multiple of 32 and Kp of 4, got {(N, Kp)}")
    return q.view(N // 32, 32, Kp // 4, 4).permute(0, 2, 1, 3).contiguous()


class Int8LSTMLayer:
    """One LSTM layer's products ``x @ weight.T + bias`` in int8 for ``lstm_int8``: ``weight``
    (4H, K) float (gate order i, f, u, o), quantised per row (scale max |w_n| / 63), packed
    in blocks of 8 units; ``bias`` (4H,) float32 or None."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor] = None):
        H4 = weight.shape[0]
        H = H4 // 4
        if H4 != 4 * H or H % 8:
            raise ValueError(f"Int8LSTMLayer: weight (4H, K) with H a multiple of 8, got {tuple(weight.shape)}")
        q, scale, K = _int8_rows(weight)  # (inputs padded to groups of 4)
        self.hidden, self.in_features, self.groups = H, K, q.shape[1] // 4
        # columns in block order: block jb's 32 columns are the 4 gates' units jb*8 .. jb*8+7
        self.packed = pack_int8_blocks(q.view(4, H // 8, 8, -1).transpose(0, 1).reshape(H4, -1))
        self.cs64 = _zero_sums(q)
        self.mul = (scale / Q_SCALE).float().contiguous()
        self.bias = (torch.zeros(H4) if bias is None else bias.detach().float()).contiguous()
        self.weight_q = q[:, :K]  # (for reference computations)
        self.scale = scale


def quantize_rows(src: Tensor, dst: Tensor) -> None:
    """``dst = round(63 src) + 64`` clamped to [1, 127]: src (B, W) float32, dst (B, W) uint8,
    both CPU with contiguous rows."""
    B, W = src.shape
    if (not _rows_ok(src, W) or dst.dtype != torch.uint8 or dst.dim() != 2 or tuple(dst.shape) != (B, W)
            or (dst.stride(1) != 1 and W > 1) or dst.device.type != "cpu"):
        raise ValueError(f"quantize_rows: float32 (B, W) and uint8 (B, W) CPU rows, got {tuple(src.shape)} "
                         f"{src.dtype} and {tuple(dst.shape)} {dst.dtype}")
    if B and W:
        _kernels.quantize_rows(src.data_ptr(), src.stride(0), B, W, dst.data_ptr(), dst.stride(0))


def lstm_int8(x_q: Tensor, layer: Int8LSTMLayer, c_prev: Tensor, c_out: Tensor, h_out: Tensor,
              table: Optional[Tensor] = None, ids: Optional[Tensor] = None,
              q_out: Optional[Tensor] = None) -> None:
    """One LSTM layer step with int8 products, in place: the pre-activations
    ``layer(x)`` (x = (x_q - 64) / 63, (B, K) uint8 from quantize_rows, row-contiguous), plus
    row ``ids[b]`` of the (V, 4H) ``table`` where given, then the cell as ``lstm_cell``:
    c_out, h_out (B, H) float32; ``q_out`` (B, H) uint8, where given, receives h_out quantised
    (the next layer's input)."""
    B, K = x_q.shape
    H = layer.hidden
    if (x_q.dtype != torch.uint8 or x_q.device.type != "cpu" or K != layer.in_features
            or (x_q.stride(1) != 1 and K > 1)):
        raise ValueError(f"lstm_int8: x_q must be ({B}, {layer.in_features}) uint8 CPU rows, got "
                         f"{tuple(x_q.shape)} {x_q.dtype}")
    if K % 4:  # the kernel reads inputs in groups of 4
        x_q = torch.cat([x_q, x_q.new_full((B, 4 - K % 4), Q_ZERO)], 1)
    for name, t in (("c_prev", c_prev), ("c_out", c_out), ("h_out", h_out)):
        if not _rows_ok(t, H) or t.shape[0] != B:
            raise ValueError(f"lstm_int8: {name} must be ({B}, {H}) float32 on the CPU with contiguous rows, "
                             f"got {tuple(t.shape)} {t.dtype}")
    q_ptr, q_stride = 0, 0
    if q_out is not None:
        if q_out.dtype != torch.uint8 or tuple(q_out.shape) != (B, H) or (q_out.stride(1) != 1 and H > 1):
            raise ValueError(f"lstm_int8: q_out must be ({B}, {H}) uint8 CPU rows")
        q_ptr, q_stride = q_out.data_ptr(), q_out.stride(0)
    tab_ptr, ids_ptr, ids = _table_rows("lstm_int8", table, ids, B, 4 * H)
    if B == 0:
        return
    _kernels.lstm_int8(x_q.data_ptr(), x_q.stride(0), B, layer.groups, H, layer.packed.data_ptr(),
                       layer.cs64.data_ptr(), layer.mul.data_ptr(), layer.bias.data_ptr(), tab_ptr, ids_ptr,
                       c_prev.data_ptr(), c_prev.stride(0), 0, c_out.data_ptr(), c_out.stride(0),
                       h_out.data_ptr(), h_out.stride(0), q_ptr, q_stride)


def level_fields(values: dict) -> Tensor:
    """levels_int8's fields as the kernels take them: ``values`` (name -> int64) in the order of
    the one list of them, levels.c's LV_FIELD_LIST (``_kernels.levels_fields()``). A name on
    one side only (this module and the compiled kernels out of step) is an error, not a guess."""
    names = _kernels.levels_fields()
    if set(names) != set(values):
        raise RuntimeError("levels_int8: the compiled kernels' fields (levels.c) and this module's differ: "
                           f"kernels only {sorted(set(names) - set(values))}, "
                           f"Python only {sorted(set(values) - set(names))}; rebuild the kernels")
    return torch.tensor([values[k] for k in names], dtype=torch.int64)


def levels_int8(level_start: Tensor, parent: Tensor, token: Tensor, layers: List[Int8LSTMLayer], table: Tensor,
                start_h: Tensor, start_c: Tensor, edges: Tuple[Tensor, Tensor, Tensor], n_slots: int,
                w_out: Tensor, b_out: Optional[Tensor], logz: Optional["Int8OutputLayer"] = None,
                ends: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """The levels of prefix tries through int8 LSTM layers in one call (the engine's level
    schedule, rescore.engine.levels): nodes numbered level by level (level d: level_start[d] ..
    level_start[d + 1] - 1; level 0 the roots), each consuming ``token[n]`` from its parent's
    state (``parent[n]``, in the level before; root r from row r of start_h, start_c, (P, L, H)),
    through every layer as ``lstm_int8`` (``table``: layer 0's (V, 4H) input products); then
    edge e (``edges`` = (node, target, slot), int64, sorted by node) gets
    ``h_top(node) . w_out[target] + b_out[target]``, less the node's log Z by
    ``logsumexp_int8(h_top, logz)`` where ``logz`` is given, at ``lp[slot]``.

    Returns (lp (n_slots,) float32, and with ``ends`` (sorted node ids) the h and c (n, L, H) of
    those nodes, else None, None). Everything int64 / float32 on the CPU, contiguous."""
    D = level_start.shape[0] - 1
    L, H = len(layers), layers[0].hidden
    P = start_h.shape[0]
    N = token.shape[0]
    ints = [level_start, parent, token, *edges] + ([ends] if ends is not None else [])
    if (D < 1 or any(t.dtype != torch.int64 or not t.is_contiguous() or t.device.type != "cpu" for t in ints)
            or parent.shape[0] != N or int(level_start[0]) != 0 or int(level_start[-1]) != N
            or int(level_start[1]) != P or tuple(start_h.shape) != (P, L, H) or start_c.shape != start_h.shape
            or any(lay.hidden != H or lay.in_features != (H if k == 0 else 2 * H) for k, lay in enumerate(layers))
            or not (table.is_contiguous() and _rows_ok(table, 4 * H))
            or not (w_out.is_contiguous() and _rows_ok(w_out, H))
            or (b_out is not None and (b_out.dtype != torch.float32 or not b_out.is_contiguous()))
            or (logz is not None and logz.in_features != H)):
        raise ValueError("levels_int8: levels, nodes, layers, start states or output layer of the wrong "
                         f"shape or type (D {D}, N {N}, P {P}, L {L}, H {H})")
    e_node, e_target, e_slot = edges
    E, V = e_node.shape[0], table.shape[0]
    widths = level_start[1:] - level_start[:-1]
    level = torch.repeat_interleave(torch.arange(D), widths)  # each node's level
    n_ends = 0 if ends is None else ends.shape[0]
    # the kernel trusts its indexes: every one in range, parents in the level before, edges and
    # ends sorted by node
    if (widths.min() < 1 or token.min() < 0 or token.max() >= V or w_out.shape[0] != V
            or (N > P and not (level[parent[P:]] == level[P:] - 1).all())
            or (E and (e_node.min() < 0 or e_node.max() >= N or (e_node[1:] < e_node[:-1]).any()
                       or e_target.min() < 0 or e_target.max() >= V or e_slot.min() < 0 or e_slot.max() >= n_slots))
            or (n_ends and (ends.min() < 0 or ends.max() >= N or (ends[1:] <= ends[:-1]).any()))):
        raise ValueError("levels_int8: an index out of range or out of order")
    R = int(widths.max())  # the widest level (level 0: P)
    h, c = [torch.empty(R, L, H), torch.empty(R, L, H)], [torch.empty(R, L, H), torch.empty(R, L, H)]
    q = [torch.empty(R, L, H, dtype=torch.uint8), torch.empty(R, L, H, dtype=torch.uint8)]
    h[0][:P], c[0][:P] = start_h, start_c
    quantize_rows(h[0][:P].view(P * L, H), q[0][:P].view(P * L, H))
    x, rows = torch.empty(R, 2 * H, dtype=torch.uint8), torch.empty(R, dtype=torch.int64)
    lay = torch.tensor([[t.data_ptr() for t in (k.packed, k.cs64, k.mul, k.bias)] for k in layers], dtype=torch.int64)
    lz = lz_q = lz_s = lz_out = None
    if logz is not None:
        lz = torch.tensor([logz.packed.data_ptr(), logz.cs64.data_ptr(), logz.mul.data_ptr(), logz.bias.data_ptr(),
                           logz.groups, logz.blocks], dtype=torch.int64)
        lz_q, lz_s, lz_out = (torch.empty(R, 4 * logz.groups, dtype=torch.uint8), torch.empty(R), torch.empty(R))
    lp = torch.zeros(n_slots)
    end_h = torch.empty(n_ends, L, H) if ends is not None else None
    end_c = torch.empty(n_ends, L, H) if ends is not None else None
    ptr = lambda t: 0 if t is None else t.data_ptr()  # noqa: E731
    values = dict(levels=D, level_start=ptr(level_start), parent=ptr(parent), token=ptr(token), L=L, H=H,
                  layers=ptr(lay), table=ptr(table), h0=ptr(h[0]), c0=ptr(c[0]), q0=ptr(q[0]), h1=ptr(h[1]),
                  c1=ptr(c[1]), q1=ptr(q[1]), x=ptr(x), rows=ptr(rows), edges=E, e_node=ptr(e_node),
                  e_target=ptr(e_target), e_slot=ptr(e_slot), w_out=ptr(w_out), b_out=ptr(b_out), logz=ptr(lz),
                  logz_q=ptr(lz_q), logz_qscale=ptr(lz_s), logz_out=ptr(lz_out), lp=ptr(lp), ends=n_ends,
                  end_nodes=ptr(ends), end_h=ptr(end_h), end_c=ptr(end_c))
    fields = level_fields(values)
    _kernels.levels_int8(fields.data_ptr(), len(fields))  # the count, checked against the kernels'
    return lp, end_h, end_c


class Int8OutputLayer:
    """An output layer ``x @ weight.T + bias`` ((V, K) float weight, (V,) bias or None) in int8
    for ``logsumexp_int8``: each row quantised (scale max |w_n| / 63), packed as
    Int8LSTMLayer's, V padded to blocks of 32 rows with weight 0 and bias -inf."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor] = None):
        q, scale, K = _int8_rows(weight)
        V, Kp = q.shape
        Vp = -(-V // 32) * 32
        q = torch.cat([q, q.new_zeros(Vp - V, Kp)])
        self.in_features, self.groups, self.blocks = K, Kp // 4, Vp // 32
        self.packed = pack_int8_blocks(q)
        self.cs64 = _zero_sums(q)
        self.mul = torch.cat([scale, torch.ones(Vp - V)]).float().contiguous()
        b = torch.zeros(V) if bias is None else bias.detach().float()
        self.bias = torch.cat([b, torch.full((Vp - V,), float("-inf"))]).contiguous()
        self.weight_q, self.scale = q[:V, :K], scale


def logsumexp_int8(x: Tensor, layer: Int8OutputLayer) -> Tensor:
    """Each row's ``logsumexp(x @ weight.T + bias)`` with the products in int8 (each row of x
    quantised on its own scale max |x| / 63): x (..., K) CPU float32 with contiguous rows ->
    (...,) float32. The (rows, V) logits are never formed."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1 and K > 1:
        x2 = x2.contiguous()
    if not _rows_ok(x2, K) or K != layer.in_features:
        raise ValueError(f"logsumexp_int8: float32 CPU rows of {layer.in_features}, got {x.dtype} {tuple(x.shape)}")
    B = x2.shape[0]
    out = torch.empty(B, dtype=torch.float32)
    if B:
        q, qscale = torch.empty(B, 4 * layer.groups, dtype=torch.uint8), torch.empty(B, dtype=torch.float32)
        _kernels.logsumexp_int8(x2.data_ptr(), x2.stride(0), B, K, layer.groups, layer.blocks,
                                layer.packed.data_ptr(), layer.cs64.data_ptr(), layer.mul.data_ptr(),
                                layer.bias.data_ptr(), q.data_ptr(), qscale.data_ptr(), out.data_ptr())
    return out.view(x.shape[:-1])
