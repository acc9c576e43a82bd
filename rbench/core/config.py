"""Typed options for rankers and tasks, settable from the CLI as ``--set key=value``.

Each ranker declares its options as a dataclass whose defaults are the paper's settings; this
module turns ``key=value`` strings into that dataclass, refusing unknown keys (with a "did you
mean") and values of the wrong type, so a typo never silently runs the default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from rbench.core.errors import RBenchError, did_you_mean
from rbench.core.hashing import short_hash
from rbench.core.ranges import check_value

C = TypeVar("C")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(raw: str, tp: Any, key: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:  # a declared range (rbench.core.ranges): parsed as its base type, then checked
        value = _coerce(raw, get_args(tp)[0], key)
        bad = check_value(value, tp)
        if bad is not None:
            raise RBenchError(f"--set {key}={raw}: {key} {bad}")
        return value
    if origin is Literal:
        choices = get_args(tp)
        for choice in choices:
            if str(choice) == raw:
                return choice
        raise RBenchError(f"--set {key}={raw}: expected one of {', '.join(map(str, choices))}")
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if raw.lower() in ("none", "null") and type(None) in get_args(tp):
            return None
        errors = []
        for arg in args:
            try:
                return _coerce(raw, arg, key)
            except RBenchError as exc:
                errors.append(str(exc))
        raise RBenchError(errors[0] if errors else f"--set {key}={raw}: bad value")
    if origin in (list, tuple):
        (inner, *_) = get_args(tp) or (str,)
        parts = [p for p in raw.split(",") if p != ""]
        values = [_coerce(p.strip(), inner, key) for p in parts]
        return values if origin is list else tuple(values)
    if tp is bool:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise RBenchError(f"--set {key}={raw}: expected a boolean (true/false)")
    if tp is int:
        if not raw.strip().lstrip("+-").isascii() or not raw.strip().lstrip("+-").isdigit() or len(raw) > 40:
            raise RBenchError(f"--set {key}={raw[:40]}: {key} must be an integer (ASCII digits, at most 40)")
        try:
            return int(raw)
        except ValueError:
            raise RBenchError(f"--set {key}={raw}: expected an integer") from None
    if tp is float:
        try:
            value = float(raw) if raw.isascii() else float("nan")
        except ValueError:
            raise RBenchError(f"--set {key}={raw}: expected a number") from None
        if not math.isfinite(value):  # NaN and +-inf are never a setting (rbench.core.ranges)
            raise RBenchError(f"--set {key}={raw[:40]}: {key} must be a finite number (ASCII digits), got {raw[:40]!r}")
        return value
    if tp is str or tp is Any:
        return raw
    raise RBenchError(f"--set {key}={raw}: cannot parse a value of type {tp}")


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``, refusing items without '=' and a key given twice with
    different values (an identical repeat is harmless)."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise RBenchError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise RBenchError(f"--set {item!r}: empty key")
        if key in out and out[key] != value.strip():
            raise RBenchError(f"--set {key} is given twice ({key}={out[key]} and {key}={value.strip()}): keep one")
        out[key] = value.strip()
    return out


def build_config(cls: type[C], overrides: dict[str, Any] | None, owner: str) -> C:
    """Instantiate dataclass ``cls`` with ``overrides`` (strings are parsed to the field type)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise RBenchError(
                f"unknown option {key!r} for {owner}{did_you_mean(key, fields)}; "
                f"options: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], key) if isinstance(value, str) else value
    try:
        cfg = cls(**kwargs)
        keep = getattr(cfg, "keep_explicit", None)  # presets must not override what the user set
        if callable(keep):
            keep(kwargs)
        check_ranges(cfg, hints, owner, overrides)  # before ``validate``, which may compute with them
        validate = getattr(cfg, "validate", None)
        if callable(validate):
            validate()
    except ValueError as exc:  # a plugin's own check (``__post_init__`` or ``validate``) refused a value
        given = ", ".join(f"{k}={v}" for k, v in (overrides or {}).items())
        raise RBenchError(f"bad option for {owner}" + (f" (--set {given})" if given else "")
                          + f": {' '.join(str(exc).split()) or type(exc).__name__}") from exc
    return cfg


def check_ranges(cfg: Any, hints: dict[str, Any], owner: str, overrides: dict[str, Any] | None = None) -> None:
    """Every numeric field of a built config in its declared range (``rbench.core.ranges``):
    finite floats, integers that are integers, bounds; what a preset set is checked too."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        bad = check_value(value, hints.get(f.name, Any))
        if bad is not None:
            given = (overrides or {}).get(f.name)
            how = f"--set {f.name}={given}" if given is not None else f"option {f.name}"
            raise RBenchError(f"bad option for {owner} ({how}): {f.name} {bad}")


def config_dict(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def config_hash(data: dict[str, Any], length: int = 8) -> str:
    return short_hash(data, length)


def plain_config(config: Any) -> dict[str, Any]:
    """A config as JSON sees it (tuples become lists, unknown objects their text)."""
    return json.loads(json.dumps(dict(config or {}), default=str))


def non_default(config: dict[str, Any], default: dict[str, Any]) -> dict[str, Any]:
    """The options of ``config`` whose values differ from ``default``'s."""
    return {k: v for k, v in config.items() if default.get(k) != v}


def field_default(f: dataclasses.Field) -> Any:  # type: ignore[type-arg]
    """A dataclass field's default value (None when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


class PresetOptions:
    """Mixin for option dataclasses with named budgets (``preset=NAME``): a preset changes only
    the options still at their default, and options given explicitly win even when they equal
    the default (``build_config`` calls ``keep_explicit``; ``__post_init__`` alone cannot tell
    ``--set x=<default>`` from an unset option). ``PRESETS`` maps a preset name to its values."""

    PRESETS: typing.ClassVar[dict[str, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        values = self.PRESETS.get(str(getattr(self, "preset", "")), {})
        if values:
            defaults = {f.name: field_default(f) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
            for key, value in values.items():
                if getattr(self, key) == defaults[key]:
                    setattr(self, key, value)

    def keep_explicit(self, given: dict[str, Any]) -> None:
        for key, value in given.items():
            setattr(self, key, value)

    @classmethod
    def row_label(cls, name: str, config: dict[str, Any]) -> str:
        """A table row's name from a config: the preset, then every option that differs from
        what the preset (or, outside it, the default) sets; an option the preset sets is shown
        when it differs from the preset's value (an explicit ``--set x=<paper value>`` on top of
        a preset is another model)."""
        implied = cls.PRESETS.get(str(config.get("preset", "")), {})
        parts = [f"preset={config['preset']}"] if implied else []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == "preset" or f.name not in config:
                continue
            base = implied[f.name] if f.name in implied else field_default(f)
            value = config[f.name]
            if value == base or (isinstance(base, tuple) and list(base) == value):
                continue
            text = str(value).lower() if isinstance(value, bool) else str(value)
            parts.append(f"{f.name}={text.rstrip('/').rsplit('/', 1)[-1]}")
        return name + (f" ({', '.join(parts)})" if parts else "")
