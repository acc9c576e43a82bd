"""Every numeric option of every built-in ranker and of the CLI has a declared range, and NaN,
+-inf, values out of range and values of the wrong type are refused where they are parsed, in one
line naming the option (issue 42: LRanker's ``lr=nan``, ``temperature=nan``, ``beta1=2``, the
generative rankers' ``temperature=nan/inf``, ``rbench compare --seed -1`` went through).

Table-driven over the registry: a ranker or option added later is in the table by itself, and an
``int``/``float`` option without a ``Range`` fails ``test_every_numeric_option_declares_a_range``.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from rbench.core.config import build_config
from rbench.core.errors import RBenchError
from rbench.core.ranges import INT_CAP, Range, check_value, numeric_kind
from rbench.rankers import available_rankers, load_ranker_class
from tests.helpers import cli, one_line


def _configs() -> tuple[list[tuple[str, type]], list[str]]:
    out, broken = [], []
    for name in available_rankers():
        try:
            cls = load_ranker_class(name)
        except RBenchError as exc:  # a ranker that cannot load: a failure below, never silently left out
            broken.append(f"{name}: {exc}")
            continue
        cfg = getattr(cls, "Config", None)
        if cfg is not None and dataclasses.is_dataclass(cfg):
            out.append((name, cfg))
    return out, broken


CONFIGS, BROKEN = _configs()


def _numeric_fields() -> list[tuple[str, type, str, type, Range | None]]:
    rows = []
    for name, cfg in CONFIGS:
        hints = typing.get_type_hints(cfg, include_extras=True)
        for f in dataclasses.fields(cfg):
            kind, rng = numeric_kind(hints[f.name])
            if kind is not None:
                rows.append((name, cfg, f.name, kind, rng))
    return rows


FIELDS = _numeric_fields()
IDS = [f"{r[0]}.{r[2]}" for r in FIELDS]


def test_the_table_covers_the_registry():
    assert not BROKEN, BROKEN
    names = {n for n, _ in CONFIGS}
    assert {"lranker", "rankgpt", "bm25", "tiger", "sasrec"} <= names
    assert len(FIELDS) > 100  # every built-in ranker's numbers, not a sample


@pytest.mark.parametrize("row", FIELDS, ids=IDS)
def test_every_numeric_option_declares_a_range(row):
    name, _cfg, key, _kind, rng = row
    assert rng is not None, f"ranker {name!r}: option {key} is a number without a declared Range (rbench.core.ranges)"


def _out_of_range(kind: type, rng: Range) -> list[str]:
    """Values just past each bound (the int cap when the range names no upper bound)."""
    values = []
    if rng.lo is not None:
        below = rng.lo if rng.lo_open else (rng.lo - 1 if kind is int else rng.lo - 1e-9 * max(1.0, abs(rng.lo)))
        values.append(repr(int(below) if kind is int else float(below)))
    hi = rng.upper(kind is int)
    if hi is not None:
        above = hi if rng.hi_open else (hi + 1 if kind is int else hi + 1e-9 * max(1.0, abs(hi)))
        values.append(repr(int(above) if kind is int else float(above)))
    return values


@pytest.mark.parametrize("row", FIELDS, ids=IDS)
def test_bad_values_are_refused_in_one_line(row):
    name, cfg, key, kind, rng = row
    bad = ["nan", "inf", "-inf", "1e400", "abc", "", "²"]
    if kind is int:
        bad += ["1.5", "1e3", "true"]
    bad += _out_of_range(kind, rng or Range())
    default = getattr(cfg(), key)
    for raw in bad:
        with pytest.raises(RBenchError) as info:
            build_config(cfg, {key: raw}, owner=f"ranker {name!r}")
        text = str(info.value)
        assert "\n" not in text and key in text, (raw, text)
    # the same values from Python (not text): refused by the check on the built config
    for value in (float("nan"), float("inf"), -float("inf"), {"a": 1}, True):
        if isinstance(default, (list, tuple)):
            value = [value]
        with pytest.raises(RBenchError, match=key):
            build_config(cfg, {key: value}, owner=f"ranker {name!r}")


@pytest.mark.parametrize("row", FIELDS, ids=IDS)
def test_the_defaults_are_in_range(row):
    _name, cfg, key, _kind, _rng = row
    hints = typing.get_type_hints(cfg, include_extras=True)
    assert check_value(getattr(cfg(), key), hints[key]) is None


@pytest.mark.parametrize("ranker,key,raw,says", [
    ("lranker", "lr", "nan", "lr must be a finite number"),
    ("lranker", "temperature", "nan", "temperature must be a finite number"),
    ("lranker", "beta1", "2", "beta1 must be below 1 (in [0, 1))"),
    ("lranker", "tts_depths", "0,1,100", "must be at most 64 (in [0, 64])"),
    ("rankgpt", "temperature", "inf", "temperature must be a finite number"),
    ("rankgpt", "temperature", "nan", "temperature must be a finite number"),
    ("rankgpt", "window", "1000000000000", "window must be at most 10,000 (in [2, 10,000])"),
    ("iranker", "temperature", "-1", "temperature must be at least 0 (in [0, 100])"),
])
def test_the_issue_cases(ranker, key, raw, says):
    cfg = load_ranker_class(ranker).Config
    with pytest.raises(RBenchError) as info:
        build_config(cfg, {key: raw}, owner=f"ranker {ranker!r}")
    assert says in str(info.value)


def test_an_int_option_is_capped_with_the_cap_in_the_message():
    cfg = load_ranker_class("lranker").Config
    with pytest.raises(RBenchError, match=f"epochs must be at most {INT_CAP:,}"):
        build_config(cfg, {"epochs": str(INT_CAP + 1)}, owner="ranker 'lranker'")
    with pytest.raises(RBenchError, match="at most 40"):  # a 10,000-digit number is not parsed at all
        build_config(cfg, {"epochs": "9" * 10_000}, owner="ranker 'lranker'")


def test_a_preset_value_is_checked_too(monkeypatch):
    cfg = load_ranker_class("lranker").Config
    monkeypatch.setitem(cfg.PRESETS, "cpu", {**cfg.PRESETS["cpu"], "lr": float("nan")})
    with pytest.raises(RBenchError, match="option lr.*lr must be a finite number"):
        build_config(cfg, {"preset": "cpu"}, owner="ranker 'lranker'")


@pytest.mark.parametrize("ranker,key,raw", [("lranker", "lr", "nan"), ("lranker", "temperature", "nan"),
                                             ("lranker", "beta1", "2"), ("rankgpt", "temperature", "inf")])
def test_the_cli_refuses_before_anything_loads(capsys, tmp_path, monkeypatch, ranker, key, raw):
    from rbench.run import runner

    def refuse(*_a, **_k):
        raise AssertionError("the task was loaded before the check")

    monkeypatch.setattr(runner, "load", refuse)
    code, _, err = cli(capsys, "run", "-r", ranker, "-t", "ml-100k", "-q", "--results-dir", str(tmp_path),
                       "--set", f"{key}={raw}")
    line = one_line(err)
    assert code == 2 and key in line and raw in line
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("args,says", [
    (["--seed", "-1"], "--seed must be at least 0 (in [0, 4,294,967,295]"),
    (["--seed", str(2**32)], "--seed must be at most 4,294,967,295"),
    (["--resamples", "1000000000000"], "--resamples must be at most 10,000,000"),
    (["--resamples", "0"], "--resamples must be at least 1 (in [1, 10,000,000])"),
    (["--alpha", "nan"], "--alpha must be a finite number"),
    (["--alpha", "1.5"], "--alpha must be below 1 (in (0, 1))"),
])
def test_rbench_compare_checks_its_numbers_first(capsys, tmp_path, args, says):
    code, _, err = cli(capsys, "compare", "-t", "ml-100k", "--results-dir", str(tmp_path), *args)
    line = one_line(err)
    assert code == 2 and says in line, line


def test_run_settings_declare_their_ranges():
    from rbench.core.settings import CompareSettings, RunSettings

    for settings in (RunSettings, CompareSettings):
        hints = typing.get_type_hints(settings, include_extras=True)
        for f in dataclasses.fields(settings):
            kind, rng = numeric_kind(hints[f.name])
            assert kind is None or rng is not None, f"{settings.__name__}.{f.name} declares no Range"


@pytest.mark.parametrize("raw,says", [("100001", "at most 100,000 (or 'all'), got 100,001"),
                                      ("9" * 10_000, "at most 100,000 (or 'all'), got a 10,000-digit number"),
                                      ("²", "a whole number >= 1 or 'all'")])
def test_rerank_depth_is_capped(raw, says):
    from rbench.run.rerank import MAX_DEPTH, parse_depth

    with pytest.raises(RBenchError) as info:
        parse_depth(raw, 100)
    assert says in str(info.value) and len(str(info.value)) < 200
    assert parse_depth(str(MAX_DEPTH), 100) == MAX_DEPTH and parse_depth("all", 100) is None
