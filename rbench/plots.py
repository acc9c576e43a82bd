"""Figures from RunRecords (PNG via matplotlib, an optional dependency: ``rbench[plot]``)."""

from __future__ import annotations

from pathlib import Path

from rbench.errors import RBenchError
from rbench.results import load_records


def scaling_points(results_dir: Path, task: str, rankers: list[str]) -> dict[str, list[tuple[int, float, float]]]:
    """ranker -> [(pool size, MRR, nDCG@10)] over the original pool and every ``scaled:N`` run."""
    points: dict[str, dict[int, tuple[float, float]]] = {r: {} for r in rankers}
    for _, rec in load_records(results_dir):
        if rec.task != task or rec.ranker.get("name") not in points:
            continue
        if rec.variant not in ("original", "") and not rec.variant.startswith("scaled"):
            continue
        if rec.config_hash and rec.run_options.get("non_default", {}).get("ranker"):
            continue  # only default-config runs of each ranker
        size = int(rec.task_info.get("pool_size", 0))
        if size:
            points[rec.ranker["name"]][size] = (rec.metrics["RR"], rec.metrics["nDCG@10"])
    return {r: sorted((n, m[0], m[1]) for n, m in pts.items()) for r, pts in points.items()}


def plot_scaling(results_dir: Path, task: str, rankers: list[str], output: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RBenchError("plots need matplotlib: pip install 'rbench[plot]'") from exc
    pts = scaling_points(results_dir, task, rankers)
    if not any(pts.values()):
        raise RBenchError(f"no RunRecords for task {task!r} and rankers {', '.join(rankers)} in {results_dir} "
                          f"(run e.g. rbench run --task {task} --ranker {rankers[0]} --variant scaled:100000)")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=150)
    for ranker, rows in pts.items():
        if rows:
            ax.plot([r[0] for r in rows], [100 * r[1] for r in rows], marker="o", label=ranker)
    ax.set_xscale("log")
    ax.set_xlabel("candidate pool size")
    ax.set_ylabel("MRR (%)")
    ax.set_title(f"{task}: MRR vs pool size")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output
