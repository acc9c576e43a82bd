"""Figures from RunRecords (PNG via matplotlib, an optional dependency: ``rbench[plot]``)."""

from __future__ import annotations

from pathlib import Path

from rbench.core.errors import RBenchError, write_failure
from rbench.results.record import load_records, require_results_dir, require_target


def scaling_points(results_dir: Path, task: str, rankers: list[str]) -> dict[str, list[tuple[int, float, float]]]:
    """ranker -> [(pool size, MRR, nDCG@10)] over the original pool and every ``scaled:N`` run."""
    points: dict[str, dict[int, tuple[float, float]]] = {r: {} for r in rankers}
    for _, rec in load_records(require_results_dir(results_dir)):
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


def _shown(label: object) -> str:
    """A label (user text) as matplotlib should draw it, literally: ``$`` escaped (a ``$``-pair
    would be read as math text, and a bad one fails the figure at the very end) and a leading
    ``_`` kept visible (matplotlib leaves such labels out of the legend without a word)."""
    text = str(label).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _save(plt, fig, output: Path) -> Path:  # noqa: ANN001
    """Write the figure to ``output`` (a PNG); an unwritable path is one line, not a traceback."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output)
    except OSError as exc:
        raise RBenchError(f"cannot write {output} ({write_failure(output, exc)})") from exc
    finally:
        plt.close(fig)
    return output


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RBenchError("plots need matplotlib: pip install 'rbench[plot]'") from exc
    return plt


def plot_scaling(results_dir: Path, task: str, rankers: list[str], output: Path) -> Path:
    require_target(output, "--output", suffix=".png")  # before the records are read
    plt = _pyplot()
    pts = scaling_points(results_dir, task, rankers)
    if not any(pts.values()):
        raise RBenchError(f"no RunRecords for task {task!r} and rankers {', '.join(rankers)} in {results_dir} "
                          f"(run e.g. rbench run --task {task} --ranker {rankers[0]} --variant scaled:100000)")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=150)
    for ranker, rows in pts.items():
        if rows:
            ax.plot([r[0] for r in rows], [100 * r[1] for r in rows], marker="o", label=_shown(ranker))
    ax.set_xscale("log")
    ax.set_xlabel("candidate pool size")
    ax.set_ylabel("MRR (%)")
    ax.set_title(f"{task}: MRR vs pool size")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, output)


def training_curves(results_dir: Path, task: str, rankers: list[str]) -> dict[str, list[dict]]:
    """Row label -> training curve (``ranker_info["training_curve"]``, see ``rbench.results.training_budget``) of
    each record of ``task`` by one of ``rankers`` that has one. One curve per configuration: a
    model trained once and evaluated on several pools (variants) would repeat the same curve, so
    the original-pool record is preferred, then the newest."""
    from rbench.results.training_budget import training_curve

    best: dict[str, tuple[tuple[bool, str], list[dict]]] = {}
    for _, rec in load_records(require_results_dir(results_dir)):
        if rec.task != task or rec.ranker.get("name") not in rankers:
            continue
        curve = training_curve(rec)
        if not curve:
            continue
        rank = ((rec.variant or "original") == "original", rec.created)
        if rec.label not in best or rank > best[rec.label][0]:
            best[rec.label] = (rank, curve)
    return {label: best[label][1] for label in sorted(best)}


def plot_training(results_dir: Path, task: str, rankers: list[str], output: Path) -> Path:
    """Two panels over epochs: each ranker's own training loss and its validation MRR."""
    require_target(output, "--output", suffix=".png")  # before the records are read
    curves = training_curves(results_dir, task, rankers)
    if not curves:
        raise RBenchError(f"no RunRecord of task {task!r} by {', '.join(rankers)} in {results_dir} has a training "
                          "curve (only trained rankers record one; older RunRecords have none: re-run them)")
    plt = _pyplot()
    fig, (ax_loss, ax_mrr) = plt.subplots(1, 2, figsize=(10, 4), dpi=150)
    any_loss = any_mrr = False
    palette = plt.rcParams["axes.prop_cycle"].by_key().get("color") or ["C0"]
    for i, (label, pts) in enumerate(curves.items()):
        loss = [(p["epoch"], p["train_loss"]) for p in pts if p["train_loss"] is not None]
        mrr = [(p["epoch"], 100 * p["valid_MRR"]) for p in pts if p["valid_MRR"] is not None]
        color = palette[i % len(palette)]
        if loss:
            any_loss = True
            ax_loss.plot(*zip(*loss), marker="." if len(loss) < 60 else None, label=_shown(label), color=color)
        if mrr:
            any_mrr = True
            ax_mrr.plot(*zip(*mrr), marker="o" if len(mrr) < 60 else None, ms=3, label=_shown(label), color=color)
    for ax, ok, ylabel, title in ((ax_loss, any_loss, "train loss (each ranker's own objective)", "training loss"),
                                  (ax_mrr, any_mrr, "validation MRR (%)", "validation MRR")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{task}: {title}")
        ax.grid(True, alpha=0.3)
        if ok:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes, color="gray")
    fig.tight_layout()
    return _save(plt, fig, output)


def plot_recipe(title: str, table: list[dict], output: Path) -> Path:
    """A reproduced experiment as grouped bars: one panel per measure, tasks on the x axis, one
    bar per ranker (rbench's value; the paper's as a hollow bar beside it where it has one)."""
    import numpy as np

    plt = _pyplot()
    measures = list(dict.fromkeys(r["measure"] for r in table))
    tasks = list(dict.fromkeys(r["task"] + ("" if r["variant"] == "original" else f"~{r['variant']}") for r in table))
    rankers = list(dict.fromkeys(r["ranker"] for r in table))
    fig, axes = plt.subplots(1, len(measures), figsize=(max(6, 1.6 * len(tasks) * max(1, len(rankers)) ** 0.5 * 2),
                                                        4.2), dpi=120, squeeze=False)
    width = 0.8 / max(1, len(rankers))
    for ax, measure in zip(axes[0], measures):
        for i, ranker in enumerate(rankers):
            mine, paper = [], []
            for t in tasks:
                row = next((r for r in table if r["ranker"] == ranker and r["measure"] == measure
                            and r["task"] + ("" if r["variant"] == "original" else f"~{r['variant']}") == t), None)
                mine.append(np.nan if row is None or row["rbench"] is None else row["rbench"])
                paper.append(np.nan if row is None or row["paper"] is None else row["paper"])
            x = np.arange(len(tasks)) + i * width - 0.4 + width / 2
            bars = ax.bar(x, mine, width * 0.9, label=_shown(ranker))
            if not np.all(np.isnan(paper)):
                ax.bar(x, paper, width * 0.9, fill=False, edgecolor=bars.patches[0].get_facecolor(), linestyle="--")
        ax.set_xticks(np.arange(len(tasks)), tasks, rotation=20)
        ax.set_ylabel(f"{measure} (%)")
        ax.set_title(measure)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle(title + " (dashed: the paper's number)", fontsize=9)
    fig.tight_layout()
    return _save(plt, fig, output)
