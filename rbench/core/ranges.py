"""The range of a numeric option, declared once, in the option's type.

A ranker's options are a dataclass (``rbench.core.config``); a number's range is written in its
annotation, beside its default and its comment, so a default, its help and its check are one
declaration::

    lr: Positive = 1e-4            # float > 0, finite
    epochs: AtLeast0 = 15          # int >= 0, at most INT_CAP
    beta1: Annotated[float, Range(0, 1, hi_open=True)] = 0.9

``build_config`` refuses a value outside its range when the option is parsed (``--set``), and
checks every numeric field again once the dataclass is built (a preset's values and Python
callers' values included), before anything loads: ``lr=nan`` used to crash after loading the
model, ``temperature=nan`` trained for six minutes before it was refused (issue 42).

Rules for every ``int``/``float`` field, declared or not (a third party's plugin too):
a float is finite (NaN and +-inf are never a setting); an int is an integer, not a bool. A
declared ``Range`` adds bounds. Every int range has an upper bound (``INT_CAP`` unless it says
less): an amount of work typed by a user (epochs, steps, windows, passes) must not be able to run
forever, and the message names the cap. ``tests/core/test_option_ranges.py`` feeds NaN, +-inf,
out-of-range values and wrong types to every numeric option of every built-in ranker, and fails
when a numeric option declares no range.
"""

from __future__ import annotations

import math
import numbers
import types
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

INT_CAP = 2**31 - 1  # the default ceiling of an int option: torch and numpy index with int32 in places
SEED_CAP = 2**32 - 1  # numpy/torch seeds keep 32 bits


@dataclass(frozen=True)
class Range:
    """``lo <= value <= hi`` (``lo_open``/``hi_open``: strict), None: unbounded on that side
    (an int is still capped by ``INT_CAP``)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    note: str = ""  # said after the range in a refusal (why the bound)

    def text(self, is_int: bool) -> str:
        """The range in words: ``>= 1 and <= 2,147,483,647``, ``in [0, 1)``, ``> 0``."""
        hi = self.upper(is_int)

        def fmt(v: float) -> str:
            return _number_text(v, is_int)

        if self.lo is not None and hi is not None:
            return f"in {'(' if self.lo_open else '['}{fmt(self.lo)}, {fmt(hi)}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {fmt(self.lo)}"
        if hi is not None:
            return f"{'<' if self.hi_open else '<='} {fmt(hi)}"
        return "finite"

    def side(self, value: float, is_int: bool) -> str:
        """The bound ``value`` crosses, in words: ``at most 100,000``, ``at least 1``, ``above 0``."""

        def fmt(v: float) -> str:
            return _number_text(v, is_int)

        hi = self.upper(is_int)
        if hi is not None and (value >= hi if self.hi_open else value > hi):
            return f"below {fmt(hi)}" if self.hi_open else f"at most {fmt(hi)}"
        assert self.lo is not None
        return f"above {fmt(self.lo)}" if self.lo_open else f"at least {fmt(self.lo)}"

    def upper(self, is_int: bool) -> float | None:
        return self.hi if self.hi is not None or not is_int else INT_CAP

    def holds(self, value: float, is_int: bool) -> bool:
        hi = self.upper(is_int)
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (hi is not None and (value >= hi if self.hi_open else value > hi))


def _number_text(v: float, is_int: bool) -> str:
    return f"{int(v):,}" if is_int else f"{v:g}"


# the common ranges, by name (a ranker plugin imports them from rbench.plugin)
AtLeast0 = Annotated[int, Range(0)]  # counts where 0 means "none" or "all"
AtLeast1 = Annotated[int, Range(1)]  # sizes, counts of steps
Seed = Annotated[int, Range(0, SEED_CAP, note="below 2**32: numpy and torch keep 32 bits of a seed")]
Positive = Annotated[float, Range(0, lo_open=True)]  # learning rates, temperatures, scales
NonNegative = Annotated[float, Range(0)]  # weight decays, penalties
Fraction = Annotated[float, Range(0, 1)]  # shares of a whole, probabilities
DropoutRate = Annotated[float, Range(0, 1, hi_open=True)]  # 1 would drop everything


def numeric_kind(tp: Any) -> tuple[type | None, Range | None]:
    """``(int | float | None, its declared Range or None)`` of an option's annotation (as
    ``typing.get_type_hints(..., include_extras=True)`` gives it), looking through ``X | None``
    and ``list[X]``/``tuple[X, ...]``; ``(None, None)`` for a field that holds no number."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        kind, _ = numeric_kind(base)
        found = next((e for e in extras if isinstance(e, Range)), None)
        return kind, found
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return numeric_kind(args[0]) if len(args) == 1 else (None, None)
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return numeric_kind(args[0]) if len(args) == 1 else (None, None)
    if tp is bool:
        return None, None
    if tp in (int, float):
        return tp, None
    return None, None


def type_text(tp: Any) -> str:
    """An option's type as a reader wants it: the range's base type (``float``, ``int | None``,
    ``list[int]``), without the ``Annotated`` wrapper (the range is shown on its own)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return type_text(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return "|".join(type_text(a) for a in get_args(tp))
    if origin in (list, tuple):
        inner = ",".join("..." if a is Ellipsis else type_text(a) for a in get_args(tp))
        return f"{origin.__name__}[{inner}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def problem(value: Any, kind: type, rng: Range | None) -> str | None:
    """What is wrong with ``value`` as an option of ``kind`` (int/float) in ``rng`` ("must be
    ..., got ..."), or None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"must be {'an integer' if kind is int else 'a number'}, got {type(value).__name__} {value!r}"
    if kind is int and not isinstance(value, numbers.Integral):
        return f"must be an integer, got {value!r}"
    if not math.isfinite(float(value)):
        return f"must be a finite number, got {value!r}"
    rng = rng or Range()
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not rng.holds(number, kind is int):
        is_int = kind is int
        side = rng.side(number, is_int)
        note = f"; {rng.note}" if rng.note else ""
        return f"must be {side} ({rng.text(is_int)}{note}), got {value!r}"
    return None


def check_value(value: Any, tp: Any) -> str | None:
    """What is wrong with a field's ``value`` under its annotation ``tp`` (None: fine, or a
    field that holds no number). A list or tuple is checked element by element; None passes
    where the annotation allows it."""
    kind, rng = numeric_kind(tp)
    if kind is None or value is None:
        return None
    if isinstance(value, (list, tuple)):
        return next((p for p in (problem(v, kind, rng) for v in value) if p), None)
    return problem(value, kind, rng)
