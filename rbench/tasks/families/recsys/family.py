"""The recommendation task families: ``RecommendationFamily`` (every ``RecSpec``: find the inputs,
read them, apply the protocol) and ``EmbeddedFamily`` (the ml-100k copy shipped with RecBole).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks.building import locate, not_present
from rbench.tasks.families.recsys.protocol import (
    Catalogue,
    CodedInteractions,
    Options,
    SequentialOptions,
    SmallListOptions,
    build_from_codes,
    build_sequential_task,
)
from rbench.tasks.families.recsys.readers import (
    interactions_from_atomic,
    items_from_atomic,
    read_ml_movies,
    read_ml_ratings,
)
from rbench.tasks.families.recsys.specs import ML100K, SPECS, Found, RecSpec, match_layout
from rbench.tasks.family import TaskFamily
from rbench.tasks.text_columns import text_column

# ------------------------------------------------------------------------------------------
# finding, checking and loading
# ------------------------------------------------------------------------------------------


def find_inputs(spec: RecSpec) -> Found | None:
    """The input files of a task in ``raw_dir(task)`` or in exactly one of its subfolders."""
    d = locate(paths.raw_dir(spec.name), lambda p: match_layout(p, spec.layouts) is not None)
    return match_layout(d, spec.layouts) if d is not None else None


def _amazon_task(spec: RecSpec, found: Found, options: Options | None, seed: int) -> TaskData:
    from rbench.tasks.families import amazon

    fmt = amazon.FORMAT_2023 if found.layout.kind == "amazon23" else amazon.FORMAT_2014
    reviews = amazon.read_reviews(found.interactions, fmt)
    assert found.metadata is not None
    read_meta = amazon.read_meta_2023 if found.layout.kind == "amazon23" else amazon.read_meta_2014
    meta = read_meta(found.metadata, reviews.item_names)
    cat = Catalogue(ids=np.asarray(reviews.item_names.to_pylist(), dtype=object), titles=text_column(meta.titles),
                    texts=text_column(meta.texts), has_meta=meta.has_meta)
    coded = CodedInteractions(reviews.user, reviews.item, reviews.ts, reviews.user_names)
    del reviews
    return build_from_codes(spec, coded, cat, options, str(found.directory), compact=True, seed=seed,
                            info={"layout": found.layout.label})


class RecommendationFamily(TaskFamily):
    """Rec-Music, Rec-Movie, Rec-Toy, Rec-Clothing, Video Games and Software: raw files in ``raw_dir(task)``, read in
    whichever of the spec's layouts is found, then the protocol of this module."""

    name = "recsys"
    doc = __doc__ or ""

    def __init__(self, specs: tuple[RecSpec, ...] = SPECS) -> None:
        self._specs = specs

    def specs(self) -> tuple[TaskSpec, ...]:
        return self._specs

    def options_type(self, spec: TaskSpec) -> type:
        declared = spec.options_type if isinstance(spec, RecSpec) else None
        return declared or (SmallListOptions if spec.scenario == "small" else SequentialOptions)

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        assert isinstance(spec, RecSpec)
        raw = paths.raw_dir(spec.name)
        found = find_inputs(spec)
        if found is None:
            partial = match_layout(raw, spec.layouts, partial=True) if raw.is_dir() else None
            note = ""
            if partial is not None:
                stem = partial.interactions.name.removesuffix(".inter")
                wanted = " or ".join(m.replace("{stem}", stem) for m in partial.layout.metadata)
                note = f"found {partial.interactions.name} but not {wanted}"
            return not_present(spec, raw, note)
        files = found.interactions.name + (f", {found.metadata.name}" if found.metadata else
                                           " (no .item file: items are titled 'item <id>')")
        return True, f"{found.layout.label}: {files} in {found.directory}"

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        """Read whichever layout ``find_inputs`` finds and apply the protocol with the task's pool rule."""
        assert isinstance(spec, RecSpec)
        options = options or self.options_type(spec)()
        found = find_inputs(spec)
        if found is None:
            raise RBenchError(f"task {spec.name!r}: data {self.status(spec)[1]}")
        info = {"layout": found.layout.label}
        if found.layout.kind == "ml-dat":
            assert found.metadata is not None
            return build_sequential_task(spec, read_ml_ratings(found.interactions), read_ml_movies(found.metadata),
                                         options, str(found.directory), catalogue=spec.pool_rule, seed=seed,
                                         info=info)
        if found.layout.kind == "atomic":
            return build_sequential_task(spec, interactions_from_atomic(found.interactions),
                                         items_from_atomic(found.metadata), options, str(found.directory),
                                         catalogue=spec.pool_rule, seed=seed, info=info)
        return _amazon_task(spec, found, options, seed)


def recbole_example_dir(name: str = "ml-100k") -> Path:
    import importlib.util

    found = importlib.util.find_spec("recbole")
    if found is None or not found.submodule_search_locations:
        raise RBenchError("task 'ml-100k' reads MovieLens 100K from the recbole package: "
                          "pip install 'rbench[recsys]'")
    path = Path(list(found.submodule_search_locations)[0]) / "dataset_example" / name
    if not (path / f"{name}.inter").exists():
        raise RBenchError(f"recbole is installed but {path / (name + '.inter')} is missing")
    return path


def load_atomic_dir(spec: TaskSpec, directory: Path, stem: str, options: SequentialOptions | None) -> TaskData:
    inter = interactions_from_atomic(directory / f"{stem}.inter")
    item_path = directory / f"{stem}.item"
    items = items_from_atomic(item_path if item_path.exists() else None)
    return build_sequential_task(spec, inter, items, options, source=str(directory))


class EmbeddedFamily(TaskFamily):
    """ml-100k: MovieLens 100K read from inside the installed ``recbole`` package. It loads in
    about half a second, so it is not cached, and there is no raw folder to fill."""

    name = "recsys-embedded"
    doc = __doc__ or ""
    cached = False
    links_from = False

    def specs(self) -> tuple[TaskSpec, ...]:
        return (ML100K,)

    def options_type(self, spec: TaskSpec) -> type:
        return SequentialOptions

    def inputs(self, spec: TaskSpec) -> list[Path]:
        return [recbole_example_dir(spec.name)]

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        import importlib.util

        ok = importlib.util.find_spec("recbole") is not None
        return ok, ("inside installed recbole" if ok else "install rbench[recsys] (recbole ships it)")

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_atomic_dir(spec, recbole_example_dir(spec.name), spec.name, options)


FAMILY = RecommendationFamily()
EMBEDDED = EmbeddedFamily()
