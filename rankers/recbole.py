"""RecBole baselines (SASRec, GRU4Rec, BERT4Rec, BPR, FM) trained by RecBole, scored by rbench.

RecBole does the training (its models, trainer and early stopping on the validation split);
rbench does every evaluation: each model is turned into an ``EmbeddingRanker`` whose inner
product is exactly the model's full-sort prediction, so the engine ranks the whole pool (or each
query's candidate list), removes the user's history and computes the metrics. RecBole's own
(sampled or internal) metrics are never reported; its validation metric only drives early
stopping.

Choices, written down:

- **Input**: RecBole's pre-split benchmark files (``benchmark_filename``), written from rbench's
  ``TaskData`` under ``<cache>/recbole/data-<hash>/``. Sequential models get one row per rbench
  query: ``user, item_id_list (the query's history, last max_item_list_length items), item_id
  (the target)``; the training file holds exactly ``task.train`` and the validation file exactly
  ``task.valid``. RecBole needs a third (test) file: it is the validation file again, so the test
  targets are never written anywhere RecBole reads (tested). Reconstructing a timestamped
  ``.inter`` for RecBole's own leave-one-out would give the same rows for the default protocol but
  silently diverge under other task options; the pre-split files cannot.
  General/context models (BPR, FM) train on the unique (user, item) pairs before each user's
  validation target: every item of the training queries' histories and targets and of the
  validation queries' histories (= RecBole's leave-one-out training part); validation rows are
  (user, validation target).
- **Vocabulary**: an ``.item`` file lists every item of the training pool, so the item table has a
  row for every catalogue item as in RecBole's standard setup (items that occur only as
  validation/test targets are trained as negatives only). Tokens are pool positions, users are
  ``u<k>``: no escaping problems with ids that contain spaces or tabs.
- **Sequence length**: ``MAX_ITEM_LIST_LENGTH`` = ``max_item_list_length`` (20, the paper's
  window); the model's position table has that size whatever the longest history in the files.
- **Scoring**: SASRec/GRU4Rec: query = ``model.forward(item_seq, item_seq_len)``, candidate =
  the item-embedding row. BERT4Rec mirrors its ``full_sort_predict``: the history goes through
  ``reconstruct_test_data`` (a [MASK] appended; RecBole drops the oldest item there), the output
  at the mask position is the query; the per-item output bias becomes one extra dimension
  (query 1, candidate bias). BPR: user embedding x item embedding (queries' ``user_ids``).
  FM: fields user_id and item_id only (no history, no side features: the classic FM = biased
  factorisation); ``y = b + w_u + w_i + <v_u, v_i>`` is written as an inner product with two
  extra dimensions. Unknown users (BPR/FM) get a zero user vector.
- **History items not in the training vocabulary** (variant pools) are dropped from the query
  sequence (their count is in ``info``).
- **Unseen candidates** (pool items that are not training-pool items, e.g. the other tasks'
  items in a mixed pool) have no learned vector. Default: they are ranked after every seen
  candidate: a zero vector plus one extra dimension where they get -1 and the query gets
  ``2 * |q| * max|e| + 1``, so their score is below any seen candidate's; ties among them are
  broken pessimistically by the engine. Candidates are matched to training items by id: the
  exact id (``rbench.tasks.pools`` keeps the task's own ids and writes donor items as
  ``<donor task>:<id>``, so donors never match), or else the id without a ``<task name><sep>``
  prefix (sep one of ``:: : / | #``) for pools built elsewhere that prefix every source.
- **item_text_features=true** (the paper's fairness option: baselines use the same offline text
  embeddings for candidates): after training, a ridge-regularised least-squares linear map
  (with intercept) from an item's text embedding (the ``dense`` ranker's encoder, default the
  offline all-MiniLM-L6-v2; ``text_model`` to change) to its learned item vector is fitted on the
  items that occur in training. ``text_items=unseen`` uses the projection only for unseen
  candidates (they become rankable); ``text_items=all`` represents every candidate by its
  projected text embedding. Fitting after training (rather than jointly) keeps RecBole's models
  and training untouched and costs one small linear solve.
- **Logs and checkpoints** stay under ``<cache>/recbole/<model>-<key>/`` (``recbole.log``,
  ``model.pt``, ``meta.json``, ``tensorboard/``). A trained model is reused when everything it
  depends on (data, options, seed, versions) is unchanged (``reuse=false`` retrains).
- Checkpoints are data, never code (the cache may sit on shared storage): RecBole's own
  checkpoint pickles its whole config, so only a ``weights_only=False`` load could read it back;
  its writer is replaced by one that keeps the best state dict in memory, and nothing is ever
  loaded with ``weights_only=False``. ``model.pt`` is a plain state dict (caches from earlier
  versions already were), loaded with ``weights_only=True``; one that holds anything else (a
  planted pickle, a damaged file, tensors that do not fit the model) is trained again with a note.
- RecBole pitfalls handled here: ``trainer.evaluate(load_best_model=True)`` fails under
  torch >= 2.6 (the checkpoint above); ``recbole.quick_start`` imports ray, so the
  lower-level API is used; RecBole's ``Config`` parses ``sys.argv`` (it is hidden from it);
  its context models use ``np.long`` (gone in numpy 1.24-1.26; aliased to int64 while building).
- Defaults are RecBole 1.2.1's own (the paper gives no baseline hyper-parameters) except the
  history window; every option is settable with ``--set``; anything else RecBole accepts goes in
  ``--set recbole='{"key": value}'`` (JSON).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import re
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np

from rbench.api import Pool, Queries, Ragged, TaskData
from rbench.plugin import (
    FLOAT32_KERNELS,
    AtLeast0,
    AtLeast1,
    BaseRanker,
    DropoutRate,
    Fraction,
    NonNegative,
    Positive,
    Range,
    RBenchError,
    Seed,
    atomic_dir,
    atomic_path,
    atomic_write_text,
    short_hash,
)

DATASET = "rb"
ID_SEPARATORS = ("::", ":", "/", "|", "#")


# --------------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------------


@dataclass
class RecBoleOptions:
    """Options shared by every RecBole baseline (RecBole 1.2.1 defaults, paper window)."""

    epochs: AtLeast1 = 300
    train_batch_size: AtLeast1 = 2048
    eval_batch_size: AtLeast1 = 4096
    learning_rate: Positive = 0.001
    weight_decay: NonNegative = 0.0
    stopping_step: AtLeast0 = 10  # early stopping patience, in evaluations on the validation split
    eval_step: AtLeast1 = 1
    valid_metric: str = "MRR@10"  # RecBole's early-stopping metric (full sort on valid)
    max_item_list_length: AtLeast1 = 20  # the paper's history window
    seed: Seed | None = None  # None: the run's --seed
    device: str = "auto"  # auto | cpu | cuda
    show_progress: bool = False  # RecBole's per-batch bars (epoch lines go to stderr anyway)
    reuse: bool = True  # reuse a model trained with the same data, options, seed and versions
    item_text_features: bool = False  # candidate vectors from text embeddings (see module doc)
    text_items: Literal["unseen", "all"] = "unseen"
    text_model: str = "sentence-transformers/all-MiniLM-L6-v2"
    text_ridge: NonNegative = 1e-2  # ridge penalty of the text -> item map, x mean feature variance
    recbole: str = ""  # JSON object of further RecBole config options

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z]+@\d+", self.valid_metric):
            raise RBenchError(f"valid_metric={self.valid_metric!r}: expected METRIC@K, e.g. MRR@10 or NDCG@10")
        if self.recbole:
            extra = _parse_extra(self.recbole)
            reserved = {"data_path", "benchmark_filename", "checkpoint_dir", "load_col", "alias_of_item_id"}
            clash = sorted(reserved & set(extra))
            if clash:
                raise RBenchError(f"recbole option(s) {', '.join(clash)} are set by rbench and cannot be overridden")


def _parse_extra(raw: str) -> dict[str, Any]:
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RBenchError(f"--set recbole=...: not valid JSON ({exc.msg}); "
                          "example: recbole='{\"clip_grad_norm\": {\"max_norm\": 5}}'") from None
    if not isinstance(extra, dict):
        raise RBenchError("--set recbole=...: expected a JSON object")
    return extra


@dataclass
class SASRecOptions(RecBoleOptions):
    n_layers: AtLeast1 = 2
    n_heads: AtLeast1 = 2
    hidden_size: AtLeast1 = 64
    inner_size: AtLeast1 = 256
    hidden_dropout_prob: DropoutRate = 0.5
    attn_dropout_prob: DropoutRate = 0.5
    hidden_act: str = "gelu"
    layer_norm_eps: Positive = 1e-12
    initializer_range: Positive = 0.02
    loss_type: Literal["CE", "BPR"] = "CE"


@dataclass
class GRU4RecOptions(RecBoleOptions):
    embedding_size: AtLeast1 = 64
    hidden_size: AtLeast1 = 128
    num_layers: AtLeast1 = 1
    dropout_prob: DropoutRate = 0.3
    loss_type: Literal["CE", "BPR"] = "CE"


@dataclass
class BERT4RecOptions(RecBoleOptions):
    n_layers: AtLeast1 = 2
    n_heads: AtLeast1 = 2
    hidden_size: AtLeast1 = 64
    inner_size: AtLeast1 = 256
    hidden_dropout_prob: DropoutRate = 0.2
    attn_dropout_prob: DropoutRate = 0.2
    hidden_act: str = "gelu"
    layer_norm_eps: Positive = 1e-12
    initializer_range: Positive = 0.02
    mask_ratio: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.2
    ft_ratio: Fraction = 0.5
    loss_type: Literal["CE", "BPR"] = "CE"


@dataclass
class BPROptions(RecBoleOptions):
    embedding_size: AtLeast1 = 64


@dataclass
class FMOptions(RecBoleOptions):
    embedding_size: AtLeast1 = 10


def model_params(cfg: RecBoleOptions) -> dict[str, Any]:
    """The model-specific options (fields a subclass adds to ``RecBoleOptions``)."""
    common = {f.name for f in dataclasses.fields(RecBoleOptions)}
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in common}


# --------------------------------------------------------------------------------------------
# writing RecBole's input from rbench's TaskData
# --------------------------------------------------------------------------------------------


def _hash_arrays(h: Any, *arrays: Any) -> None:
    for a in arrays:
        if a is None:
            h.update(b"<none>")
            continue
        a = np.asarray(a)
        if a.dtype == object or a.dtype.kind in "US":
            h.update("\x1f".join(map(str, a)).encode())
        else:
            h.update(str(a.dtype).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"\x1e")


def _user_tokens(task: TaskData) -> tuple[dict[str, str], np.ndarray, np.ndarray]:
    """Users of train and valid -> ``u<k>`` tokens (rows without user ids get one per row)."""
    import pandas as pd

    def ids(q: Queries, tag: str) -> np.ndarray:
        if q.user_ids is not None:
            return np.asarray(q.user_ids).astype(str)
        return np.array([f"\x00{tag}{i}" for i in range(len(q))], dtype=object)

    tr, va = ids(task.train, "t"), ids(task.valid, "v")
    codes, uniques = pd.factorize(np.concatenate([tr, va]).astype(object))
    tokens = np.array([f"u{c}" for c in range(len(uniques))], dtype=object)
    mapping = {str(u): tokens[k] for k, u in enumerate(uniques) if not str(u).startswith("\x00")}
    return mapping, tokens[codes[: len(tr)]], tokens[codes[len(tr):]]


def _last(row: np.ndarray, n: int) -> np.ndarray:
    return row[-n:] if len(row) > n else row


@dataclass
class WrittenData:
    """Where RecBole's input files are and what went into them."""

    root: Path  # RecBole's data_path (files in root / DATASET)
    key: str
    user_token: dict[str, str]
    stats: dict[str, int]


