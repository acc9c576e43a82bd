"""The checked registry of RBench tasks.

Every task of the paper's Table 2 is declared here with its paper sizes, sources, license and
prompt; ``get_task`` refuses unknown names with a "did you mean". Loading imports the task's
loader module only when asked, so ``rbench tasks`` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from rbench import paths
from rbench.api import TaskData
from rbench.config import build_config
from rbench.errors import RBenchError, unknown
from rbench.tasks.spec import Source, TaskSpec

_AMAZON14 = "https://cseweb.ucsd.edu/~jmcauley/datasets/amazon/links.html"
_AMAZON_LICENSE = "Amazon review data (McAuley lab): research use; see the dataset page"
_RECBOLE_ATOMIC = "https://recbole.io/dataset_list.html"

_TASK_LIST: list[TaskSpec] = [
    TaskSpec(
        name="ml-100k",
        title="Rec-Movie protocol on MovieLens 100K (embedded default)",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation over the full MovieLens 100K catalogue, read from the "
        "copy that ships inside the installed `recbole` package (no download).",
        paper_candidates=None,
        paper_queries=None,
        sources=(Source("MovieLens 100K (RecBole atomic files)", "https://grouplens.org/datasets/movielens/100k/",
                        "GroupLens research license: no redistribution", note="read from recbole/dataset_example/ml-100k"),),
        license="GroupLens MovieLens license (research use, no redistribution)",
        loader="rbench.tasks.recsys:load_ml100k",
        how_to_get="pip install 'rbench[recsys]' (the data ships inside recbole)",
        embedded=True,
        options="rbench.tasks.recsys:SequentialOptions",
    ),
    TaskSpec(
        name="rec-music",
        title="Rec-Music",
        scenario="small",
        domain="recommendation",
        description="Sequential music recommendation, each query with its own 20-item list: the true next "
        "item + 19 seeded negatives the user never interacted with (IRanker's setting).",
        paper_candidates=20,
        paper_queries=12483,
        sources=(Source("Amazon CDs and Vinyl (2014/2018)", _AMAZON14, _AMAZON_LICENSE),
                 Source("any RecBole atomic dataset, e.g. Last.fm", _RECBOLE_ATOMIC, "per dataset")),
        license=_AMAZON_LICENSE,
        loader="rbench.tasks.recsys:load_rec_music",
        how_to_get="rbench data download rec-music, or rbench data prepare rec-music --from DIR "
        "(RecBole atomic .inter/.item or Amazon reviews/meta json.gz)",
        options="rbench.tasks.recsys:SmallListOptions",
    ),
    TaskSpec(
        name="routing-balance",
        title="Routing-Balance",
        scenario="small",
        domain="routing",
        description="LLM routing: rank the candidate LLMs for a query; the positive maximises "
        "0.5*effect - 0.5*normalised cost (GraphRouter's balance scenario).",
        paper_candidates=20,
        paper_queries=1620,
        sources=(Source("GraphRouter router_data.csv", "https://github.com/ulab-uiuc/GraphRouter", "MIT"),),
        license="MIT (GraphRouter)",
        loader="rbench.tasks.routing:load_routing",
        how_to_get="rbench data prepare routing-balance --from DIR (router_data.csv [+ model descriptions])",
        options="rbench.tasks.routing:RoutingOptions",
    ),
    TaskSpec(
        name="rec-movie",
        title="Rec-Movie",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on MovieLens 1M, full catalogue as the pool.",
        paper_candidates=3884,
        paper_queries=4167,
        sources=(Source("MovieLens 1M", "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                        "GroupLens research license: no redistribution"),),
        license="GroupLens MovieLens license (research use, no redistribution)",
        loader="rbench.tasks.recsys:load_rec_movie",
        how_to_get="rbench data download rec-movie, or --from DIR with ratings.dat/movies.dat or ml-1m.inter/.item",
        options="rbench.tasks.recsys:SequentialOptions",
    ),
    TaskSpec(
        name="rec-toy",
        title="Rec-Toy",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on Amazon Toys and Games (2014, 5-core), full catalogue.",
        paper_candidates=11925,
        paper_queries=19413,
        sources=(Source("Amazon Toys and Games 5-core + metadata (2014)", _AMAZON14, _AMAZON_LICENSE),),
        license=_AMAZON_LICENSE,
        loader="rbench.tasks.recsys:load_rec_toy",
        how_to_get="rbench data prepare rec-toy --from DIR (reviews_Toys_and_Games_5.json.gz + "
        "meta_Toys_and_Games.json.gz, or RecBole Amazon_Toys_and_Games.inter/.item)",
        options="rbench.tasks.recsys:SequentialOptions",
    ),
    TaskSpec(
        name="msmarco",
        title="MS MARCO",
        scenario="large",
        domain="passage",
        description="Passage ranking: one positive per query, the pool is all passages of the sampled "
        "queries (every query's negatives are every other query's candidates).",
        paper_candidates=24697,
        paper_queries=3038,
        sources=(Source("MS MARCO v1.1 QnA / passage ranking", "https://microsoft.github.io/msmarco/",
                        "MS MARCO terms: non-commercial research"),),
        license="MS MARCO terms (non-commercial research)",
        loader="rbench.tasks.passages:load_msmarco",
        how_to_get="rbench data prepare msmarco --from DIR (v1.1 parquet/jsonl, or collection.tsv + "
        "queries.tsv + qrels)",
        options="rbench.tasks.passages:PassageOptions",
    ),
    TaskSpec(
        name="esci",
        title="ESCI",
        scenario="large",
        domain="product",
        description="Product search on Amazon Shopping Queries (US); label E is the positive; the pool is "
        "the products of the sampled queries.",
        paper_candidates=4000,
        paper_queries=3999,
        sources=(Source("Amazon Shopping Queries Dataset", "https://github.com/amazon-science/esci-data",
                        "Apache-2.0"),),
        license="Apache-2.0",
        loader="rbench.tasks.passages:load_esci",
        how_to_get="rbench data download esci, or --from DIR (shopping_queries_dataset_examples.parquet + "
        "shopping_queries_dataset_products.parquet)",
        options="rbench.tasks.passages:PassageOptions",
    ),
    TaskSpec(
        name="rec-clothing",
        title="Rec-Clothing",
        scenario="ultra",
        domain="recommendation",
        description="Sequential recommendation on Amazon Clothing, Shoes and Jewelry (2023) with the "
        "whole ~6.8M-item catalogue as the pool.",
        paper_candidates=6805462,
        paper_queries=185925,
        sources=(Source("Amazon Reviews 2023: Clothing_Shoes_and_Jewelry",
                        "https://amazon-reviews-2023.github.io/", _AMAZON_LICENSE),),
        license=_AMAZON_LICENSE,
        loader="rbench.tasks.recsys:load_rec_clothing",
        how_to_get="rbench data download rec-clothing, or --from DIR (Clothing_Shoes_and_Jewelry.jsonl.gz + "
        "meta_Clothing_Shoes_and_Jewelry.jsonl.gz, or RecBole atomic)",
        options="rbench.tasks.recsys:SequentialOptions",
    ),
]

TASKS: dict[str, TaskSpec] = {t.name: t for t in _TASK_LIST}
PAPER_TASKS = ("rec-music", "routing-balance", "rec-movie", "rec-toy", "msmarco", "esci", "rec-clothing")


def get_task(name: str) -> TaskSpec:
    if name in TASKS:
        return TASKS[name]
    extra = _imported_tasks()
    if name in extra:
        return extra[name]
    raise unknown("task", name, list(TASKS) + list(extra))


def _imported_tasks() -> dict[str, TaskSpec]:
    """Bring-your-own tasks registered by ``rbench data import`` (see rbench.tasks.generic)."""
    try:
        generic = importlib.import_module("rbench.tasks.generic")
    except ImportError:
        return {}
    finder = getattr(generic, "imported_specs", None)
    return finder() if finder else {}


def list_tasks() -> list[TaskSpec]:
    return list(TASKS.values()) + list(_imported_tasks().values())


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise RBenchError(f"task loader {ref} is not available: {exc}") from exc
    if not hasattr(mod, attr):
        raise RBenchError(f"task loader {ref} is not available (no {attr} in {module})")
    return getattr(mod, attr)


def data_status(spec: TaskSpec) -> tuple[bool, str]:
    """(present, detail) without loading the data."""
    if spec.embedded:
        ok = importlib.util.find_spec("recbole") is not None
        return ok, ("inside installed recbole" if ok else "install rbench[recsys] (recbole ships it)")
    status = getattr(importlib.import_module(spec.loader.partition(":")[0]), "data_status", None) \
        if importlib.util.find_spec(spec.loader.partition(":")[0]) else None
    if status is not None:
        return status(spec)
    raw = paths.raw_dir(spec.name)
    if raw.exists() and any(raw.iterdir()):
        return True, str(raw)
    return False, f"not present: {spec.how_to_get}"


def task_options(spec: TaskSpec, overrides: dict[str, Any] | None) -> Any:
    if spec.options is None:
        if overrides:
            raise RBenchError(f"task {spec.name!r} has no options (got {', '.join(overrides)})")
        return None
    return build_config(_resolve(spec.options), overrides, owner=f"task {spec.name!r}")


def load_task(name: str, options: dict[str, Any] | None = None, seed: int = 0) -> TaskData:
    """Load a task's prepared data (original pool). Variants are applied by ``rbench.pools``."""
    spec = get_task(name)
    present, detail = data_status(spec)
    if not present:
        raise RBenchError(f"task {name!r}: data {detail}" if detail.startswith("not present")
                          else f"task {name!r}: data not present: {detail}")
    opts = task_options(spec, options)
    loader = _resolve(spec.loader)
    if spec.embedded:  # ships inside an installed package and loads in ~0.5 s: not cached
        return loader(spec, opts, seed)
    from rbench import store  # prepared once, memory-mapped afterwards (rbench.store)

    return store.load_cached(spec, opts, seed, loader)
