"""One benchmark run, end to end: plan -> load task -> variant -> fit -> score -> RunRecord.

The CLI parses strings into ``RunOptions``; ``make_plan`` resolves them once into a ``RunPlan`` (the
task, its typed options, the ranker class and typed config, the parsed variant and, for a transfer
``from-<task>``, its source task, the scoring mode, the processes of a launched run) and
``execute`` carries that plan out. Nothing below the plan re-reads a name, re-parses an option or
re-imports a plugin. ``run`` is both, for the Python API.

Scoring has one road (``score``): an embedding ranker's candidate and query vectors are computed
once and handed to the mode that ranks them (one process, or ``ray_shards`` Ray tasks) and to
the ANN measurement; other rankers score through their own ``score``.

A launched run (``torchrun`` or ``accelerate launch`` of ``rbench run``, seen from RANK,
LOCAL_RANK and WORLD_SIZE) initialises ``torch.distributed`` and fits on every process (the
ranker's data-parallel training), then process 0 alone scores and writes the RunRecord.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import NoOptions, RunContext, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.atomic import remove_stale
from rbench.core.config import plain_config
from rbench.core.errors import RBenchError, unknown
from rbench.core.hashing import canonical_json, source_digest
from rbench.core.protocol import PROTOCOL_VERSION
from rbench.core.settings import RunSettings
from rbench.engine import fused
from rbench.engine.ann import BACKENDS as ANN_BACKENDS
from rbench.engine.metrics import per_query
from rbench.engine.runfile import run_width
from rbench.engine.scan import EvalResult, require_one_call
from rbench.engine.scorers import is_embedding_ranker
from rbench.rankers import build_ranker, needs_training, ranker_config, resolve_ranker
from rbench.results.record import RunRecord, ensure_writable, peak_rss_bytes, read_record
from rbench.run.plan import RunOptions, RunPlan, World
from rbench.run.recording import Measured, RecordSlot, identity, make_record, record_measures, write
from rbench.run.rerank import RerankPlan, TwoStage
from rbench.run.strategies import Job, Progress, Scan, Strategy, no_progress, single
from rbench.tasks.family import Task
from rbench.tasks.pools import Variant, parse_variant
from rbench.tasks.registry import load, resolve

TASK_PREFIX = "task."
@dataclass
class RunOutcome:
    record: RunRecord
    path: Path | None
    per_query: dict[str, np.ndarray]
    result: EvalResult | None = None  # the engine's result (its top-k is empty with topk=0)
    skipped: str = ""  # why an existing RunRecord was kept instead of running (--overwrite)


def split_sets(sets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--set`` keys starting with ``task.`` go to the task, the rest to the ranker."""
    task = {k[len(TASK_PREFIX):]: v for k, v in sets.items() if k.startswith(TASK_PREFIX)}
    ranker = {k: v for k, v in sets.items() if not k.startswith(TASK_PREFIX)}
    return task, ranker


def subsample(data: TaskData, max_queries: int | None, seed: int) -> TaskData:
    if not max_queries or max_queries >= len(data.test):
        return data
    rows = np.sort(np.random.default_rng(seed).choice(len(data.test), size=max_queries, replace=False))
    return dataclasses.replace(data, test=data.test.take(rows))


def _sample_size(max_queries: int | None, n_test: int) -> int | None:
    """``--max-queries`` as run: a sample as large as the test split or larger is the full test
    split, recorded as a full run (the same column and RunRecord), with a note."""
    if max_queries is None or max_queries < n_test:
        return max_queries
    import warnings

    warnings.warn(f"--max-queries {max_queries:,} >= the {n_test:,} test queries: evaluating all of them "
                  "(recorded as a full run)", stacklevel=2)
    return None


def apply_variant(data: TaskData, variant: Variant, seed: int, source: Task | None = None) -> TaskData:
    """``data`` as the variant: a pool variant gets the registry's donors; a transfer gets its
    source task (``source``, resolved by ``make_plan``; else resolved here) loaded with its default
    options and the run's seed (the model is the one the source's own runs fit)."""
    if variant.kind == "original":
        return data
    from rbench.tasks import pools

    if variant.kind == "transfer":
        task = source if source is not None else transfer_source(variant, resolve(data.spec.name))
        return pools.transfer(data, load(task, task.options(None), seed))
    from rbench.tasks.registry import BUILTIN, donor_pool

    donors = pools.Donors(tuple(t.spec for t in BUILTIN.values()), donor_pool(seed))
    return pools.apply_variant(data, variant, seed, donors)