def data_key(task: TaskData, kind: str, max_len: int) -> str:
    h = hashlib.sha256()
    h.update(f"{kind}\x1f{max_len}\x1fv1".encode())
    fit = task.fit_pool
    _hash_arrays(h, fit.ids)
    for q in (task.train, task.valid):
        _hash_arrays(h, q.positives.offsets, q.positives.values, q.user_ids,
                     None if q.history is None else q.history.offsets,
                     None if q.history is None else q.history.values)
    return h.hexdigest()[:20]


def write_recbole_data(task: TaskData, kind: str, max_len: int, cache: Path) -> WrittenData:
    """Write (once; atomically) RecBole's benchmark files for ``task``'s train and valid splits."""
    key = data_key(task, kind, max_len)
    root = cache / f"data-{key}"
    user_token, tr_users, va_users = _user_tokens(task)
    stats: dict[str, int] = {}
    if kind == "sequential":
        for q in (task.train, task.valid):
            if q.history is None:
                raise RBenchError("sequential RecBole models need Queries.history (a recommendation task)")
    else:
        if task.train.user_ids is None or task.valid.user_ids is None:
            raise RBenchError("general RecBole models (BPR, FM) need Queries.user_ids (a recommendation task)")
    done = root / DATASET / "done.json"
    if done.exists():
        return WrittenData(root, key, user_token, json.loads(done.read_text()))
    # the same key is the same data: a writer that finishes second keeps the first one's folder
    with atomic_dir(root, replace=False) as tmp:
        d = tmp / DATASET
        d.mkdir()
        n_items = len(task.fit_pool)
        with open(d / f"{DATASET}.item", "w", encoding="utf-8") as fh:
            fh.write("item_id:token\n")
            fh.writelines(f"{i}\n" for i in range(n_items))
        if kind == "sequential":
            for split, q, users in (("train", task.train, tr_users), ("valid", task.valid, va_users)):
                rows, skipped = 0, 0
                with open(d / f"{DATASET}.{split}.inter", "w", encoding="utf-8") as fh:
                    fh.write("user_id:token\titem_id_list:token_seq\titem_id:token\n")
                    for i in range(len(q)):
                        hist = _last(q.history[i], max_len)
                        if len(hist) == 0:
                            skipped += len(q.positives[i])
                            continue
                        h = " ".join(map(str, hist.tolist()))
                        for target in q.positives[i].tolist():
                            fh.write(f"{users[i]}\t{h}\t{target}\n")
                            rows += 1
                stats[f"{split}_rows"], stats[f"{split}_skipped_empty_history"] = rows, skipped
        else:
            parts_u, parts_i = [], []
            for q, users in ((task.train, tr_users), (task.valid, va_users)):
                if q.history is not None:
                    parts_u.append(users[q.history.row_ids()])
                    parts_i.append(q.history.values)
            parts_u.append(tr_users[task.train.positives.row_ids()])
            parts_i.append(task.train.positives.values)
            import pandas as pd

            pairs = pd.DataFrame({"u": np.concatenate(parts_u), "i": np.concatenate(parts_i)}).drop_duplicates()
            pairs = pairs.sort_values(["u", "i"], kind="stable")
            with open(d / f"{DATASET}.train.inter", "w", encoding="utf-8") as fh:
                fh.write("user_id:token\titem_id:token\n")
                fh.writelines(f"{u}\t{i}\n" for u, i in zip(pairs["u"], pairs["i"]))
            with open(d / f"{DATASET}.valid.inter", "w", encoding="utf-8") as fh:
                fh.write("user_id:token\titem_id:token\n")
                rows = 0
                for i in range(len(task.valid)):
                    for target in task.valid.positives[i].tolist():
                        fh.write(f"{va_users[i]}\t{target}\n")
                        rows += 1
            stats = {"train_rows": int(len(pairs)), "valid_rows": rows}
        (d / "done.json").write_text(json.dumps(stats))
    return WrittenData(root, key, user_token, json.loads(done.read_text()))


