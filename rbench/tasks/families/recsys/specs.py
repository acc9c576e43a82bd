"""The recommendation tasks' declarations (``RecSpec``): sizes, sources with their downloads, and
the input layouts a raw folder may hold (``Layout``), one declaration per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rbench.api import RemoteFile, Source, TaskSpec
from rbench.core.errors import RBenchError
from rbench.tasks.families.recsys.protocol import FiveCoreOptions

# ------------------------------------------------------------------------------------------
# input layouts, data_status and loaders
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """One accepted set of input files. ``{stem}`` in a metadata name is the interactions file's
    name without its extension (RecBole's pairing of ``x.inter`` with ``x.item``)."""

    kind: Literal["ml-dat", "atomic", "amazon14", "amazon23"]
    label: str
    interactions: tuple[str, ...]  # names or globs; the first that exists wins
    metadata: tuple[str, ...]
    meta_required: bool = True


@dataclass
class Found:
    layout: Layout
    directory: Path
    interactions: Path
    metadata: Path | None


def _first(d: Path, patterns: Sequence[str], stem: str = "") -> Path | None:
    for pattern in patterns:
        pattern = pattern.replace("{stem}", stem)
        if any(ch in pattern for ch in "*?["):
            hits = sorted(p for p in d.glob(pattern) if p.is_file())
            if len(hits) > 1:
                raise RBenchError(f"{d}: several files match {pattern} ({', '.join(p.name for p in hits)}); keep one")
            if hits:
                return hits[0]
        elif (d / pattern).is_file():
            return d / pattern
    return None


def match_layout(d: Path, layouts: Sequence[Layout], partial: bool = False) -> Found | None:
    for layout in layouts:
        inter = _first(d, layout.interactions)
        if inter is None:
            continue
        stem = inter.name[: -len(".inter")] if inter.name.endswith(".inter") else inter.stem
        meta = _first(d, layout.metadata, stem)
        if meta is not None or not layout.meta_required or partial:
            return Found(layout, d, inter, meta)
    return None


# ------------------------------------------------------------------------------------------
# the tasks: one declaration each (spec, sources, input layouts, pool rule)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecSpec(TaskSpec):
    """A recommendation task: the common spec plus the input layouts it accepts (the original
    release first) and its pool rule (``all``: every catalogue item; ``interacted``: items that
    occur in the interactions)."""

    layouts: tuple[Layout, ...] = ()
    pool_rule: Literal["all", "interacted"] = "interacted"
    options_type: type | None = None  # its ``--set task.*`` dataclass (None: by scenario)


_AMAZON14 = "https://cseweb.ucsd.edu/~jmcauley/datasets/amazon/links.html"
_AMAZON_LICENSE = "Amazon review data (McAuley lab): research use; see the dataset page"
_SNAP14 = "https://snap.stanford.edu/data/amazon/productGraph/categoryFiles"
_AMZ23 = "https://mcauleylab.ucsd.edu/public_datasets/data/amazon_2023/raw"
_AMZ23_MIRROR = "https://datarepo.eng.ucsd.edu/mcauley_group/data/amazon_2023/raw"
_MOVIELENS_LICENSE = "GroupLens MovieLens license (research use, no redistribution)"


def amazon14_files(cat: str) -> tuple[RemoteFile, ...]:
    return (
        RemoteFile(f"reviews_{cat}_5.json.gz", (f"{_SNAP14}/reviews_{cat}_5.json.gz",),
                   note="Amazon 2014 5-core reviews (McAuley lab); no published checksum"),
        RemoteFile(f"meta_{cat}.json.gz", (f"{_SNAP14}/meta_{cat}.json.gz",),
                   note="Amazon 2014 item metadata (McAuley lab); no published checksum"),
    )


def amazon23_files(cat: str) -> tuple[RemoteFile, ...]:
    return (
        RemoteFile(f"{cat}.jsonl.gz", (f"{_AMZ23}/review_categories/{cat}.jsonl.gz",
                                       f"{_AMZ23_MIRROR}/review_categories/{cat}.jsonl.gz"),
                   note="Amazon Reviews 2023 (McAuley lab); no published checksum"),
        RemoteFile(f"meta_{cat}.jsonl.gz", (f"{_AMZ23}/meta_categories/meta_{cat}.jsonl.gz",
                                            f"{_AMZ23_MIRROR}/meta_categories/meta_{cat}.jsonl.gz"),
                   note="Amazon Reviews 2023 item metadata; no published checksum"),
    )


def amazon23_layout(cat: str) -> Layout:
    return Layout("amazon23", "Amazon Reviews 2023", (f"{cat}.jsonl.gz", f"{cat}.jsonl"),
                  (f"meta_{cat}.jsonl.gz", f"meta_{cat}.jsonl"))


def amazon23_atomic(cat: str) -> Layout:
    return Layout("atomic", "RecBole atomic", (f"{cat}.inter", f"Amazon_{cat}.inter"), ("{stem}.item",))


def amazon14_layout(cat: str) -> Layout:
    return Layout("amazon14", f"Amazon 2014/2018 {cat} 5-core",
                  (f"reviews_{cat}_5.json.gz", f"reviews_{cat}_5.json", f"{cat}_5.json.gz", f"{cat}_5.json"),
                  (f"meta_{cat}.json.gz", f"meta_{cat}.json"))


ML100K = TaskSpec(
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
    license=_MOVIELENS_LICENSE,
    how_to_get="pip install 'rbench[recsys]' (the data ships inside recbole)",
    embedded=True,
)


def _zero_shot_target(name: str, cat: str, title: str, candidates: int, queries: int) -> RecSpec:
    """A target of the paper's zero-shot Table 5 (trained on Rec-Toy): an Amazon Reviews 2023
    category, 5-core by default, the whole catalogue as the pool; not a Table 2 task."""
    return RecSpec(
        name=name,
        title=f"{title} (zero-shot target)",
        scenario="large",
        domain="recommendation",
        description=f"Sequential recommendation on Amazon Reviews 2023 {cat} (5-core), full catalogue; "
        "the paper's zero-shot target (trained on Rec-Toy: --variant from-rec-toy).",
        paper_candidates=candidates,
        paper_queries=queries,
        sources=(Source(f"Amazon Reviews 2023: {cat}", "https://amazon-reviews-2023.github.io/",
                        _AMAZON_LICENSE, files=amazon23_files(cat)),),
        license=_AMAZON_LICENSE,
        how_to_get=f"rbench data download {name}, or --from DIR ({cat}.jsonl.gz + meta_{cat}.jsonl.gz, "
        "or RecBole atomic)",
        layouts=(amazon23_layout(cat), amazon23_atomic(cat)),
        options_type=FiveCoreOptions,
    )

SPECS: tuple[RecSpec, ...] = (
    RecSpec(
        name="rec-music",
        title="Rec-Music",
        scenario="small",
        domain="recommendation",
        description="Sequential music recommendation, each query with its own 20-item list: the true next "
        "item + 19 seeded negatives drawn from the whole pool without looking at the user's past "
        "(task.negatives_from=catalogue; =unseen is the older, leaky draw among items the user never had).",
        paper_candidates=20,
        paper_queries=12483,
        sources=(Source("Amazon CDs and Vinyl (2014/2018)", _AMAZON14, _AMAZON_LICENSE,
                        files=amazon14_files("CDs_and_Vinyl")),
                 Source("any RecBole atomic dataset, e.g. Last.fm", "https://recbole.io/dataset_list.html",
                        "per dataset")),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-music, or rbench data prepare rec-music --from DIR "
        "(RecBole atomic .inter/.item or Amazon reviews/meta json.gz)",
        paper_row=1,
        layouts=(amazon14_layout("CDs_and_Vinyl"),
                 Layout("atomic", "RecBole atomic", ("*.inter",), ("{stem}.item",), meta_required=False)),
    ),
    RecSpec(
        name="rec-movie",
        title="Rec-Movie",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on MovieLens 1M, full catalogue as the pool.",
        paper_candidates=3884,
        paper_queries=4167,
        sources=(Source("MovieLens 1M", "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                        "GroupLens research license: no redistribution",
                        files=(RemoteFile("ml-1m.zip", ("https://files.grouplens.org/datasets/movielens/ml-1m.zip",),
                                          sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
                                          extract=True,
                                          note="MovieLens 1M (GroupLens); md5 c4d9eecfca2ab87c1945afe126590906"),)),),
        license=_MOVIELENS_LICENSE,
        how_to_get="rbench data download rec-movie, or --from DIR with ratings.dat/movies.dat or ml-1m.inter/.item",
        paper_row=3,
        donates=("mixed", "shift", "scaled"),
        layouts=(Layout("ml-dat", "MovieLens 1M .dat", ("ratings.dat",), ("movies.dat",)),
                 Layout("atomic", "RecBole atomic", ("ml-1m.inter",), ("ml-1m.item",))),
        pool_rule="all",
    ),
    RecSpec(
        name="rec-toy",
        title="Rec-Toy",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on Amazon Toys and Games (2014, 5-core), full catalogue.",
        paper_candidates=11925,
        paper_queries=19413,
        sources=(Source("Amazon Toys and Games 5-core + metadata (2014)", _AMAZON14, _AMAZON_LICENSE,
                        files=amazon14_files("Toys_and_Games")),),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-toy, or rbench data prepare rec-toy --from DIR "
        "(reviews_Toys_and_Games_5.json.gz + "
        "meta_Toys_and_Games.json.gz, or RecBole Amazon_Toys_and_Games.inter/.item)",
        paper_row=4,
        donates=("mixed", "shift", "scaled"),
        layouts=(amazon14_layout("Toys_and_Games"),
                 Layout("atomic", "RecBole atomic", ("Amazon_Toys_and_Games.inter",), ("{stem}.item",))),
    ),
    RecSpec(
        name="rec-clothing",
        title="Rec-Clothing",
        scenario="ultra",
        domain="recommendation",
        description="Sequential recommendation on Amazon Clothing, Shoes and Jewelry (2023) with the "
        "whole ~6.8M-item catalogue as the pool.",
        paper_candidates=6805462,
        paper_queries=185925,
        sources=(Source("Amazon Reviews 2023: Clothing_Shoes_and_Jewelry", "https://amazon-reviews-2023.github.io/",
                        _AMAZON_LICENSE, files=amazon23_files("Clothing_Shoes_and_Jewelry")),),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-clothing, or --from DIR (Clothing_Shoes_and_Jewelry.jsonl.gz + "
        "meta_Clothing_Shoes_and_Jewelry.jsonl.gz, or RecBole atomic)",
        paper_row=7,
        donates=("scaled",),
        layouts=(amazon23_layout("Clothing_Shoes_and_Jewelry"), amazon23_atomic("Clothing_Shoes_and_Jewelry")),
    ),
    *(_zero_shot_target(name, cat, title, cands, queries) for name, cat, title, cands, queries in (
        ("video-games", "Video_Games", "Video Games", 25600, 94800),
        ("software", "Software", "Software", 17600, 146400))),
)