# --------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------


def _require_torch_scan(scan: str) -> None:
    """``--scan cuda|torch`` needs torch (and a CUDA device): said before any data is loaded."""
    try:
        import torch
    except ImportError:
        raise RBenchError(f"--scan {scan} needs torch: pip install torch (docs/guides/gpu.md)") from None
    if scan == "cuda" and not torch.cuda.is_available():
        raise RBenchError("--scan cuda: torch sees no CUDA device here (torch.cuda.is_available() is False); "
                          "--scan torch runs the same path on the CPU")


def make_plan(opts: RunOptions, world: World | None = None) -> RunPlan:
    """Resolve ``opts`` once; unknown names, bad options and bad variants fail here, before any
    data is loaded. ``world``: the processes of the run (default: from the environment)."""
    task = opts.task if isinstance(opts.task, Task) else resolve(_task_name(opts.task))
    spec = task.spec
    if opts.ann is not None and opts.ann not in ANN_BACKENDS:
        raise unknown("--ann backend", opts.ann, ANN_BACKENDS)
    if opts.scan != "cpu":
        _require_torch_scan(opts.scan)
    task_sets, ranker_sets = split_sets(opts.sets)
    from rbench.run.rerank import FIRST_PREFIX, make_rerank_plan

    first_sets = {k[len(FIRST_PREFIX):]: v for k, v in ranker_sets.items() if k.startswith(FIRST_PREFIX)}
    ranker_sets = {k: v for k, v in ranker_sets.items() if not k.startswith(FIRST_PREFIX)}
    ref = resolve_ranker(opts.ranker)
    _check_ranker_name(ref.name)
    cls = ref.cls
    if ref.instance is not None and ranker_sets:
        raise RBenchError("options (--set) configure a ranker built by rbench; a ready-made ranker object "
                          "carries its own: pass its class or name instead")
    domains = getattr(cls, "domains", None)
    if domains and spec.domain not in domains:
        raise RBenchError(f"ranker {ref.name!r} does not apply to {spec.domain} tasks such as {spec.name!r} "
                          f"(it applies to: {', '.join(domains)})")
    world = world or World.from_env()
    if world.launched:
        ranker_sets = _launch_device(cls, ranker_sets, world)
    rerank = make_rerank_plan(opts.rerank_from, opts.rerank_depth, first_sets, cls, spec.domain, force=opts.force)
    if rerank is not None and opts.ann is not None:
        raise RBenchError("--ann measures an embedding ranker's exact scan; it does not apply with --rerank-from")
    if opts.scan != "cpu" and (rerank is not None or not is_embedding_ranker(ref.instance or cls)):
        raise RBenchError(f"--scan {opts.scan} scans an embedding ranker's inner products (encode_pool/encode_queries); "
                          f"{ref.name!r} scores with its own score()" + (" in a two-stage run" if rerank else ""))
    settings = {f.name: getattr(opts, f.name) for f in dataclasses.fields(RunSettings)}
    config = None if ref.instance is not None else ranker_config(cls, ranker_sets, ref.name)
    variant = parse_variant(opts.variant)
    source = None
    task_options = task.options(task_sets)
    stages: list[tuple[str, type, Any]] = [(ref.name, cls, config if ref.instance is None
                                            else getattr(ref.instance, "cfg", None))]
    if rerank is not None and rerank.ranker_cls is not None:  # stage 1 is fitted too (on the source, in a transfer)
        stages.append((rerank.stage_name, rerank.ranker_cls, rerank.ranker_config))
    if variant.kind == "transfer":
        source = transfer_source(variant, task)
        for name, stage_cls, _ in stages:
            _require_transfers(name, stage_cls, variant, spec)
    elif task.family.test_only(spec, task_options):
        for name, stage_cls, stage_config in stages:
            _require_no_training(name, stage_cls, stage_config, task)
    strategy = choose(RunSettings(**settings), rerank, is_embedding_ranker(ref.instance or cls), ref.name, variant)
    return RunPlan(task=task, task_options=task_options, ranker=ref.name, ranker_cls=cls,
                   ranker_config=config, variant=variant, world=world, rerank=rerank,
                   ranker_source=ref.source, ranker_obj=ref.instance, source=source, strategy=strategy,
                   **{**settings, "results_dir": Path(opts.results_dir)})