# --------------------------------------------------------------------------------------------
# running RecBole quietly, inside the cache dir
# --------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _NoColor(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _ANSI.sub("", record.msg)
        return True


@contextlib.contextmanager
def recbole_session(run_dir: Path) -> Iterator[None]:
    """Hide ``sys.argv`` from RecBole's Config, send its logs to ``run_dir/recbole.log`` and its
    tensorboard files to ``run_dir/tensorboard`` (RecBole would write them into the working
    directory), silence its deprecation warnings, and alias ``np.long`` for its context models."""
    import recbole.trainer.trainer as rb_trainer
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    argv, sys.argv = sys.argv, sys.argv[:1]
    root = logging.getLogger()
    level = root.level
    handler = logging.FileHandler(run_dir / "recbole.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_NoColor())
    handler.setLevel(logging.INFO)
    # RecBole logs through the root logger; keep its INFO lines out of other handlers (console)
    others = [(h, h.level) for h in root.handlers]
    for h, lv in others:
        h.setLevel(max(lv, logging.WARNING))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    get_tb = rb_trainer.get_tensorboard
    rb_trainer.get_tensorboard = lambda _logger: SummaryWriter(str(run_dir / "tensorboard"))
    had_long = "long" in np.__dict__
    if not had_long:
        np.long = np.int64  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        sys.argv = argv
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        for h, lv in others:
            h.setLevel(lv)
        rb_trainer.get_tensorboard = get_tb
        if not had_long:
            del np.long  # type: ignore[attr-defined]


def _atomic_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, default=str))


