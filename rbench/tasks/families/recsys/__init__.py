"""Sequential recommendation tasks: ml-100k (embedded), Rec-Movie, Rec-Toy, Rec-Clothing (the
full-catalogue protocol), Rec-Music (the same sequences, 20-item lists) and the zero-shot targets
Video Games and Software (the paper's Table 5).

The exact rule, applied identically to every recommendation task (the paper gives the window
length and leave-one-out; the rest is RecBole's standard practice and written down here):

1. Interactions are de-duplicated on (user, item, timestamp); re-interactions at other times stay.
2. Each user's interactions are ordered by timestamp; ties keep file order (stable sort).
3. Users with fewer than ``min_interactions`` (3) interactions are dropped: leave-one-out needs a
   training, a validation and a test target.
4. Test target = the user's last item; validation target = the second-to-last; training samples =
   every earlier position t >= 1 (sliding windows). Each sample's history is the up-to
   ``history_len`` (20) items right before its target, oldest first.
5. Candidate pool = every item of the catalogue (items file plus any item seen in interactions),
   ordered by item id as text. Items without metadata get the text ``item <id>``. That order is
   kept (not the hashed order of ``rbench.tasks.building``, "Pool order"): it is the catalogue's own,
   fixed before any user is read, so an item's position says what its id says and nothing
   about which user's next item it is; ``tests/tasks/test_pool_order.py`` checks that a ranker of
   positions alone stays at chance.
6. Exclusion (RecBole full-sort): every item the user interacted with before the target is
   removed from that query's ranking (``exclude_history=all``; ``window`` excludes only the
   shown history, ``none`` nothing). The excluded set is a function of the query's input alone,
   never "the past minus the target": were the target spared, "rank the user's past items first"
   would find it every time it is a repeat, and an excluded-but-answer item cannot be scored. So a
   validation or test target the user already had (a repeat; under ``window``: one in the shown
   window) cannot be both excluded and the answer: with one positive per query, that query is
   left out of its split, and ``TaskData.info`` (and so the RunRecord's ``task_info``) counts it
   per split as ``repeat_targets_dropped``; ``repeat_targets`` counts every target the user had
   before, under any mode. ``exclude_history=none`` is the repeat-aware protocol: every query
   stays, nothing is excluded, and coming back to an item is part of what is measured.
   Training windows are never excluded or dropped.
7. Query text (the prompt's [USER QUERY]) = the history titles joined by "; ", oldest first;
   the prompt wraps it in the paper's recommendation template.
8. Small lists (rec-music): each query's negatives are drawn uniformly without replacement from
   the pool without the positive (``negatives_from=catalogue``, the default), without looking at
   the user's past, so an item of the user's history is in a list as often as chance puts it
   there, and being in the history predicts the answer only as much as users really come back
   to items. ``negatives_from=unseen`` draws only among items the user never had (past or
   future), the older rbench default (the paper, and IRanker's setting it follows, do not say how
   negatives are drawn): there the positive is the only history item a list can hold, so
   "history first, then popularity" is an oracle for every repeat target. It is kept to compare
   with older numbers, not as a protocol to report. (On Last.fm, where 37% of test targets are in
   the shown history, that probe reads MRR 60.56 under ``unseen`` and 59.30 under ``catalogue``:
   most of its gain there is real repeat behaviour; ``docs/concepts.md``, Exclusions.)

Per task (choices the paper leaves open, and why):

- ``rec-movie`` (MovieLens 1M; paper 3,884 candidates / 4,167 queries). Pool = rule 5: the 3,883
  movies of ``movies.dat`` (3,706 of them rated); 3,884 is that plus RecBole's padding id.
  Queries: one test query per user (6,040); the paper's 4,167 is not derivable from the public
  files (every ML-1M user has >= 20 ratings) and is not imitated. Inputs: ``ratings.dat`` +
  ``movies.dat`` (``::``-separated; movies.dat is latin-1: it is decoded as UTF-8 when it is
  valid UTF-8, else as latin-1) or RecBole ``ml-1m.inter/.item``. Both give the same task: a
  movie's title is ``Title (Year)`` and its text ``Title (Year). Genres: A B`` (the genres'
  ``|`` become spaces, as in RecBole's ``genre`` column).
- ``rec-toy`` (Amazon Toys and Games 2014 5-core; paper 11,925 / 19,413). Pool = the items that
  occur in the interactions (11,924; the paper's 11,925 and 19,413 are RecBole's counts with
  one padding row each: 11,924 items, 19,412 users). The meta file's other ~324k items are
  dropped: they were never interacted with in this data. See ``rbench.tasks.families.amazon`` for the
  text of an item. RecBole's ``Amazon_Toys_and_Games.inter`` is the full ratings file, not the
  5-core: with it set ``task.k_core=5`` (RecBole-style iterative user/item filtering).
- ``rec-clothing`` (Amazon Reviews 2023 Clothing_Shoes_and_Jewelry; paper 6,805,462 / 185,925).
  Pool = items in the interactions (keyed by ``parent_asin``); item texts stay in an arrow
  string column above ``rbench.tasks.text_columns.ARROW_MIN_ROWS`` items. Reading is streamed (``rbench.tasks.families.amazon``).
  The paper's query count is not derivable from the files either; ``task.min_interactions`` and
  ``task.max_train_per_user`` bound the query sets. Every training window costs 8 bytes per
  history item plus its id string; over the 66M-review file that is several GB (not measured
  here), and ``max_train_per_user`` is the knob for smaller machines.
- ``rec-music`` (small scenario; paper 20 candidates / 12,483 queries). Same sequences and
  targets; each query (train, valid, test) gets its own list ``Queries.candidates`` of
  ``negatives + 1`` (20) pool indices: the true next item and ``negatives`` items drawn by rule 8
  (uniformly without replacement from the pool without the positive; ``negatives_from=unseen``:
  only among items the user never interacted with over the whole kept sequence), the positive at
  a uniformly drawn position. Repeat targets stay (no exclusion: the repeat-aware protocol of
  rule 6). Pool = items in the interactions (negatives are items someone
  consumed, so popularity alone cannot spot never-consumed fillers). Draws use one generator per
  split seeded from (run seed, "negatives/<split>"), so training options never change the test
  lists. No exclusion (each query ranks only its own list). Inputs: Amazon CDs and Vinyl
  (2014/2018 5-core json.gz + meta) or any RecBole atomic dataset (one ``*.inter``, optional
  ``.item`` with the same stem; its ``name`` column is the title for Last.fm).
- ``video-games`` and ``software`` (Amazon Reviews 2023 ``Video_Games`` / ``Software``; paper
  25,600 / 94,800 and 17,600 / 146,400). Not tasks of the paper's Table 2 (``paper_row`` None):
  the paper trains on Rec-Toy and tests on them zero-shot (``--variant from-rec-toy``,
  ``rbench.tasks.pools``). The paper's counts are those of the McAuley lab's 5-core subsets of the
  two categories (users = queries, items = candidates), while ``rbench data download`` fetches
  the raw review files (``<cat>.jsonl.gz`` + ``meta_<cat>.jsonl.gz``, as for rec-clothing): so
  these tasks default to ``task.k_core=5`` (``FiveCoreOptions``; iterative, users and items,
  after the (user, item, timestamp) de-duplication). The pool is the items left by the 5-core,
  and every 5-core user has the 3 interactions leave-one-out needs, so each user is one test
  query. ``task.k_core=0`` reads the raw files unfiltered. Not yet checked on the real files:
  the counts rbench gets may differ a little from the paper's rounded ones (how the published
  subsets treat repeated reviews of an item is not documented); ``TaskData.info`` and the
  RunRecord's ``pool_size``/``n_queries`` say what was read.
- Amazon-derived pools (toy, clothing, music, video games, software) are the items in the
  interactions after de-duplication and ``k_core``, before the ``min_interactions`` user filter
  (that filter is an evaluation requirement, not a change of the dataset). MovieLens and
  ml-100k keep rule 5.
- Where several input layouts are present, the original release files win over RecBole atomic
  files; ``data_status`` names the layout it will read.
- ``TaskData.info`` reports what reading did: rows read, duplicates dropped, users dropped for
  too few interactions, items without metadata.
"""

from rbench.tasks.families.recsys.family import (
    EMBEDDED,
    FAMILY,
    EmbeddedFamily,
    RecommendationFamily,
    find_inputs,
    load_atomic_dir,
    recbole_example_dir,
)
from rbench.tasks.families.recsys.protocol import (
    FiveCoreOptions,
    SequentialOptions,
    SmallListOptions,
    UserItems,
    build_sequential_task,
    sample_negatives,
)
from rbench.tasks.families.recsys.readers import interactions_from_atomic, items_from_atomic, read_atomic
from rbench.tasks.families.recsys.specs import SPECS, Layout, RecSpec, amazon14_files, amazon14_layout

__all__ = [
    "EMBEDDED", "FAMILY", "SPECS", "EmbeddedFamily", "FiveCoreOptions", "Layout", "RecSpec", "RecommendationFamily",
    "SequentialOptions", "SmallListOptions", "UserItems", "amazon14_files", "amazon14_layout", "build_sequential_task",
    "find_inputs", "interactions_from_atomic", "items_from_atomic", "load_atomic_dir", "read_atomic",
    "recbole_example_dir", "sample_negatives",
]