def choose(settings: RunSettings, rerank: RerankPlan | None, embedding: bool, name: str,
           variant: Variant) -> Strategy:
    """The run's scoring strategy, chosen once (``rbench.run.strategies``): the ranker's own
    (``single``), or a two-stage run whose stage 1 is its ranker's own strategy (never an ANN
    measurement; Ray shards only for an embedding stage 1), a run file, or none ('all')."""
    if rerank is None:
        return single(settings, embedding, name)
    first = None
    if rerank.ranker_cls is not None and rerank.depth is not None:
        first_embedding = is_embedding_ranker(rerank.ranker_cls)
        first_settings = dataclasses.replace(settings, ann=None,
                                             ray_shards=settings.ray_shards if first_embedding else None)
        first = single(first_settings, first_embedding, rerank.stage_name)
    return TwoStage(rerank, first, Scan(settings.batch_size, settings.chunk_size), variant.label, settings.seed)


def _check_ranker_name(name: str) -> None:
    """A ranker's name names its RunRecord file (``rbench.results.record.record_path``): one starting with
    '.' is a hidden file ``rbench table`` skips, one with a path separator a file elsewhere."""
    if name.startswith(".") or "/" in name or "\\" in name:
        raise RBenchError(f"ranker name {name!r} cannot name its RunRecord file: expected a name that does not "
                          f"start with '.' and has no '/' or '\\' (set the class's `name`)")


def _task_name(task: Any) -> str | TaskSpec:
    """``task`` as ``resolve`` takes it (a name or a spec); anything else (None, a loaded
    ``TaskData``) is refused in one line saying what is taken, not an error deep in a lookup."""
    if isinstance(task, (str, TaskSpec)):
        return task
    hint = " (pass its .spec.name)" if isinstance(task, TaskData) else ""
    raise RBenchError(f"task must be a task name such as 'ml-100k' (see rbench.list_tasks()) or a load_task(...) "
                      f"result's .spec, not {type(task).__name__}{hint}")


def transfer_source(variant: Variant, task: Task) -> Task:
    """The source task of ``from-<source>``: a known task (else "did you mean"), not the task
    itself, of the same domain (its queries are rendered in the same prompt template and its
    items are the same kind of thing). One line each."""
    try:
        source = resolve(variant.source)
    except RBenchError as exc:
        raise RBenchError(f"variant {variant.label}: {exc}") from exc
    spec = task.spec
    if source.name == spec.name:
        raise RBenchError(f"variant {variant.label}: the source is the task itself; for a ranker fitted "
                          f"on {spec.name!r} use --variant original")
    if source.spec.domain != spec.domain:
        raise RBenchError(f"variant {variant.label}: {source.name!r} is a {source.spec.domain} task and "
                          f"{spec.name!r} a {spec.domain} task; transfer needs a source of the same domain")
    return source


def _require_transfers(name: str, cls: type, variant: Variant, spec: TaskSpec) -> None:
    """A ranker whose fit is keyed on the training pool's own items cannot score another pool
    (``BaseRanker.transfers``): refused before any data is loaded."""
    if not getattr(cls, "transfers", False):
        raise RBenchError(f"ranker {name!r} cannot be fitted on {variant.source!r} and scored on {spec.name!r} "
                          f"(--variant {variant.label}): what its fit learns is keyed on the training pool's own "
                          "items (ids, counts or labels), which the other pool does not have (transfers = False)")


def _require_no_training(name: str, cls: type, config: Any, task: Task) -> None:
    """A task with a test split only (``TaskFamily.test_only``: a zero-shot collection, or
    ``task.split=test``) gives ``fit`` no training data: a ranker that needs it
    (``needs_training``) is refused before any data is loaded, naming the transfer that fits it
    on another task of the same domain, where one has a train split."""
    if not needs_training(cls, config):
        return
    spec = task.spec
    from rbench.tasks.registry import list_tasks

    sources: list[str] = []
    for other in list_tasks():
        if other.domain == spec.domain and other.name != spec.name and len(sources) < 3:
            with contextlib.suppress(RBenchError):
                if not resolve(other.name).family.test_only(other, None):
                    sources.append(other.name)
    if sources:
        how = f"e.g. {', '.join(f'--variant from-{s}' for s in sources)}"
    else:
        how = "none here has a train split" + (": import one with qrels/train.tsv" if spec.domain == "generic" else "")
    how = f"--variant from-TASK fits it on another {spec.domain} task first ({how})"
    if not task.family.test_only(spec, task.options(None)):  # test-only by task.split=test
        how += ", or run without --set task.split=test"
    raise RBenchError(f"ranker {name!r} learns from a train split and task {spec.name!r} has none (a test split "
                      f"only: evaluated zero-shot): {how}; rankers that do not train (bm25, dense, random) run on it")


