"""Issue 29: how well the test suite catches realistic bugs (mutation testing).

Each mutant below is a small, plausible slip in one of rbench's modules (an off-by-one in a
cutoff, a dropped key field, a wrong split, a sign flip ...). Planted *alone*, its module's test
files are run (pytest -x); the mutant is caught when a test fails, survived when all pass, and
the file is put back. Then every survivor is run again with ``tests/reliability/test_mutants.py`` added (the
tests written for the survivors): the table's "caught before" / "caught after" columns.

From the repository root (nothing in the working tree is touched: a temporary ``git worktree``
of HEAD is made, the working tree's changed and untracked files copied into it, and removed at
the end; pytest runs take ``flock /tmp/heavy.lock`` unless MUTANTS_NO_FLOCK=1):

    python benchmarks/mutants.py                 # every mutant -> benchmarks/results/mutants.md
    python benchmarks/mutants.py --only m1,e4    # some of them
    python benchmarks/mutants.py --root DIR      # in an existing tree instead (its files are
                                                 # mutated and put back one at a time)

The first pytest run in a fresh worktree compiles numba's kernels (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

M_T = ["tests/engine/test_metrics.py", "tests/pins/test_pins.py", "tests/engine/test_runfiles.py", "tests/engine/test_engine_topk.py",
       "tests/reliability/test_planted_slips.py"]
E_T = ["tests/engine/test_engine_topk.py", "tests/engine/test_metrics.py", "tests/engine/test_fused.py", "tests/pins/test_pins.py",
       "tests/reliability/test_planted_slips.py", "tests/engine/test_runfiles.py", "tests/engine/test_rerank.py", "tests/tasks/test_pool_order.py"]
R_T = ["tests/engine/test_rerank.py", "tests/reliability/test_planted_slips.py", "tests/engine/test_runfiles.py"]
T_T = ["tests/tasks/test_tasks_recsys.py", "tests/tasks/test_tasks_ml100k.py", "tests/tasks/test_tasks_imported.py",
       "tests/tasks/test_tasks_passages.py", "tests/tasks/test_pool_order.py", "tests/reliability/test_planted_slips.py"]
P_T = ["tests/tasks/test_pools.py", "tests/tasks/test_pool_order.py", "tests/reliability/test_planted_slips.py", "tests/engine/test_rerank.py"]
S_T = ["tests/run/test_runner.py", "tests/reliability/test_planted_slips.py", "tests/results/test_leaderboard.py"]
L_T = ["tests/results/test_leaderboard.py", "tests/results/test_significance.py", "tests/reliability/test_planted_slips.py",
       "tests/reliability/test_reliability_tables.py"]

I_T = ["tests/engine/test_isolation_spy.py"]

# (id, module, file, description, old, new, test files)
MUTANTS = [
    # ---------------------------------------------------------------- metrics
    ("m1", "metrics", "rbench/engine/metrics.py", "nDCG discount log2(rank+2) instead of log2(rank+1)",
     "g[inside] / np.log2(r[inside] + 1.0)", "g[inside] / np.log2(r[inside] + 2.0)", M_T),
    ("m2", "metrics", "rbench/engine/metrics.py", "nDCG@10 cutoff r < k (computes @9)",
     "inside = r <= k", "inside = r < k", M_T),
    ("m3", "metrics", "rbench/engine/metrics.py", "ideal DCG over the grades in ascending order (wrong ideal list)",
     "np.sort(grades[i])[::-1][:k]", "np.sort(grades[i])[:k]", M_T),
    ("m4", "metrics", "rbench/engine/metrics.py", "RR@k cutoff best < k (RR@100 drops rank 100)",
     "np.where(best <= (np.inf", "np.where(best < (np.inf", M_T),
    ("m5", "metrics", "rbench/engine/metrics.py", "R@k counts r < k (R@10 computes @9)",
     "(r <= k).astype(np.float64)", "(r < k).astype(np.float64)", M_T),
    ("m6", "metrics", "rbench/engine/metrics.py", "mean over queries with a non-zero value only (trec_eval without -c)",
     "float(np.mean(v)) if len(v)", "float(np.mean(v[v > 0])) if (np.asarray(v) > 0).any()", M_T),
    ("m7", "metrics", "rbench/engine/runfile.py", "run_width keeps only depth candidates (no room for positives)",
     "return depth + min(int(lengths.max()) if len(lengths) else 0, depth)", "return depth", M_T),
    ("m8", "metrics", "rbench/engine/runfile.py", "run file: positive placed only when rank < depth (off by one)",
     "placed = (r >= 1) & (r <= depth)", "placed = (r >= 1) & (r < depth)", M_T),
    ("m9", "metrics", "rbench/engine/runfile.py", "run file lines: ties by descending pool index",
     "order = np.lexsort((np.where(valid, idx, np.iinfo(np.int64).max)",
     "order = np.lexsort((np.where(valid, -idx, np.iinfo(np.int64).max)", M_T),
    # ---------------------------------------------------------------- engine
    # ---------------------------------------------------------------- isolation (issue 40)
    ("i1", "engine", "rbench/engine/scan.py", "the consistency re-check hands the labelled query, marked label-free",
     "sub = batch.slice(r, r + 1).unlabelled()", "sub = batch.slice(r, r + 1); sub.labelled = False", I_T),
    ("i2", "engine", "rbench/api.py", "the label-free view keeps meta (routing outcomes)",
     "meta={}, labelled=False)", "meta=self.meta, labelled=False)", I_T),
    ("i3", "engine", "rbench/engine/scan.py", "the engine keeps (and writes -inf into) the array a ranker returned",
     'owned.plain_copy(scores, ranker_name, "score", expected)',
     'owned.real(np.asarray(scores), ranker_name, "score", expected)', I_T),
    ("i4", "engine", "rbench/api.py", "fit is handed the valid split the harness keeps",
     "valid=self.valid.private_copy()", "valid=self.valid", I_T),
    ("e1", "engine", "rbench/engine/scan.py", "optimistic ties: rank ignores candidates tied with the positive",
     "1 + self.higher + self.equal + self.before)", "1 + self.higher + self.before)", E_T),
    ("e2", "engine", "rbench/engine/scan.py", "shared-pool exclusions: chunk start excluded from the mask (ev > a)",
     "inside = (ev >= a) & (ev < a + n_cols)", "inside = (ev > a) & (ev < a + n_cols)", E_T),
    ("e3", "engine", "rbench/engine/scan.py", "tied positives ordered by descending grade (optimistic nDCG)",
     "((grade[:, None, :] < grade[:, :, None])", "((grade[:, None, :] > grade[:, :, None])", E_T),
    ("e4", "engine", "rbench/engine/scan.py", "many-positive count: ties counted as higher (C - lo)",
     "higher[i] += C - hi", "higher[i] += C - lo", E_T),
    ("e5", "engine", "rbench/engine/scan.py", "shard merge sums pos_before over shards (double counts)",
     "1 + higher + equal + first.pos_before)", "1 + higher + equal + np.sum([p.pos_before for p in parts], axis=0))",
     E_T + ["tests/engine/test_distributed.py"]),
    ("e6", "engine", "rbench/engine/scan.py", "per-query list exclusion mask dropped",
     "s[r, np.isin(cand[r], excl[r])] = -np.inf", "pass", E_T + ["tests/tasks/test_tasks_recsys.py"]),
    ("e7", "engine", "rbench/engine/scan.py", "fused scan: ranked count adds the whole chunk even with exclusions",
     "        if not excluded_here:\n            b.finite += C", "        if True:\n            b.finite += C", E_T),
    ("e8", "engine", "rbench/engine/scan.py", "a zero grade passes validation (grades.min() >= 0)",
     "np.isfinite(grades).all() and grades.min() > 0 and", "np.isfinite(grades).all() and grades.min() >= 0 and",
     E_T + ["tests/reliability/test_reliability_data.py", "tests/reliability/test_reliability_hostile.py"]),
    # ---------------------------------------------------------------- rerank
    ("r1", "rerank", "rbench/run/rerank.py", "-dropped metrics: positives below depth placed at depth+1, not dropped",
     "dropped_ranks = np.where(inside, final, np.inf)", "dropped_ranks = np.where(inside, final, rp.depth + 1)", R_T),
    ("r2", "rerank", "rbench/run/rerank.py", "first_stage_recall@depth as success (any positive) instead of recall",
     "recall = float(np.mean(hits / np.maximum(lengths, 1)))", "recall = float(np.mean(hits > 0))", R_T),
    ("r3", "rerank", "rbench/run/rerank.py", "run-file stage 1: missing positives one position too high",
     "ranks[flat[order]] = n_ranked[i] - len(flat) + 1 + np.arange(len(flat))",
     "ranks[flat[order]] = n_ranked[i] - len(flat) + np.arange(len(flat))", R_T),
    ("r4", "rerank", "rbench/run/rerank.py", "run-file stage 1 keeps excluded documents (mask dropped)",
     "                if d not in excluded[i]:\n", "                if True:\n", R_T),
    ("r5", "rerank", "rbench/run/rerank.py", "stage-1 cache key without the depth",
     '"variant": variant, "depth": depth, "seed": seed', '"variant": variant, "seed": seed', R_T),
    ("r6", "rerank", "rbench/run/rerank.py", "stage-1 cache key without the evaluated queries",
     '               "queries": _queries_digest(data.test),\n', "", R_T),
    ("r7", "rerank", "rbench/run/rerank.py", "stage-1 lists drop pool index 0 (keep = idx > 0)",
     "    keep = idx >= 0\n    offsets", "    keep = idx > 0\n    offsets", R_T),
    # ---------------------------------------------------------------- tasks
    ("t1", "tasks", "rbench/tasks/building.py", "8:1:1 split truncates instead of rounding round(n/10)",
     "k = int(np.floor(len(group) * 0.1 + 0.5))", "k = int(len(group) * 0.1)", T_T),
    ("t2", "tasks", "rbench/tasks/families/recsys/protocol.py", "valid target = the test target (n-1 instead of n-2)",
     "valid = make(rows_all, n - 2,", "valid = make(rows_all, n - 1,", T_T),
    ("t3", "tasks", "rbench/tasks/families/recsys/protocol.py", "training windows include the validation target (n-2 windows)",
     "n_train = np.maximum(n - 3, 0)", "n_train = np.maximum(n - 2, 0)", T_T),
    ("t4", "tasks", "rbench/tasks/families/recsys/protocol.py", "exclusions no longer keep the target itself out of the mask",
     "    keep &= v != drop[q]\n", "", T_T),
    ("t5", "tasks", "rbench/tasks/families/recsys/protocol.py", "duplicate (user, item, ts) rows not dropped (dedup dropped)",
     "return np.sort(order[~dup])", "return np.sort(order)", T_T),
    ("t6", "tasks", "rbench/tasks/families/recsys/protocol.py", "sampled negatives ignore the run seed",
     'seeded_rng(seed, f"negatives/{split_name}")', 'seeded_rng(0, f"negatives/{split_name}")', T_T),
    ("t7", "tasks", "rbench/tasks/families/recsys/protocol.py", "history window one item short (H-1 items)",
     "lo = np.maximum(targets - history_len, 0)", "lo = np.maximum(targets - history_len + 1, 0)", T_T),
    ("t8", "tasks", "rbench/tasks/pools.py", "scaled:N donor draw ignores the run seed",
     '[int(seed) & 0xFFFFFFFF, *_seed_words("scaled-draw", n)]', '[*_seed_words("scaled-draw", n)]', P_T),
    ("t9", "tasks", "rbench/tasks/pools.py", "transfer keeps the target task's valid split (wrong split)",
     "train=source.train, valid=source.valid,", "train=source.train, valid=data.valid,", P_T + ["tests/run/test_runner.py"]),
    # ---------------------------------------------------------------- results / reuse
    ("s1", "results", "rbench/run/runner.py", "only-missing reuse ignores the task fingerprint",
     "same = (rec.task_fingerprint == fingerprint and rec.protocol", "same = (rec.protocol", S_T),
    ("s2", "results", "rbench/run/runner.py", "only-missing reuse ignores the evaluation protocol (before 0.2: the rbench version)",
     "rec.protocol == PROTOCOL_VERSION\n            and _same_ranker",
     "True\n            and _same_ranker", S_T),
    ("s3", "results", "rbench/run/runner.py", "_same_ranker ignores the ranker version",
     'return (str(recorded.get("version", "")) == str(getattr(ranker, "version", ""))\n            and',
     "return (True\n            and", S_T),
    ("s4", "results", "rbench/run/runner.py", "_same_ranker ignores the source digest",
     'and recorded.get("source_sha256") == source_digest(type(ranker))', "and True", S_T),
    ("s5", "results", "rbench/run/runner.py", "_same_ranker ignores the effective config",
     '\n            and _canonical_json(plain_config(recorded.get("config") or {})) == _canonical_json(plain_config(ranker.config)))',
     ")", S_T),
    ("s6", "results", "rbench/run/runner.py", "only-missing reuse ignores the run options diff",
     'and _canonical_json(rec.run_options.get("non_default") or {}) == _canonical_json(diff)', "and True", S_T),
    ("s7", "results", "rbench/run/runner.py", "only-missing keeps a record without the run file this run asks for",
     "and (bool(rec.run_file) or plan.topk == 0)", "and True", S_T),
    ("s8", "results", "rbench/results/record.py", "per-query file read without its sha256 check",
     "if record.per_query_sha256 and hashlib.sha256(raw)", "if False and hashlib.sha256(raw)",
     S_T + ["tests/reliability/test_reliability_tables.py", "tests/reliability/test_reliability_hostile.py"]),
    # ---------------------------------------------------------------- leaderboard / significance
    ("l1", "leaderboard", "rbench/results/leaderboard.py", "best/second marks on the lowest values",
     "for r in shown}, reverse=True)", "for r in shown})", L_T),
    ("l2", "leaderboard", "rbench/results/leaderboard.py", "significance against the worst row instead of the best",
     "best = max(rows, key=lambda r: self.cells[(r, task)][metric])",
     "best = min(rows, key=lambda r: self.cells[(r, task)][metric])", L_T),
    ("l3", "leaderboard", "rbench/results/leaderboard.py", "a cell with no test gets a star (default p 0)",
     "if sig.get((r, t, m), 1.0) < lb.alpha:", "if sig.get((r, t, m), 0.0) < lb.alpha:", L_T),
    ("l4", "leaderboard", "rbench/results/leaderboard.py", "duplicate cells keep the oldest record",
     "return prev_created >= rec.created", "return prev_created <= rec.created", L_T),
    ("l5", "leaderboard", "rbench/results/leaderboard.py", "variant delta relative to the variant's MRR, not the original's",
     '(metrics["RR"] - base.metrics["RR"]) / base.metrics["RR"]', '(metrics["RR"] - base.metrics["RR"]) / metrics["RR"]',
     L_T),
    ("l6", "leaderboard", "rbench/results/significance.py", "one-sided statistic (sign of the mean kept)",
     "observed = abs(d.mean())", "observed = d.mean()", L_T),
    ("l7", "leaderboard", "rbench/results/significance.py", "p-value without the +1 correction",
     "return (extreme + 1) / (n_resamples + 1)", "return extreme / n_resamples", L_T),
    ("l8", "leaderboard", "rbench/results/significance.py", "resampled sums compared with the observed mean",
     "means = np.abs(signs @ d) / len(d)", "means = np.abs(signs @ d)", L_T),
    # ---------------------------------------------------------------- rankers' model selection
    ("k1", "rankers", "rankers/routers.py", "kNN router: ties in k go to the larger k",
     'key=lambda p: (p["valid_MRR"], p["valid_objective"], -p["k"]))',
     'key=lambda p: (p["valid_MRR"], p["valid_objective"], p["k"]))', ["tests/rankers/test_routers.py", "tests/reliability/test_planted_slips.py"]),
    ("k2", "rankers", "rankers/routers.py", "kNN router: 'all training queries' left out of the k grid",
     "grid = sorted({min(k, n) for k in self.cfg.k_grid} | {n})", "grid = sorted({min(k, n) for k in self.cfg.k_grid})",
     ["tests/rankers/test_routers.py", "tests/reliability/test_planted_slips.py"]),
    ("k3", "rankers", "rankers/tiger/train.py", "TIGER: a later evaluation that ties the best replaces it",
     "if v > res.best_valid:", "if v >= res.best_valid:", ["tests/rankers/test_tiger.py", "tests/reliability/test_planted_slips.py"]),
    ("k4", "rankers", "rankers/tiger/ranker.py", "TIGER: validation subsample ignores the seed",
     "np.random.default_rng(self.seed).choice(len(valid)", "np.random.default_rng(0).choice(len(valid)",
     ["tests/rankers/test_tiger.py", "tests/reliability/test_planted_slips.py"]),
    ("k5", "rankers", "rankers/lranker/train.py", "LRanker: a later evaluation that ties the best replaces it",
     "if report.best_valid_mrr is None or mrr > report.best_valid_mrr:",
     "if report.best_valid_mrr is None or mrr >= report.best_valid_mrr:", ["tests/rankers/test_lranker.py"]),
    ("k6", "rankers", "rankers/lranker/train.py", "LRanker: the best checkpoint is never restored",
     "if best_state is not None and report.best_step != report.steps:", "if False:", ["tests/rankers/test_lranker.py"]),
    ("k7", "rankers", "rankers/lranker/scaling.py", "width/depth selection: a significantly worse setting wins",
     'win = vs["margin"] > 0 and vs["p"] < alpha', 'win = vs["p"] < alpha',
     ["tests/rankers/test_lranker_scaling.py", "tests/rankers/test_lranker.py"]),
    ("k8", "rankers", "rankers/recbole.py", "RecBole early stopping on the smallest valid metric",
     '"valid_metric_bigger": True,', '"valid_metric_bigger": False,', ["tests/rankers/test_recbole.py"]),
    ("k9", "rankers", "rankers/recbole.py", "RecBole general-model training pairs not de-duplicated",
     '"i": np.concatenate(parts_i)}).drop_duplicates()', '"i": np.concatenate(parts_i)})', ["tests/rankers/test_recbole.py"]),
]

MODULE_ORDER = ["engine", "rerank", "metrics", "tasks", "results", "leaderboard", "rankers"]


def run_one(root: Path, mid: str, file: str, old: str, new: str, tests: list[str], extra: list[str],
            timeout: int) -> tuple[str, str, float]:
    path = root / file
    original = path.read_text()
    n = original.count(old)
    if n != 1:
        return "error", f"old text found {n} times", 0.0
    files = [t for t in dict.fromkeys([*tests, *extra]) if (root / t).exists()]
    if not files:
        return "error", "no test file to run", 0.0
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", *files]
    if os.environ.get("MUTANTS_NO_FLOCK") != "1":
        cmd = ["flock", "/tmp/heavy.lock", *cmd]
    t0 = time.time()
    try:
        path.write_text(original.replace(old, new))
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            return "timeout", "", time.time() - t0
    finally:
        path.write_text(original)
    dt = time.time() - t0
    if rc == 0:
        return "survived", "", dt
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, flags=re.M)
    if rc == 1 and failed:
        return "caught", failed[0].split(" ")[0], dt
    return "caught" if rc == 1 else f"rc{rc}", (failed[0] if failed else out.strip().splitlines()[-1:][0][:120]), dt


def table(results: list[dict], before: dict[str, str] | None = None) -> str:
    lines = ["| module | planted | caught before new tests | caught after |", "|---|---|---|---|"]
    tot = [0, 0, 0]
    for mod in MODULE_ORDER:
        rows = [r for r in results if r["module"] == mod]
        if not rows:
            continue
        after = sum(r["status"] == "caught" for r in rows)
        bef = sum((before or {}).get(r["id"], r["status"]) == "caught" for r in rows)
        lines.append(f"| {mod} | {len(rows)} | {bef} | {after} |")
        tot = [tot[0] + len(rows), tot[1] + bef, tot[2] + after]
    lines.append(f"| **total** | {tot[0]} | {tot[1]} ({100 * tot[1] / max(tot[0], 1):.0f}%) | "
                 f"{tot[2]} ({100 * tot[2] / max(tot[0], 1):.0f}%) |")
    return "\n".join(lines)


def _worktree(repo: Path) -> Path:
    """A detached worktree of HEAD holding the working tree's changed and untracked files."""
    tmp = Path(tempfile.mkdtemp(prefix="rbench-mutants-")) / "tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tmp), "HEAD"], check=True,
                   capture_output=True)
    changed = subprocess.run(["git", "-C", str(repo), "ls-files", "-m", "-o", "--exclude-standard"], check=True,
                             capture_output=True, text=True).stdout.splitlines()
    for rel in changed:
        src = repo / rel
        if src.is_file():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tmp / rel)
    return tmp


