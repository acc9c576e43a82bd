"""RankLLaMA (Ma et al. 2023, "Fine-Tuning LLaMA for Multi-Stage Text Retrieval"): a Llama
decoder with a one-output sequence-classification head, fine-tuned with LoRA; the score of a
pair is the head's output at the last token.

Setup, as its authors release it (``castorini/rankllama-v1-7b-lora-passage``):

- Backbone ``transformers.AutoModelForSequenceClassification`` (``num_labels=1``) of ``base``
  (default ``meta-llama/Llama-2-7b-hf``) plus the peft LoRA ``adapter`` (default
  ``castorini/rankllama-v1-7b-lora-passage``), merged into the weights once loaded.
  ``adapter=""`` scores with the base model alone. Either option takes a local folder; ``base``
  also takes a ``.gguf`` file or the offline alias ``smollm2-135m`` (the SmolLM2-135M GGUF at
  ``~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf``; its classification head is then random).
- Input: the pair (``query: {q}</s>``, ``document: {d}</s>``) through the tokenizer (which adds
  its BOS), ``</s>`` being the tokenizer's EOS token; truncated to ``max_length`` tokens
  (``only_second`` first: the document is cut before the query).
- Score: the head applied to the final hidden state of the last real token (right padding, the
  index taken from the attention mask, so the padding token's id never matters), fp32 on CPU,
  bf16 on CUDA (``dtype``).
- ``pairwise = True`` (scored pair by pair: used through ``--rerank-from``) and
  ``rerank_depth = default_depth = 200``, the depth its authors rerank.
- ``fit=true`` trains a LoRA (r 32, alpha 64, dropout 0.1 on every attention and MLP projection,
  plus the score head) on the train split with RankLLaMA's contrastive recipe: groups of one
  positive and ``negatives`` (15) first-stage hard negatives (BM25 top ``hard_depth``), softmax
  cross-entropy of the positive within its group, AdamW lr 1e-4 with warm-up; the adapter is
  merged afterwards. Without it the released adapter is used as is.
- Every model that cannot be found offline answers with ``rbench_rankers.models``'s one-line error
  telling how to pass a local folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from rbench.api import DOMAINS, Pool
from rbench.plugin import AtLeast1, DropoutRate, Positive, Range, RBenchError
from rbench_rankers.cross_encoder import HardDepth, PairRanker, torch_device
from rbench_rankers.models import from_pretrained, quiet_loading, resolve_folder, resolve_model


@dataclass
class RankLlamaOptions:
    """Options of the ``rankllama`` ranker."""

    base: str = "meta-llama/Llama-2-7b-hf"  # hub name, local folder, .gguf file, or smollm2-135m
    adapter: str = "castorini/rankllama-v1-7b-lora-passage"  # peft LoRA adapter ("" = none)
    revision: str = ""  # of the base model
    query_template: str = "query: {query}"
    document_template: str = "document: {document}"
    max_length: Annotated[int, Range(8)] = 512  # tokens per pair
    batch_size: AtLeast1 = 8
    device: str = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    fit: bool = False  # LoRA-train on the train split (RankLLaMA's contrastive recipe)
    lora_r: AtLeast1 = 32
    lora_alpha: AtLeast1 = 64
    lora_dropout: DropoutRate = 0.1
    train_steps: AtLeast1 = 200
    train_batch_size: AtLeast1 = 16  # pairs per step (whole groups of 1 positive + negatives)
    negatives: AtLeast1 = 15  # RankLLaMA's group of 16 (1 positive + 15 hard negatives)
    lr: Positive = 1e-4
    hard_negatives: Literal["bm25", "random"] = "bm25"
    hard_depth: HardDepth = 200  # negatives come from the first stage's top hard_depth

    def validate(self) -> None:
        if "{query}" not in self.query_template or "{document}" not in self.document_template:
            raise RBenchError("query_template needs {query} and document_template needs {document}")


def _locate(name: str, revision: str = "") -> tuple[Path, str | None, str]:
    """(folder, gguf file or None, source) of a base model or adapter, offline first."""
    low = name.lower()
    if low.endswith(".gguf") or low.startswith("smollm2-135m"):
        where, gguf = resolve_model(name)
        if not Path(where).exists():
            raise RBenchError(f"model {name!r} not found; pass a local folder: --set base=/path/to/model")
        return Path(where), gguf, "local"
    r = resolve_folder(name, revision)
    return r.path, None, r.source


class RankLlamaRanker(PairRanker):
    """RankLLaMA pointwise reranker: Llama + LoRA, score of the last token's classification head.

    ``pairwise = True``: it scores pairs one by one, so the harness uses it through
    ``--rerank-from S`` (default depth ``rerank_depth = 200``) and refuses exhaustive runs above
    its pair budget unless forced."""

    name = "rankllama"
    version = "1"
    description = "RankLLaMA reranker (Llama-2-7B + castorini LoRA adapter; last-token score)"
    Config = RankLlamaOptions
    domains = DOMAINS
    pairwise = True
    default_depth = 200
    rerank_depth = 200
    presets = {"rankllama-v1-7b": {"base": "meta-llama/Llama-2-7b-hf",
                                   "adapter": "castorini/rankllama-v1-7b-lora-passage",
                                   "query": "query: {query}</s>", "document": "document: {document}</s>"}}

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self._model: Any = None
        self._tok: Any = None
        self._pool: Pool | None = None
        self.info: dict[str, Any] = {}

    def load(self) -> tuple[Any, Any]:
        if self._model is not None:
            return self._model, self._tok
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        cfg = self.cfg
        t0 = time.perf_counter()
        base, gguf, source = _locate(cfg.base, cfg.revision)
        adapter = _locate(cfg.adapter)[0] if cfg.adapter else None
        dev = torch_device(cfg.device)
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
            cfg.dtype, torch.bfloat16 if dev.startswith("cuda") else torch.float32)
        quiet_loading()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        extra = {"gguf_file": gguf} if gguf else {}
        try:
            torch.manual_seed(int(getattr(self.context, "seed", 0)))  # a head missing from the weights
            tok = from_pretrained(AutoTokenizer, base, **extra)
            model = from_pretrained(AutoModelForSequenceClassification, base, num_labels=1, dtype=dtype, **extra)
            if adapter is not None:
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, str(adapter), local_files_only=True).merge_and_unload()
        except (OSError, ValueError) as exc:
            raise RBenchError(f"cannot load rankllama base {cfg.base!r} / adapter {cfg.adapter!r} from {base}: "
                              f"{' '.join(str(exc).split())[:300]}") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        if tok.eos_token is None:
            raise RBenchError(f"rankllama: the tokenizer of {cfg.base!r} has no EOS token")
        if tok.pad_token is None:
            tok.pad_token = tok.unk_token or tok.eos_token  # padding positions are masked anyway
        tok.padding_side = "right"
        self._model, self._tok = model.to(dev).eval(), tok
        self.info.update({"base": cfg.base, "base_path": str(base), "gguf_file": gguf, "base_source": source,
                          "adapter": cfg.adapter, "adapter_path": str(adapter) if adapter else "",
                          "device": dev, "dtype": str(dtype).removeprefix("torch."),
                          "load_s": round(time.perf_counter() - t0, 3)})
        return self._model, self._tok

    def inputs(self, qs: list[str], docs: list[str]) -> Any:
        """Tokenized pairs: (``query: q</s>``, ``document: d</s>``), right-padded."""
        tok = self._tok
        eos = tok.eos_token
        a = [self.cfg.query_template.format(query=q) + eos for q in qs]
        b = [self.cfg.document_template.format(document=d) + eos for d in docs]
        try:
            return tok(a, b, padding=True, truncation="only_second", max_length=self.cfg.max_length,
                       return_tensors="pt")
        except Exception:  # a query alone longer than max_length: cut both
            return tok(a, b, padding=True, truncation="longest_first", max_length=self.cfg.max_length,
                       return_tensors="pt")

    @staticmethod
    def pair_logits(clf: Any, enc: Any) -> Any:
        """The head's (pairs, 1) output at each pair's last real token (right padding)."""
        import torch

        hidden = clf.base_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        last = enc["attention_mask"].sum(dim=1) - 1
        return clf.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])

    def fit(self, task: Any) -> None:
        """``fit=true``: LoRA on every attention and MLP projection plus a trained head, the
        listwise loss over groups of one positive and ``negatives`` first-stage hard negatives
        (``PairRanker.train_groups``); the adapter is merged into the weights afterwards."""
        if not self.cfg.fit:
            return
        from peft import LoraConfig, get_peft_model

        cfg = self.cfg
        model, _ = self.load()
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                          modules_to_save=["score"], task_type="SEQ_CLS")
        peft_model = get_peft_model(model, lora)
        clf = peft_model.base_model.model
        dev = next(clf.parameters()).device
        self.train_groups(task, peft_model, lambda qs, docs: self.pair_logits(clf, self.inputs(qs, docs).to(dev)),
                          [p for p in peft_model.parameters() if p.requires_grad], cfg.train_steps,
                          max(1, cfg.train_batch_size // (1 + cfg.negatives)), cfg.negatives, cfg.lr,
                          cfg.hard_negatives, cfg.hard_depth, "listwise")
        self._model = peft_model.merge_and_unload().eval()

    def score_pairs(self, qs: list[str], docs: list[str]) -> np.ndarray:
        import torch

        model, _ = self.load()
        out = np.zeros(len(qs), dtype=np.float32)
        order = np.argsort([-(len(q) + len(d)) for q, d in zip(qs, docs)], kind="stable")
        bs = self.cfg.batch_size
        with torch.inference_mode():
            for s in range(0, len(order), bs):
                idx = order[s : s + bs]
                enc = self.inputs([qs[i] for i in idx], [docs[i] for i in idx]).to(model.device)
                out[idx] = self.pair_logits(model, enc)[:, 0].float().cpu().numpy()
        return out
