"""The report records' common base: typed fields, ``as_dict()`` their JSON form, and read like
that JSON (``record["wer"]``, ``record.get("buckets")``), so a record and the JSON file written
from it are used alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def plain(x: Any) -> Any:
    """x with every record in it (also inside lists and dicts) replaced by its as_dict()."""
    if isinstance(x, JsonRecord):
        return x.as_dict()
    if isinstance(x, list):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


class JsonRecord(Mapping):
    """Base of the report dataclasses. as_dict: the fields in their order (nested records as
    dicts); a subclass whose JSON differs (optional or merged keys) overrides it."""

    def as_dict(self) -> dict:
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self):
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())
