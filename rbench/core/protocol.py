"""The evaluation protocol: one version number for everything that turns scores into a record.

A RunRecord's numbers depend on the ranker (its name, version, config and source digest, all in
the record) and on rbench's own code that builds the task, scores the pool, breaks ties and
computes the measures. ``rbench.__version__`` follows releases; it says nothing about whether two
records were computed the same way. ``PROTOCOL_VERSION`` does: it is stored in every record
(``RunRecord.protocol``), ``--overwrite only-missing`` reuses a record only under the same
protocol, and ``rbench table`` marks (and leaves out of its comparisons) rows computed under
another one. Records written before the protocol existed read as protocol 0.

Why a stored digest: a version number that a developer must remember to bump goes stale (the
0.1.0 of 141 commits did). ``PROTOCOL_CODE`` lists the code the numbers depend on;
``code_digest()`` hashes it with comments and docstrings removed (the AST), and
``tests/core/test_protocol.py`` fails when the digest is not one ``KNOWN_DIGESTS`` lists for the
current version. A change that moves numbers bumps ``PROTOCOL_VERSION`` (the committed records
are then regenerated); a change that provably moves none (a rename, a refactor with the suite and
``benchmarks/`` unchanged) adds its digest to the current version's tuple, in the same commit,
where a reviewer sees it. ``python -m rbench.core.protocol`` prints the digest.

The AST dump differs between Python minor versions, so digests are kept per minor version
(``DIGEST_PYTHON``); the test runs on that one.
"""

from __future__ import annotations

from rbench.core.hashing import ast_digest

PROTOCOL_VERSION = 1

# module, or module:function, or package (its own *.py, not its subpackages) — the code a record's
# numbers depend on: task building (api, the task layer and its families, text columns), pool
# variants and the test sample, scoring and its kernels, ties and measures, the exported run file
# and two-stage reranking. Not the task store (a cache keyed on this code) or the downloads.
PROTOCOL_CODE: tuple[str, ...] = (
    "rbench.api", "rbench.tasks.text_columns", "rbench.tasks.family", "rbench.tasks.building", "rbench.tasks.registry",
    "rbench.tasks.families", "rbench.tasks.families.recsys", "rbench.tasks.pools", "rbench.tasks.fit_positives",
    "rbench.run.runner:subsample", "rbench.run.runner:apply_variant",
    "rbench.engine.scan", "rbench.engine.scorers", "rbench.engine.torch_scan", "rbench.engine.fused", "rbench.engine.kernels.fused", "rbench.engine.kernels.gemm",
    "rbench.engine.blas_tiles", "rbench.engine.kernels.tiles",
    "rbench.engine.sharded", "rbench.engine.metrics", "rbench.core.measures", "rbench.engine.runfile",
    "rbench.run.rerank", "rbench.run.strategies",
)