def match_to_fit(pool: Pool, fit_index: dict[str, int], task_name: str) -> np.ndarray:
    """Training-pool position of each candidate, or -1: exact id, else id minus a
    ``<task name><sep>`` prefix (variant pools prefix ids by source task)."""
    prefixes = [task_name + sep for sep in ID_SEPARATORS] if task_name else []
    out = np.full(len(pool), -1, dtype=np.int64)
    for i, pid in enumerate(pool.ids):
        pid = str(pid)
        j = fit_index.get(pid)
        if j is None:
            for p in prefixes:
                if pid.startswith(p):
                    j = fit_index.get(pid[len(p):])
                    if j is not None:
                        break
        if j is not None:
            out[i] = j
    return out


# --------------------------------------------------------------------------------------------
# the ranker
# --------------------------------------------------------------------------------------------


class RecBoleRanker(BaseRanker):
    """A RecBole model trained on the task's training split, scored by inner product."""

    score_tolerance = FLOAT32_KERNELS  # torch fp32 kernels (rbench.api)

    name = "recbole"
    transfers = False  # learned embeddings of the training pool's item ids
    version = "1"
    Config = RecBoleOptions
    domains = ("recommendation",)
    recbole_model: ClassVar[str] = ""
    kind: ClassVar[Literal["sequential", "general", "context"]] = "sequential"

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.info: dict[str, Any] = {"recbole_model": self.recbole_model}
        self.model: Any = None
        self._item_vecs: np.ndarray | None = None  # RecBole item id -> vector (incl. bias column)
        self._fit_rb: np.ndarray | None = None  # training-pool position -> RecBole item id
        self._pool_rb: np.ndarray | None = None  # current pool position -> RecBole id (0 = unseen)
        self._unseen_col = False
        self._max_norm = 0.0
        self._fm_users: np.ndarray | None = None

    # ---------------------------------------------------------------------------- config

    @property
    def seed(self) -> int:
        return int(self.cfg.seed if self.cfg.seed is not None else self.context.seed)

    def _device(self) -> str:
        import torch

        if self.cfg.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.cfg.device

    def recbole_config(self, data: WrittenData, run_dir: Path) -> dict[str, Any]:
        cfg = self.cfg
        params = model_params(cfg)
        metric, k = cfg.valid_metric.split("@")
        sequential = self.kind == "sequential"
        ce = params.get("loss_type", "BPR") == "CE"
        out: dict[str, Any] = {
            "data_path": str(data.root),
            "benchmark_filename": ["train", "valid", "valid"],  # no test file: RecBole never sees test
            "checkpoint_dir": str(run_dir / "checkpoints"),
            "show_progress": cfg.show_progress,
            "use_gpu": self._device().startswith("cuda"),
            "seed": self.seed,
            "reproducibility": True,
            "state": "INFO",
            "epochs": cfg.epochs,
            "train_batch_size": cfg.train_batch_size,
            "eval_batch_size": cfg.eval_batch_size,
            "learning_rate": cfg.learning_rate,
            "weight_decay": cfg.weight_decay,
            "stopping_step": cfg.stopping_step,
            "eval_step": cfg.eval_step,
            "metrics": sorted({"MRR", "NDCG", "Recall", metric}),
            "topk": sorted({10, int(k)}),
            "valid_metric": cfg.valid_metric,
            "valid_metric_bigger": True,
            "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "group_by": "user", "mode": "full"},
            "repeatable": sequential,
            "MAX_ITEM_LIST_LENGTH": cfg.max_item_list_length,
            "train_neg_sample_args": None if (sequential and ce) else {
                "distribution": "uniform", "sample_num": 1, "alpha": 1.0, "dynamic": False, "candidate_num": 0},
            "log_wandb": False,
            "save_dataset": False,
            "save_dataloaders": False,
            **params,
        }
        if sequential:
            out["load_col"] = {"inter": ["user_id", "item_id_list", "item_id"], "item": ["item_id"]}
            out["alias_of_item_id"] = ["item_id_list"]
        else:
            out["load_col"] = {"inter": ["user_id", "item_id"], "item": ["item_id"]}
        if self.kind == "context":
            out["numerical_features"] = []
        out.update(_parse_extra(cfg.recbole) if cfg.recbole else {})
        return out

    def run_key(self, data: WrittenData) -> str:
        import recbole
        import torch

        blob = {"model": self.recbole_model, "data": data.key, "seed": self.seed, "device": self._device(),
                "options": {k: v for k, v in dataclasses.asdict(self.cfg).items()
                            if k not in ("show_progress", "reuse", "device", "item_text_features", "text_items",
                                         "text_model", "text_ridge")},
                "recbole": recbole.__version__, "torch": torch.__version__}
        return short_hash(blob, 16)

    # ---------------------------------------------------------------------------- RecBole objects

    def _build(self, data: WrittenData, run_dir: Path) -> tuple[Any, Any, Any, Any]:
        """RecBole Config, dataset and train/valid dataloaders for the written files."""
        from recbole.config import Config
        from recbole.data import create_dataset, data_preparation
        from recbole.utils import init_seed

        config = Config(model=self.recbole_model, dataset=DATASET, config_dict=self.recbole_config(data, run_dir))
        init_seed(config["seed"], config["reproducibility"])
        dataset = create_dataset(config)
        if self.kind == "sequential":
            # the model's position table = the window, as RecBole's own augmentation would give
            dataset.field2seqlen[dataset.item_id_list_field] = self.cfg.max_item_list_length
        train_data, valid_data, _ = data_preparation(config, dataset)
        return config, dataset, train_data, valid_data

    def recbole_splits(self, task: TaskData) -> dict[str, dict[str, np.ndarray]]:
        """What RecBole actually reads for training and validation, mapped back to training-pool
        positions: ``{"train": {"user", "target", "history" (Ragged)}, "valid": ...}``."""
        data = write_recbole_data(task, "sequential" if self.kind == "sequential" else "general",
                                  self.cfg.max_item_list_length, Path(self.context.cache_dir) / "recbole")
        run_dir = Path(self.context.cache_dir) / "recbole" / f"{self.recbole_model}-inspect"
        with recbole_session(run_dir):
            _, dataset, train_data, valid_data = self._build(data, run_dir)
        tokens = dataset.field2id_token["item_id"]
        users = dataset.field2id_token["user_id"]
        out = {}
        for split, dl in (("train", train_data), ("valid", valid_data)):
            feat = dl.dataset.inter_feat
            entry: dict[str, Any] = {"user": users[feat["user_id"].numpy()],
                                     "target": tokens[feat["item_id"].numpy()].astype(np.int64)}
            if self.kind == "sequential":
                seq, lens = feat["item_id_list"].numpy(), feat["item_length"].numpy()
                entry["history"] = Ragged.from_rows([tokens[s[:n]].astype(np.int64) for s, n in zip(seq, lens)])
            out[split] = entry
        return out

    # ---------------------------------------------------------------------------- fit

    def fit(self, task: TaskData) -> None:
        import torch

        t0 = time.perf_counter()
        kind = "sequential" if self.kind == "sequential" else "general"
        cache = Path(self.context.cache_dir) / "recbole"
        data = write_recbole_data(task, kind, self.cfg.max_item_list_length, cache)
        run_dir = cache / f"{self.recbole_model}-{self.run_key(data)}"
        weights, meta_path = run_dir / "model.pt", run_dir / "meta.json"
        self._task_name = task.spec.name
        self._fit_index = {str(i): k for k, i in enumerate(task.fit_pool.ids)}
        self._user_token = data.user_token
        with recbole_session(run_dir):
            config, dataset, train_data, valid_data = self._build(data, run_dir)
            from recbole.utils import get_model

            model = get_model(config["model"])(config, train_data.dataset).to(config["device"])
            meta, unusable = (self._cached(model, weights, meta_path, config["device"]) if self.cfg.reuse
                              else (None, ""))
            if meta is not None:
                if "training_budget" not in meta:  # a model cached before budgets were recorded
                    meta["training_budget"] = self._budget(meta, train_data, model)
                meta["reused"] = True
            else:
                meta = self._train(config, model, train_data, valid_data, run_dir)
                with atomic_path(weights) as tmp:
                    torch.save(model.state_dict(), tmp)
                _atomic_json(meta_path, meta)
                meta["reused"] = False
        if unusable:  # said outside the session, which silences RecBole's warnings
            warnings.warn(f"cached model {weights} cannot be loaded as plain weights ({unusable}); trained again",
                          stacklevel=2)
        model.eval()
        self.model, self._dataset = model, dataset
        item_tok = dataset.field2token_id["item_id"]
        self._fit_rb = np.array([item_tok.get(str(k), 0) for k in range(len(task.fit_pool))], dtype=np.int64)
        self._user_rb = dataset.field2token_id["user_id"]
        self._fm_users = None
        self._item_vecs = self._item_table()
        self._pool_rb = self._fit_rb.copy()
        self.info.update({"kind": self.kind, "run_dir": str(run_dir), "data_dir": str(data.root),
                          "n_items_vocab": int(dataset.item_num - 1), "n_users": int(dataset.user_num - 1),
                          **{f"data_{k}": v for k, v in data.stats.items()}, **meta,
                          "fit_s": round(time.perf_counter() - t0, 3)})
        if self.cfg.item_text_features:
            self._fit_text_projection(task)

    def _cached(self, model: Any, weights: Path, meta_path: Path, device: Any) -> tuple[dict[str, Any] | None, str]:
        """Load a cached model into ``model``: (its meta, ""), or (None, why it is unusable; "" when
        there is none). Only plain tensors are read (``weights_only``): the cache may sit on shared
        storage, and a planted pickle must not run."""
        import torch

        if not (weights.exists() and meta_path.exists()):
            return None, ""
        try:
            state = torch.load(weights, map_location=device, weights_only=True)
            own = model.state_dict()
            if not isinstance(state, dict) or set(state) != set(own) or any(
                    not isinstance(state[k], torch.Tensor) or state[k].shape != v.shape for k, v in own.items()):
                raise ValueError("its tensors do not fit the model")
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError(f"{meta_path.name} is not a JSON object")
        except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt
            return None, (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        model.load_state_dict(state)
        return meta, ""

    def _train(self, config: Any, model: Any, train_data: Any, valid_data: Any, run_dir: Path) -> dict[str, Any]:
        from recbole.utils import get_trainer

        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        curve: list[tuple[int, float, float]] = []
        t0 = time.perf_counter()
        show = bool(getattr(self.context, "show_progress", True))
        rows, steps = int(train_data.sample_size), int(len(train_data))
        points: list[dict[str, Any]] = []  # the rbench training curve (see rbench.results.training_budget)
        train_epoch, valid_epoch = trainer._train_epoch, trainer._valid_epoch

        def on_train_epoch(data: Any, epoch_idx: int, *args: Any, **kwargs: Any) -> Any:
            loss = train_epoch(data, epoch_idx, *args, **kwargs)  # the sum of the batches' losses
            total = sum(loss) if isinstance(loss, tuple) else loss
            n = len(points) + 1
            points.append({"epoch": float(epoch_idx + 1), "step": n * steps, "examples": n * rows,
                           "train_loss": None if total is None else round(float(total) / max(steps, 1), 6),
                           "valid_MRR": None, "seconds": round(time.perf_counter() - t0, 3)})
            return loss

        def on_valid_epoch(data: Any, *args: Any, **kwargs: Any) -> Any:
            score, result = valid_epoch(data, *args, **kwargs)
            if points:
                mrr = (result or {}).get("mrr@10")
                points[-1]["valid_MRR"] = None if mrr is None else round(float(mrr), 6)
                points[-1]["seconds"] = round(time.perf_counter() - t0, 3)
            return score, result

        def on_epoch(epoch: int, score: float) -> None:
            curve.append((epoch, float(score), time.perf_counter() - t0))
            if show:
                best = max(s for _, s, _ in curve)
                print(f"  {self.name} epoch {epoch}: valid {self.cfg.valid_metric}={score:.4f} "
                      f"(best {best:.4f}) {curve[-1][2]:.0f}s", file=sys.stderr, flush=True)

        best: dict[str, Any] = {}

        def keep_best(epoch: int, verbose: bool = True, **kwargs: Any) -> None:
            # instead of RecBole's pickled checkpoint (config object and all), which only a
            # weights_only=False load could read back: the best state stays in memory
            best.update(epoch=epoch, other_parameter=copy.deepcopy(model.other_parameter()),
                        state_dict={k: v.detach().clone() for k, v in model.state_dict().items()})

        trainer._train_epoch, trainer._valid_epoch = on_train_epoch, on_valid_epoch
        trainer._save_checkpoint = keep_best
        best_score, _ = trainer.fit(train_data, valid_data, saved=True, show_progress=self.cfg.show_progress,
                                    callback_fn=on_epoch)
        train_s = time.perf_counter() - t0
        if best:
            model.load_state_dict(best["state_dict"])
            model.load_other_parameter(best["other_parameter"])
        best_epoch = int(best.get("epoch", -1))
        epochs_run = len(trainer.train_loss_dict)
        meta = {"epochs_run": epochs_run, "best_epoch": best_epoch, "train_s": round(train_s, 2),
                "s_per_epoch": round(train_s / max(epochs_run, 1), 2),
                "early_stopping": {"metric": self.cfg.valid_metric, "best": float(best_score),
                                   "note": "RecBole full-sort on the validation split; not an rbench metric"},
                "valid_curve": [(e, round(s, 5)) for e, s, _ in curve],
                "training_curve": points,
                "training_curve_note": ("train_loss: mean over the epoch's batches of RecBole's training loss; "
                                        "valid_MRR: RecBole's full-sort MRR@10 on the validation split")}
        meta["training_budget"] = self._budget(meta, train_data, model)
        return meta

    def _budget(self, meta: dict[str, Any], train_data: Any, model: Any) -> dict[str, Any]:
        """The training budget (``rbench.results.training_budget``) of a training run described by ``meta``: one
        optimizer step per batch of RecBole's training dataloader, every row once per epoch."""
        rows, steps = int(train_data.sample_size), int(len(train_data))
        epochs = int(meta.get("epochs_run", 0))
        neg = getattr(train_data, "neg_sample_args", None) or {}
        if neg.get("distribution", "none") == "none":  # CE: logits over the whole item table
            negatives: int | str = f"all {int(train_data.dataset.item_num) - 1} items (full softmax)"
        else:
            negatives = int(neg.get("sample_num", 1))
        n_evals = len(meta.get("valid_curve") or ())
        best = meta.get("best_epoch", -1)
        return {"examples_seen": rows * epochs, "epochs": float(epochs), "optimizer_steps": steps * epochs,
                "train_wall_s": float(meta.get("train_s", 0.0)), "negatives_per_example": negatives,
                "trainable_params": int(sum(p.numel() for p in model.parameters() if p.requires_grad)),
                "selection": (f"best valid {self.cfg.valid_metric} (RecBole full sort) of {n_evals} evaluations"
                              + (f", epoch {int(best) + 1}" if isinstance(best, int) and best >= 0 else ""))}

    # ---------------------------------------------------------------------------- vectors

    def _item_table(self) -> np.ndarray:
        """RecBole item id -> candidate vector such that <query, vector> = the model's score."""
        import torch

        m = self.model
        with torch.no_grad():
            if self.recbole_model == "BERT4Rec":
                emb = m.item_embedding.weight[: m.n_items]
                return torch.cat([emb, m.output_bias[:, None]], dim=1).float().cpu().numpy()
            if self.kind == "context":
                return self._fm_parts()[1]
            return m.item_embedding.weight.float().cpu().numpy()

    def _fm_parts(self) -> tuple[np.ndarray, np.ndarray]:
        """FM as an inner product: user rows [v_u, 1, w_u + b - c], item rows [v_i, w_i + c, 1]
        (c = the reference row's constant), so that <user, item> = b + w_u + w_i + <v_u, v_i>."""
        import torch
        from recbole.data.interaction import Interaction

        m, ds = self.model, self._dataset
        names = list(m.token_field_names)
        if sorted(names) != ["item_id", "user_id"] or m.float_field_names or m.token_seq_field_names:
            raise RBenchError(f"FM expects exactly the fields user_id and item_id, got {names}")
        ju, ji = names.index("user_id"), names.index("item_id")
        dev = next(m.parameters()).device
        with torch.no_grad():
            n_u, n_i = ds.user_num, ds.item_num
            iu = Interaction({"user_id": torch.zeros(n_i, dtype=torch.long), "item_id": torch.arange(n_i)}).to(dev)
            ui = Interaction({"user_id": torch.arange(n_u), "item_id": torch.zeros(n_u, dtype=torch.long)}).to(dev)
            v_i = m.concat_embed_input_fields(iu)[:, ji]
            v_u = m.concat_embed_input_fields(ui)[:, ju]
            lin_i = m.first_order_linear(iu).reshape(-1)  # b + w_u0 + w_i
            lin_u = m.first_order_linear(ui).reshape(-1)  # b + w_u + w_i0
            ref = lin_i[0]  # b + w_u0 + w_i0 (row 0 = the padding item)
            users = torch.cat([v_u, torch.ones(n_u, 1, device=dev), (lin_u - ref)[:, None]], dim=1)
            items = torch.cat([v_i, lin_i[:, None], torch.ones(n_i, 1, device=dev)], dim=1)
        return users.float().cpu().numpy(), items.float().cpu().numpy()

    def _fit_text_projection(self, task: TaskData) -> None:
        """Ridge least squares from text embeddings to learned item vectors (training items)."""
        from rbench_rankers.dense import DenseOptions, DenseRanker

        enc = DenseRanker(DenseOptions(model=self.cfg.text_model), self.context)
        text = np.asarray(enc.encode_pool(task.fit_pool), dtype=np.float64)
        used = np.unique(np.concatenate([task.train.positives.values,
                                         task.train.history.values if task.train.history is not None else [],
                                         task.valid.history.values if task.valid.history is not None else []]
                                        ).astype(np.int64))
        x = np.hstack([text[used], np.ones((len(used), 1))])
        y = self._item_vecs[self._fit_rb[used]].astype(np.float64)
        # penalty relative to the text features' mean variance, so one value suits any encoder
        xc = x[:, :-1] - x[:, :-1].mean(axis=0)
        lam = self.cfg.text_ridge * float((xc**2).sum()) / xc.shape[1]
        reg = lam * np.eye(x.shape[1])
        reg[-1, -1] = 0.0  # no penalty on the intercept
        w = np.linalg.solve(x.T @ x + reg, x.T @ y)
        resid = y - x @ w
        r2 = 1.0 - float((resid**2).sum() / max(((y - y.mean(axis=0)) ** 2).sum(), 1e-12))
        self._text_encoder, self._text_w = enc, w.astype(np.float32)
        self.info["text_projection"] = {"model": self.cfg.text_model, "items_fitted": int(len(used)),
                                        "ridge": self.cfg.text_ridge, "r2_train_items": round(r2, 4),
                                        "text_dim": int(text.shape[1]), "applies_to": self.cfg.text_items}

    def encode_pool(self, pool: Pool) -> np.ndarray:
        if self._item_vecs is None:
            raise RBenchError(f"ranker {self.name!r}: fit() must run before scoring")
        fit_pos = match_to_fit(pool, self._fit_index, self._task_name)
        rb = np.where(fit_pos >= 0, self._fit_rb[np.maximum(fit_pos, 0)], 0)
        seen = rb > 0
        vecs = self._item_vecs[rb].astype(np.float32, copy=True)
        vecs[~seen] = 0.0
        projected = np.zeros(len(pool), dtype=bool)
        if self.cfg.item_text_features:
            use = np.ones(len(pool), dtype=bool) if self.cfg.text_items == "all" else ~seen
            if use.any():
                text = np.asarray(self._text_encoder.encode_pool(pool), dtype=np.float32)
                idx = np.flatnonzero(use)
                vecs[idx] = text[idx] @ self._text_w[:-1] + self._text_w[-1]
                projected = use
        last = ~seen & ~projected
        self._pool_rb = rb
        self._unseen_col = bool(last.any())
        self.info.update({"pool_candidates": int(len(pool)), "unseen_candidates": int((~seen).sum()),
                          "text_projected_candidates": int(projected.sum())})
        if self._unseen_col:
            self.info["unseen_policy"] = ("ranked after every seen candidate (score below the minimum; ties "
                                          "among them broken pessimistically)")
            self._max_norm = float(np.linalg.norm(vecs, axis=1).max()) if len(vecs) else 0.0
            vecs = np.hstack([vecs, np.where(last, -1.0, 0.0).astype(np.float32)[:, None]])
        return vecs

    def _sequences(self, queries: Queries) -> tuple[np.ndarray, np.ndarray]:
        """Histories -> RecBole item ids, right-padded (RecBole's layout), last L items."""
        if queries.history is None:
            raise RBenchError(f"ranker {self.name!r} needs Queries.history (a recommendation task)")
        L = int(self.model.max_seq_length)
        pool_rb = self._pool_rb if self._pool_rb is not None else self._fit_rb
        seq = np.zeros((len(queries), L), dtype=np.int64)
        lens = np.zeros(len(queries), dtype=np.int64)
        dropped = 0
        for i in range(len(queries)):
            ids = pool_rb[queries.history[i]]
            known = ids[ids > 0]
            dropped += len(ids) - len(known)
            known = known[-L:]
            seq[i, : len(known)] = known
            lens[i] = len(known)
        self.info["history_items_dropped_unseen"] = self.info.get("history_items_dropped_unseen", 0) + dropped
        return seq, lens

    def _query_vectors(self, queries: Queries) -> np.ndarray:
        import torch

        m = self.model
        dev = next(m.parameters()).device
        if self.kind == "sequential":
            seq, lens = self._sequences(queries)
            out = np.zeros((len(queries), self._item_vecs.shape[1]), dtype=np.float32)
            ok = np.flatnonzero(lens > 0)
            self.info["queries_empty_history"] = self.info.get("queries_empty_history", 0) + int(len(queries) - len(ok))
            bs = self.cfg.eval_batch_size
            with torch.no_grad():
                for a in range(0, len(ok), bs):
                    rows = ok[a : a + bs]
                    s = torch.from_numpy(seq[rows]).to(dev)
                    n = torch.from_numpy(lens[rows]).to(dev)
                    if self.recbole_model == "BERT4Rec":
                        h = m.gather_indexes(m.forward(m.reconstruct_test_data(s, n)), n - 1)
                        h = torch.cat([h, torch.ones(len(rows), 1, device=dev)], dim=1)
                    else:
                        h = m.forward(s, n)
                    out[rows] = h.float().cpu().numpy()
            return out
        if queries.user_ids is None:
            raise RBenchError(f"ranker {self.name!r} needs Queries.user_ids (a recommendation task)")
        uid = np.array([self._user_rb.get(self._user_token.get(str(u), ""), 0) for u in queries.user_ids],
                       dtype=np.int64)
        self.info["queries_unknown_user"] = self.info.get("queries_unknown_user", 0) + int((uid == 0).sum())
        if self.kind == "context":
            if self._fm_users is None:
                self._fm_users = self._fm_parts()[0]
            out = self._fm_users[uid].copy()
        else:
            with torch.no_grad():
                out = m.user_embedding.weight.float().cpu().numpy()[uid]
        out[uid == 0] = 0.0
        return out

    def encode_queries(self, queries: Queries) -> np.ndarray:
        if self.model is None:
            raise RBenchError(f"ranker {self.name!r}: fit() must run before scoring")
        q = self._query_vectors(queries)
        if self._unseen_col:
            big = 2.0 * np.linalg.norm(q, axis=1) * self._max_norm + 1.0
            q = np.hstack([q, big.astype(np.float32)[:, None]])
        return q


class SASRecRanker(RecBoleRanker):
    """SASRec (Kang & McAuley 2018): causal self-attention over the history."""

    name = "sasrec"
    description = "SASRec trained through RecBole, full-sort scored by rbench"
    Config = SASRecOptions
    recbole_model = "SASRec"
    kind = "sequential"


class GRU4RecRanker(RecBoleRanker):
    """GRU4Rec (Hidasi et al. 2016): a GRU over the history."""

    name = "gru4rec"
    description = "GRU4Rec trained through RecBole, full-sort scored by rbench"
    Config = GRU4RecOptions
    recbole_model = "GRU4Rec"
    kind = "sequential"


class BERT4RecRanker(RecBoleRanker):
    """BERT4Rec (Sun et al. 2019): bidirectional self-attention, masked-item training."""

    name = "bert4rec"
    description = "BERT4Rec trained through RecBole, full-sort scored by rbench"
    Config = BERT4RecOptions
    recbole_model = "BERT4Rec"
    kind = "sequential"


class BPRRanker(RecBoleRanker):
    """BPR-MF (Rendle et al. 2009): user x item embeddings, pairwise loss."""

    name = "bpr"
    description = "BPR matrix factorisation trained through RecBole (user x item)"
    Config = BPROptions
    recbole_model = "BPR"
    kind = "general"


class FMRanker(RecBoleRanker):
    """FM (Rendle 2010) over the user and item id fields (point-wise, negative sampling)."""

    name = "fm"
    description = "factorisation machine over user and item ids, trained through RecBole"
    Config = FMOptions
    recbole_model = "FM"
    kind = "context"