def _launch_device(cls: type, ranker_sets: dict[str, str], world: World) -> dict[str, str]:
    """A launched process's ranker runs on that process's GPU: a ranker with a ``device`` option
    gets ``cuda:LOCAL_RANK`` (or ``cpu``) unless ``--set device=...`` says otherwise."""
    import torch

    fields = {f.name for f in dataclasses.fields(getattr(cls, "Config", NoOptions))}
    if "device" not in fields or "device" in ranker_sets:
        return ranker_sets
    return {**ranker_sets, "device": f"cuda:{world.local_rank}" if torch.cuda.is_available() else "cpu"}


def _join(world: World) -> bool:
    """Initialise ``torch.distributed`` for a launched run; True when this run owns the group."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    if torch.cuda.is_available():
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return True


def _leave(owned: bool) -> None:
    """Every process has fitted: wait for all, then let process 0 score on its own."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        if owned:
            dist.destroy_process_group()


# --------------------------------------------------------------------------------------------
# running a plan
# --------------------------------------------------------------------------------------------


def run(opts: RunOptions, progress: Progress = no_progress) -> RunOutcome | None:
    """Plan and execute one run (None on the processes of a launched run other than process 0)."""
    return execute(make_plan(opts), progress)


def execute(plan: RunPlan, progress: Progress = no_progress) -> RunOutcome | None:
    """Carry out ``plan``, one step after the other: resolve the ranker -> the record's slot ->
    load / vary / sample -> fit -> ``plan.strategy.score`` -> measures -> the RunRecord -> write.
    Returns None on the processes of a launched run other than process 0 (they only fit)."""
    world = plan.world
    writes = plan.write and world.main
    context = RunContext(cache_dir=paths.cache_dir(), seed=plan.seed, show_progress=world.main)
    ranker = _ranker(plan, context, writes)
    slot = RecordSlot.of(plan, identity(plan, ranker, context))
    if writes:  # the record's own path, as far as it is known before loading
        slot.require_file()
    owned = _join(world) if world.launched else False
    data, max_queries, load_s = _load(plan, progress)
    rss = {"load": peak_rss_bytes()}  # the process's peak so far after each phase (ru_maxrss only grows)
    slot = slot.sampled(plan, max_queries)  # a sample as large as the test split is a full run
    if writes:
        slot.require_file()
        kept = _existing(plan, slot, data.fingerprint, data.info.get("source_fingerprint"), ranker) \
            if plan.overwrite != "always" else None
        if kept is not None:
            return kept
    compile_s = _prepare(plan, ranker, data)
    fit_s, fit_compile_s = _fit(plan, ranker, data, progress)
    compile_s += fit_compile_s
    rss["fit"] = peak_rss_bytes()
    if world.launched:
        _leave(owned)
        if not world.main:
            return None
    measures = record_measures(plan.measures)
    # the engine keeps more than the run file's --topk lines: the tied candidates its lines need
    job = Job(plan.ranker, run_width(plan.topk, data.test), context, progress, measures)
    scored = plan.strategy.score(ranker, data, job)
    rss["score"] = peak_rss_bytes()
    values = per_query(scored.result.ranks, data.test.grades, measures)
    record = make_record(plan, ranker, data, scored, values, slot, Measured(load_s, fit_s, compile_s, rss, max_queries))
    path = write(plan, record, slot, data, scored, values) if plan.write else None
    result = scored.result  # the top-k as asked for (the engine kept the run file's wider one)
    result.topk_index, result.topk_score = result.topk_index[:, : plan.topk], result.topk_score[:, : plan.topk]
    return RunOutcome(record=record, path=path, per_query=values, result=result)


def _ranker(plan: RunPlan, context: RunContext, writes: bool) -> Any:
    """The plan's ranker, built (or the ready-made object); the record's folder is checked
    first, before any work."""
    if writes:  # the exact folder the record goes to
        folder = RecordSlot.of(plan, {}).path.parent
        ensure_writable(folder)
        remove_stale(folder)  # temporaries of killed runs (a live writer's are younger: kept)
    if plan.ranker_obj is not None:
        return plan.ranker_obj
    return build_ranker(plan.ranker_cls, plan.ranker_config, context, plan.ranker)


