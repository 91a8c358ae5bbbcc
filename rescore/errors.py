"""The one error type a user sees for bad input: it names the file, the line and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


class RescoreError(Exception):
    """Bad input or a failed check; commands turn it into a message and a non-zero exit.

    >>> str(RescoreError("float cost", path="nbest/acwt", line=3, got="abc"))
    "nbest/acwt:3: expected float cost, got 'abc'"
    """

    def __init__(
        self,
        expected: str,
        path: Optional[Union[str, Path]] = None,
        line: Optional[int] = None,
        got: Optional[str] = None,
    ):
        self.path = None if path is None else str(path)
        self.line = line
        self.expected = expected
        self.got = got
        where = self.path or "<input>"
        if line is not None:
            where += f":{line}"
        msg = f"{where}: expected {expected}"
        if got is not None:
            msg += f", got {got!r}"
        super().__init__(msg)


class OptionError(RescoreError):
    """A bad option value or combination (a usage error: exit status 2, not 1).

    >>> str(OptionError("a number in [0, 1]", option="--weight", got="-1"))
    "--weight: expected a number in [0, 1], got '-1'"
    """

    def __init__(self, expected: str, option: Optional[str] = None, got: Optional[str] = None):
        super().__init__(expected, path=option, got=got)
        self.option = option


def check(ok: bool, expected: str, option: str, got: object) -> None:
    """Raise an OptionError naming ``option`` unless ``ok``: the one validator of option values.

    >>> check(True, "an integer >= 1", "--nj", 4)
    >>> check(False, "an integer >= 1", "--nj", 0)
    Traceback (most recent call last):
    ...
    rescore.errors.OptionError: --nj: expected an integer >= 1, got '0'
    """
    if not ok:
        raise OptionError(expected, option=option, got=str(got))


DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def check_device(spec: str, option: str = "--device", allow_auto: bool = True) -> str:
    """The one parser of a device option, torch-free: ``auto`` (where allowed), ``cpu``, ``cuda``
    or ``cuda:N``; returns the spec unchanged. Whether CUDA is present is checked where the device
    is opened (``rescore.engine.score.resolve_device``), not here, so that ``--help`` and the option
    checks stay instant.

    >>> check_device("cuda:1")
    'cuda:1'
    >>> check_device("gpu")
    Traceback (most recent call last):
    ...
    rescore.errors.OptionError: --device: expected auto, cpu, cuda or cuda:N, got 'gpu'
    """
    ok = (spec in ("cpu", "cuda") or (allow_auto and spec == "auto")
          or (isinstance(spec, str) and spec.startswith("cuda:") and spec[5:].isdigit()))
    check(ok, DEVICE_CHOICES if allow_auto else "cpu, cuda or cuda:N", option, spec)
    return spec