DIGEST_PYTHON = "3.11"
KNOWN_DIGESTS: dict[int, tuple[str, ...]] = {
    1: ("bb31a7b0eda6c6473e173c4818ec743c93c9c4c17d942bee4ef361c467bfaaff",
        # rerank reads a stage-1 run file only if it is a regular file; imports clear stale
        # temporaries: no number moves
        "c0899181783d0bc02d510935b415398c9b342132cd415dca251c7697ae83f452",
        # imports refuse lone surrogates and splits that leave no train or test query: what
        # loads is what loaded before
        "bce542e6a3e41d725f972f2710e5fe857b7a6fe26fc82fc29e279d743f6e9aa0",
        # package layout (issue 30): modules moved into rbench/{core,tasks,engine,results,run,cli},
        # PROTOCOL_CODE names them one by one: no number moves
        "a198035b75bda748538cfe9bf1a68d15e9a864d51fb46fa1fdd1e9caa3df51bd",
        # both of the above merged
        "a50e13d30a20495a782a5de109c2e6251b858d9543ad769edb782d6112188592",
        # type annotations of the contract (mypy --strict): no number moves
        "466f6ef3e23724760a7f642df78ceb280508b3b714309f36d341a6d88e5e474d",
        # the data-source note is read by folder alone: no number moves
        "da45f88935196a423ac82d0fe9c2f5ff744a321dc9653ce84d0436814ce82ee8",
        # issue 30, second part: recsys.py split into recsys/ and the scorers into
        # engine/scorers (both now listed), kit/columns renamed building/text_columns, run
        # settings' defaults read from rbench.core.settings, one short_hash: no number moves
        # (the suite; bm25 and dense on ml-100k, pop on rec-music and bm25 on msmarco re-run
        # with benchmarks/rerun_records.py gave the committed records' metrics, per-query files
        # and run files byte for byte)
        "3c7134c4753d8adf07ee302dcf30f3b38496da7e907a860b2a612cc5a3b38b18",
        # the torch scan (--scan cuda|torch, rbench.engine.torch_scan) joins the protocol's code;
        # the default scan is unchanged; RunContext.cache_dir typed: no number moves
        "bdf605983263091c2a9088f26c4b7e237f79383c8c9f0cdf28d222e057538343",
        # scans below fused.SMALL_SCAN scores run on the numpy passes (nothing compiled on a fresh
        # install); both count ranks exactly: bm25 and dense on ml-100k, pop on rec-music and bm25
        # on msmarco re-run gave the committed metrics, per-query files and run files byte for byte
        "91c8bf8c2f20c2223e070bde53a945b4a468159c58a5bbbe77081aa5c100a2e8",
        # the torch scan checks query vectors with the engine's own check (scorers): same values
        "19f4a20708745f5dc8127c33ce5989188246a20cd3b090521a175ea43c3121c2",
        # a malformed RBENCH_FUSED_MIN_SCORES is refused in one line (it was ignored): no number moves
        "b5b3bbb7543fd34ec087fe0a2d86d552a69904b5557ba7bb094765afbb4e0482",
        # measures by name (issue 33): rbench.core.measures parses ir_measures' syntax and joins the
        # protocol's code, metrics.per_query computes P, AP, Success and rel thresholds; the default
        # measures' arithmetic is unchanged (bm25 on ml-100k re-run gave the committed metrics,
        # per-query file and run file byte for byte): no number moves
        "192d35224d7782e1dadaec14d205792c307d54c5b958c164cad3ae78c46be2e9",
        # issue 33 merged: measures by name, BEIR/ir_datasets/HF imports, task.split=test for
        # imported tasks and TaskFamily.test_only: bm25 and dense on ml-100k, pop on rec-music and
        # bm25 on msmarco re-run (benchmarks/rerun_records.py) gave the committed metrics,
        # per-query files, run files, task fingerprints and config hashes byte for byte
        "cabe9b6439e458891d022b688347bed81faffc62976e9708a927e130944401ef",
        # routing takes task.split=test (left out of the fingerprint at its default): pop on
        # routing-balance re-run gave the committed metrics, per-query and run files, fingerprint
        "bd77d273280c27ca619a9457b409f4bde8eadf0aa864c164f9adc2f2033f3685",
        # issue 40 item 2: recommendation exclusions are the whole past (never "past minus the
        # target"; a repeat target's valid/test query is left out) and rec-music's negatives are
        # drawn from the whole pool. Numbers move only where the task itself changes, and there
        # its fingerprint moves with it (dropped queries change the positives it hashes;
        # SmallListOptions' repr holds negatives_from), so an old record is never reused or
        # compared with a new one; ml-100k (one rating per user-item) keeps its fingerprint and
        # metrics (pop re-run: identical); the rec-music records re-run (TIGER's removed until re-run)
        "f30a648f67494888c496b6b1101554ca6fd4e5b4eee3db1946db5327d8e084b3",
        # issues 40-42 merged: what a ranker returns is copied into engine-owned arrays before it is
        # read (same values), the stage-1 cache moved to the harness's own folder, TaskSpec's
        # pool_from_positives and task.distractors (0 by default: fingerprints unchanged), option
        # ranges, one text reader for run files and qrels, the run width set on a copy of the
        # plan: no number moves (rbench verify results/: every record of this data OK; TIGER on
        # rec-music re-run under item 2's negatives)
        "a7971ab14a8ba7e288bdee4ada72b2d8283dfc4fd7abc1534cba48ea733c38ce",
        # moved, no number moves (issue 43 items 1-2, the trees at 42ca160 and 7195a28): two-stage reranking
        # moved to rbench/run (rerank, strategies: PROTOCOL_CODE names them), evaluate, torch_scan,
        # runfile and scorers split into functions of at most 60 lines, the same arithmetic in the
        # same order; pop, bm25 on ml-100k and bm25 on routing-balance re-run byte-identical
        # (metrics, per-query and run files), rbench verify results/: 88 OK
        "bb6826e91624f86f8092f3d05598673f71ee51cd3cbe30f6b92815bd3fc1f8d2",
        "cd416a05fd86fdd9e19aa31b7ca5bc8158f2d337e5799486bd5fa4b9e4011201",
        # issue 40, pools built from positives (rbench.tasks.fit_positives joins the protocol's
        # code): the train/valid positives fit is handed are excluded from every test ranking of
        # esci, msmarco and imported corpora built from positives, a test query whose answer is one
        # is left out; numbers move only where the test set changes, and its fingerprint moves with
        # it (task.exclude_fit_positives=false keeps the old task and fingerprint). The variant
        # fingerprint's tag is "rbench.pools v1" again (issue 30 had renamed it): the nine
        # ml-100k~mixed/~scaled records verify; the committed DL19 records are zero-shot (nothing
        # handed to fit) and do not move: rbench verify results/: 88 OK, 0 SKIP
        "244fd7d3d6310f7b9183161c12f996edafbf850f1443755e41955f5ee07a9c6c",
        # the tree at d3b4507: issue 40's rule keeps a multi-answer test query's answers that are
        # no fit positive (one-answer tasks, esci and msmarco by default, unchanged), merged with
        # issue 43's moves; rbench verify results/: every record OK
        "2b2e874191f7a1a6c5305c3df5d75046538fae37dc7e8bc4a746dcd15595bf78",
        # issue 44: the dense fused scan on BLAS tiles (rbench.engine.blas_tiles and kernels.tiles join
        # the protocol's code), certified against the own GEMM's bits: ranks, ties and top-k equal
        # bit for bit
        # (tests/engine/test_blas_tiles.py, the tile GEMM moved anywhere within the bound): no
        # number moves
        "30e1b47f3555c67ac1d60e83ab7b2a640c27b2d015402674fa2771f1c91b7d58",
        # the two gemm_scan warm-ups share one helper; imports sorted after the audit/readback
        # moves: no number moves
        "e47d68b3a430ab073f30de64210bab111fe00f2fca44b7f53b9655c2f3301d73",
        # reason: issue 43, names that collide: rbench.engine.evaluate.evaluate renamed
        # rbench.engine.scan.scan (torch_scan's scan_dense_torch, distributed's scan_sharded), the
        # same code under the new names (no number moves)
        "675137bfff16037e0e2a5581d74bc29a8ea4a5e5d962c94f788d8376398e3485",
        # reason: issue 44, compile time: the kernels' threads are Python threads over row blocks
        # (no numba parallel=True), finish by a stable numpy sort with the kernels' tie rule,
        # compile seconds moved out of score_s/fit_s into compile_s (no number moves)
        "fda68d73a0416176691f3864c0c8867d176f0499dfcc021b6232e66277e0bf02",
        # reason: issue 44, compile time: the scores' row visit written in scan, one fp64
        # kth_largest, bit-cast and load intrinsics for min/max/view, warm-ups with the cyclic GC
        # paused; the same comparisons and tie rule (tests/engine; no number moves)
        "88105bb476eaab3a9e53f3d5227c753027aba86ae799e4b4104024248c4bb66b",
        # reason: issue 44, CPU scan: the BLAS-tile scan runs a one-thread GEMM per kernel thread,
        # one counting pass a row, band members recomputed together at a part's end, the pending
        # top-k cut by counting bisection; the same decisions, bit-identical to rbench's own GEMM
        # (tests/engine/test_blas_tiles.py; no number moves)
        "c848a4d73f87cb6204156d98fcac2ce69deca8e860d56022373ba1c3d24aba58",
        # reason: issue 44, the dense road by the CPU's vectors (RBENCH_GEMM=auto: rbench's own
        # GEMM fused with the scan without AVX-512), its blocks of 144 rows x 32,768 candidates and
        # its threads rowblocks', the GEMM block and its scan two kernels; the same scores and
        # decisions, bit for bit; the tile kernels' unused up32 gone (no number moves)
        "de630eb46cba0b891fd18ac3dca51e5eba73b72b8168fdb7a85ffd76d69c5d1c"),
}


def code_digest() -> str:
    """sha256 over the AST (docstrings removed) of every entry of ``PROTOCOL_CODE``."""
    return ast_digest(PROTOCOL_CODE, "rbench.core.protocol.PROTOCOL_CODE")


if __name__ == "__main__":
    import sys

    print(f"protocol {PROTOCOL_VERSION}, Python {sys.version_info[0]}.{sys.version_info[1]}: {code_digest()}")
