"""int8 matrix products for scoring on a CPU (``--precision int8``).

The one-token LSTM step (rescore.engine.lstm_steps.step_ids) and the softmax output layer
spend most of a scoring run in fp32 matrix products, which already run near a core's fp32 rate.
Dynamic int8 products (PyTorch's quantized ``linear_dynamic``: the weight quantised once per
output row, symmetric, the input quantised per call from its range, int32 accumulation, the
result in float32) run at about 1.7x that rate on an AVX2 core. The gates, the cell, the
normaliser and the costs stay in float32; the costs move a little (docs/benchmarks.md measures
by how much, and what it does to the WER), so int8 is a choice, never the default.

Inference only: the packed weights are a copy made on first use and kept while the weights stay
(their storage and version), so training never sees them.

Row counts are rounded up to four sizes per octave (``bucket_rows``). A scoring run meets
thousands of row counts, and each int8 product allocates its output and an int32 buffer of the
same (rows, N) size; with glibc keeping freed memory for reuse (rescore.engine.forward), those
interleaved sizes fragmented the heap on an AVX-512 core: exact scoring of the dev set peaked
at 1.3 to 1.9 GiB against 0.6 in fp32, with seconds of system time. With buckets it peaks with
fp32, and runs no slower (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Callable, Dict, Iterator, Optional, Tuple, TypeVar

import torch
from torch import Tensor

# The quantised engines of PyTorch's CPU build that run linear_dynamic, best first on an x86
# core: fbgemm and oneDNN ran the engine's products equally fast on AVX2, but oneDNN keeps a
# kernel per row count it meets (+290 MiB of peak memory scoring half the dev set, fbgemm +30).
ENGINES = ("fbgemm", "x86", "onednn")
T = TypeVar("T")


def engine() -> Optional[str]:
    """The quantised engine int8 products use here, or None where this torch has none."""
    if not hasattr(torch.ops.quantized, "linear_dynamic"):
        return None
    supported = torch.backends.quantized.supported_engines
    return next((e for e in ENGINES if e in supported), None)


@contextlib.contextmanager
def int8_products() -> Iterator[None]:
    """Within it, PyTorch's quantised engine is this module's choice (the int8 products of the
    engine's --precision int8 paths, rescore.engine.lstm_steps), restored after."""
    name = engine()
    if name is None:
        raise RuntimeError("this PyTorch build has no quantised CPU engine for int8 products")
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


class Int8Linear:
    """``x @ weight.T + bias`` with the weight in int8: (N, K) float weight, quantised per output
    row (scale max |w_row| / 127, zero point 0); bias (N,) float or None stays float32. The
    input is quantised to 7 bits (PyTorch's ``reduce_range``): AVX2's u8 x s8 multiply-add
    saturates 16-bit sums of two full-range products, which with 8 bits put errors of a whole
    unit into some outputs (measured: max error 1.04 against 0.06 on a 32-wide product)."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor] = None):
        w = weight.detach().float().contiguous()
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        zero = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # PyTorch flags its quantised tensors as deprecated
            warnings.simplefilter("ignore")
            qw = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(
                qw, None if bias is None else bias.detach().float().contiguous())
        self.out_features = w.shape[0]

    def __call__(self, x: Tensor) -> Tensor:
        """(..., K) float -> (..., N) float32."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).float()
        rows = x2.shape[0]
        padded = bucket_rows(rows)
        if padded != rows:  # zero rows: the input's range already holds 0, so no change
            x2 = torch.cat([x2, x2.new_zeros(padded - rows, shape[-1])])
        y = torch.ops.quantized.linear_dynamic(x2.contiguous(), self.packed,
                                               True)  # reduce_range: 7-bit input (class doc)
        return y[:rows].view(*shape[:-1], self.out_features)


def bucket_rows(n: int) -> int:
    """n rounded up to 4 sizes per octave (16, 20, 24, 28, 32, 40, ...; below 16 as it is): at
    most 25 % more rows."""
    if n < 16:
        return n
    step = 1 << (n.bit_length() - 3)
    return -(-n // step) * step


def cached(owner: torch.nn.Module, name: str, *tensors: Tensor) -> Tuple[Dict, tuple]:
    """(the owner's cache of packed weights, the key of ``tensors`` as they are now): entries
    made for other weights are stale, so the caller rebuilds when its key is missing."""
    cache = owner.__dict__.setdefault("_int8_cache", {})
    key = (name, torch.backends.quantized.engine) + tuple((t.data_ptr(), t._version) for t in tensors)
    return cache, key


def kept(owner: torch.nn.Module, name: str, build: Callable[[], T], *tensors: Tensor) -> T:
    """``build()``, made once and kept on ``owner`` under ``name`` while ``tensors`` stay the
    same tensors, unchanged (an entry made for others is dropped)."""
    cache, key = cached(owner, name, *tensors)
    if key not in cache:
        for k in [k for k in cache if k[0] == name]:
            del cache[k]
        cache[key] = build()
    return cache[key]


def linear(owner: torch.nn.Module, name: str, weight: Tensor, bias: Optional[Tensor] = None) -> Int8Linear:
    """The int8 form of ``weight`` (and ``bias``), packed once and kept on ``owner`` under
    ``name`` while they stay the same tensors, unchanged."""
    return kept(owner, name, lambda: Int8Linear(weight, bias), *(t for t in (weight, bias) if t is not None))
