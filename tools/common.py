"""What the tools share: the checkout's root and the shared data beside it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout's root
# the data sets the benchmarks and experiments read (not part of the repository), beside the checkout
SHARED_DATA = REPO.parent / "shared" / "data"