def _load(plan: RunPlan, progress: Progress) -> tuple[TaskData, int | None, float]:
    """The task's data as the run evaluates it (the variant, the test sample), the sample as run
    and the seconds it took."""
    t0 = time.perf_counter()
    step = progress(f"loading {plan.spec.name}", 1)
    data = load(plan.task, plan.task_options, seed=plan.seed)
    data = apply_variant(data, plan.variant, plan.seed, plan.source)
    max_queries = _sample_size(plan.max_queries, len(data.test))
    data = subsample(data, max_queries, plan.seed)
    load_s = time.perf_counter() - t0
    step(1)
    return data, max_queries, load_s


def _prepare(plan: RunPlan, ranker: Any, data: TaskData) -> float:
    """What must hold before the fit, and the engine's kernels this run's scoring calls, compiled
    before any timer (a fit may evaluate on valid): the fused scan only for a scan large enough to
    pay for its compile, rbench's GEMM only for a ranker that scores by vectors
    (``rbench.engine.fused.scan_pays``; the scan of a ranker's own scores compiles when its first
    chunk comes, timed apart by the engine). Returns the compile seconds."""
    if plan.rerank is None and data.test.candidates is None:  # refused before the fit, not after
        require_one_call(plan.ranker, bool(getattr(ranker, "set_dependent", False)), len(data.pool), plan.chunk_size)
    width = data.test.candidates.shape[1] if data.test.candidates is not None else len(data.pool)
    return fused.warmup(scan=fused.scan_pays(len(data.test), width), gemm=is_embedding_ranker(ranker))


def _fit(plan: RunPlan, ranker: Any, data: TaskData, progress: Progress) -> tuple[float, float]:
    """Fit the ranker on the data without the test labels; the seconds it took, and the seconds
    of them that kernels spent compiling (a fit that evaluates on valid may compile the scan of
    its scores: ``fused.compile_seconds``), taken out of the first."""
    view = data.for_fit()  # a copy without the test labels (the runner keeps ``data``), made before the timer
    t0, compiled = time.perf_counter(), fused.compile_seconds()
    step = progress(f"fitting {plan.ranker}", 1)
    ranker.fit(view)
    fit_s, compile_s = time.perf_counter() - t0, fused.compile_seconds() - compiled
    step(1)
    return fit_s - compile_s, compile_s


def _existing(plan: RunPlan, slot: RecordSlot, fingerprint: str,
              source_fingerprint: str | None = None, ranker: Any = None) -> RunOutcome | None:
    """The RunRecord this run would write, kept as it is when ``plan.overwrite`` says so
    (``never``: whenever it exists; ``only-missing``: when the ranker's version, source digest
    and effective config, the task fingerprint (and a transfer's source fingerprint) and the
    evaluation protocol (``rbench.core.protocol``) are this run's and it holds every requested
    ``--measure``: a record written before the digest or the protocol was recorded, or one lacking
    a requested measure, is run again, which rewrites it with the defaults and the measures asked
    for); None: run."""
    path = slot.path
    if not path.is_file():
        return None
    if plan.overwrite == "never":
        return RunOutcome(record=read_record(path), path=path, per_query={}, skipped="exists (--overwrite never)")
    try:
        rec = read_record(path)
    except RBenchError:
        return None  # a damaged record is replaced
    same = (rec.task_fingerprint == fingerprint and rec.protocol == PROTOCOL_VERSION
            and _same_ranker(rec.ranker, ranker)
            and rec.task_info.get("source_fingerprint") == source_fingerprint
            and canonical_json(rec.run_options.get("non_default") or {}) == canonical_json(slot.diff)
            # what this run would add and the record lacks (a run file, an ANN measurement): run
            and (bool(rec.run_file) or plan.topk == 0)
            and (plan.ann is None or (rec.ranker_info.get("ann") or {}).get("backend") == plan.ann)
            # a --measure the record lacks: run again (the per-query ranks behind it are not kept)
            and all(m in rec.metrics for m in plan.measures))

    return RunOutcome(record=rec, path=path, per_query={},
                      skipped=f"same ranker, config, data and evaluation protocol {PROTOCOL_VERSION} "
                              "(--overwrite only-missing)") if same else None


def _same_ranker(recorded: dict[str, Any], ranker: Any) -> bool:
    """Whether a record's ranker is this one: the same version, source digest and effective
    config (a changed default changes the config but not its diff from the defaults)."""
    if ranker is None:
        return True
    return (str(recorded.get("version", "")) == str(getattr(ranker, "version", ""))
            and recorded.get("source_sha256") == source_digest(type(ranker))
            and canonical_json(plain_config(recorded.get("config") or {})) == canonical_json(plain_config(ranker.config)))
