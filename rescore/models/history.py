"""The sliding history window shared by every head that looks back at the last L tokens.

At position t of a chunk the history is the L tokens ending at t (inclusive): slot i (0 = oldest)
holds x_{t-L+1+i}. The first slots of the first positions come from the previous chunk (carried in
the state), so training on consecutive BPTT chunks and scoring token by token see the same
history.

    carried (L)        current chunk (T)
    [c0 c1 ... cL-1] [x0 x1 x2 ... xT-1]
     ^-------- window of x0 ------^
        ^-------- window of x1 ------^
"""

from __future__ import annotations

from typing import Tuple

from torch import Tensor
import torch


def slide(carried: Tensor, current: Tensor) -> Tuple[Tensor, Tensor]:
    """History windows of every position, and the L slots to carry on.

    carried: (B, L, *) the last L values before this chunk (EMPTY/zeros at the start).
    current: (B, T, *) the values of this chunk's positions.
    Returns (windows (B, T, L, *), new carried (B, L, *)); windows is a strided view (no copy).
    """
    L = carried.shape[1]
    T = current.shape[1]
    full = torch.cat([carried, current], dim=1)  # (B, L + T, *)
    # unfold puts the window dim last: (B, T + 1, *, L); window k ends at full[k + L - 1]
    windows = full.unfold(1, L, 1)[:, 1:]  # (B, T, *, L): window t ends at current[t]
    windows = windows.movedim(-1, 2)  # (B, T, L, *)
    return windows, full[:, T:]