def run_all(root: Path, only: set[str], extra: list[str], only_extra: bool, timeout: int,
            new_tests: str | None) -> list[dict]:
    results = []
    for mid, module, file, desc, old, new, tests in MUTANTS:
        if only and mid not in only:
            continue
        status, by, dt = run_one(root, mid, file, old, new, [] if only_extra else tests, extra, timeout)
        row = {"id": mid, "module": module, "file": file, "mutation": desc, "before": status, "before_by": by,
               "status": status, "by": by, "seconds": round(dt, 1)}
        print(f"{mid:4} {module:12} {status:9} {dt:6.1f}s  {desc}  {by}", flush=True)
        if new_tests and status != "caught" and (root / new_tests).exists():
            status, by, dt = run_one(root, mid, file, old, new, tests, [*extra, new_tests], timeout)
            row.update(status=status, by=by)
            print(f"{'':4} {'':12} {status:9} {dt:6.1f}s  with {new_tests}  {by}", flush=True)
        results.append(row)
    return results


def markdown(results: list[dict]) -> str:
    out = ["# Mutation testing (issue 29)", "",
           "Each mutant planted alone; its module's test files run with `pytest -x`. "
           "\"Caught after\" adds `tests/reliability/test_mutants.py` (one test per survivor). "
           "Reproduce: `python benchmarks/mutants.py`.", "",
           table(results, {r["id"]: r["before"] for r in results}), "",
           "| id | module | file | mutation | before | after | caught by |", "|---|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r['id']} | {r['module']} | `{r['file']}` | {r['mutation']} | {r['before']} | {r['status']} | "
                   f"`{r['by'] or '-'}` |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="", help="run in this tree (mutated in place, one file at a time)")
    ap.add_argument("--only", default="", help="comma-separated mutant ids")
    ap.add_argument("--extra", action="append", default=[], help="test files added to every mutant's run")
    ap.add_argument("--only-extra", action="store_true", help="run only the --extra test files (checking new tests)")
    ap.add_argument("--new-tests", default="tests/reliability/test_mutants.py",
                    help="run survivors again with this file added ('' : no second pass)")
    ap.add_argument("--json", default="", help="write the results as JSON here")
    ap.add_argument("--md", default="", help="write the Markdown table here (default with a worktree: "
                    "benchmarks/results/mutants.md)")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    repo = Path(__file__).resolve().parents[1] if Path(__file__).resolve().parent.name == "benchmarks" else Path.cwd()
    tree = None
    if args.root:
        root = Path(args.root).resolve()
    else:
        root = tree = _worktree(repo)
    try:
        results = run_all(root, only, args.extra, args.only_extra, args.timeout, args.new_tests or None)
    finally:
        if tree is not None:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
            shutil.rmtree(tree.parent, ignore_errors=True)
    print(table(results, {r["id"]: r["before"] for r in results}))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    md = args.md or ("" if args.root else str(repo / "benchmarks" / "results" / "mutants.md"))
    if md:
        Path(md).parent.mkdir(parents=True, exist_ok=True)
        Path(md).write_text(markdown(results))


if __name__ == "__main__":
    main()
