"""Prefix caching of query prompts for causal backbones (test-time scaling without re-reading the
prompt).

Every query embedding LRanker computes for one query, E^(0) and the E_m of every partition of
every round, runs the same tokens through the backbone; only the input vector at the
``<|embedding|>`` position differs (the projector output g~ of that partition's centroids). In a
causal backbone the hidden states before the placeholder cannot see it, so they are the same for
all of them. The prompt template puts the placeholder near the end ("Task: ...\\n\\nQuery:
{query}\\n\\n<|embedding|> {instruction}"), so this prefix is most of the sequence.

``PrefixCache`` therefore runs, per query, the prefix once (keeping its KV cache and the masked
sum of its final hidden states, the prefix's share of the mean-pooled h_q) and, per partition,
only the suffix (placeholder, instruction, ``<eos>``) on top of the cached keys and values; the
suffixes of all parts in a call run as one batch. h_q = (prefix sum + suffix sum) / (number of
pooled positions), i.e. exactly the mean of ``LRankerModel.pool`` over the full sequence.

Batching: prefixes of different queries are right-padded to a common length; a part's attention
mask is [its prefix's real positions, padding, its suffix], and its position ids continue from
its own prefix length, so each row sees what its full forward pass would (the rotary positions of
the cached keys are those of the unpadded prefix). Encoders (bidirectional attention), models
with sliding-window layers, and prompts without a placeholder or with nothing before it use the
full forward pass (``supports_prefix_cache``).

Memory: the prefix of one query costs layers x 2 x kv_heads x head_dim x prefix_len values
(SmolLM2-135M, 200 tokens, fp32: ~9 MB; Qwen3-0.6B bf16: ~23 MB). The cache keeps at most
``capacity`` queries (least recently used first out); the ranker runs test-time scaling in
chunks of queries no larger than that, so each query's prefix is computed once per ``encode``.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


class NoPrefix(ValueError):
    """A prompt has nothing before its placeholder: the caller uses the full pass."""


def finish(model: Any, h: torch.Tensor) -> torch.Tensor:
    """The model's last step on a pooled h_q (its ``finish`` if it has one, else ``normalize``)."""
    fn = getattr(model, "finish", None)
    if callable(fn):
        return fn(h)
    return F.normalize(h, dim=-1) if getattr(model.cfg, "normalize", False) else h


def supports_prefix_cache(model: Any) -> bool:
    """Causal backbone with full attention in every layer and a placeholder in the prompt."""
    if getattr(model.info, "kind", None) != "causal" or not model.cfg.global_info:
        return False
    conf = getattr(_base(model.backbone), "config", None)
    if conf is None:
        return False
    if not getattr(conf, "is_causal", True) or getattr(conf, "is_encoder_decoder", False):
        return False
    types = getattr(conf, "layer_types", None)
    if types is not None and any(t != "full_attention" for t in types):
        return False
    if getattr(conf, "use_sliding_window", False) and getattr(conf, "sliding_window", None):
        return False
    return True


def _base(backbone: Any) -> Any:
    """The transformers model under a peft wrapper."""
    get = getattr(backbone, "get_base_model", None)
    return get() if callable(get) else backbone


@dataclass
class _Entry:
    kv: torch.Tensor  # (layers, 2, kv_heads, prefix_len, head_dim), the backbone's dtype
    pooled: torch.Tensor  # (hidden,) fp32 masked sum of the prefix's final hidden states
    count: float  # pooled positions in the prefix
    suffix_ids: list[int]  # placeholder (first), instruction tokens, <eos>
    suffix_pool: list[float]


def _cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) of a transformers cache, old and new layouts."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v, *_ in cache]  # legacy tuple of tuples


def _make_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=list(layers))
    except TypeError:  # transformers < 4.56
        return DynamicCache.from_legacy_cache(tuple(layers))


class PrefixCache:
    """h_q of many (query, soft vector) pairs with each query's prompt prefix run once.

    ``prompts``/``texts`` are the full query list the row indices refer to."""

    def __init__(self, model: Any, prompts: Sequence[str], texts: Sequence[str], capacity: int = 64,
                 prefix_batch: int | None = None, kv_budget: int = 2 << 30) -> None:
        self.model, self.prompts, self.texts = model, prompts, texts
        self.capacity = max(1, int(capacity))
        self.kv_budget = int(kv_budget)  # bytes of expanded prefix KV per suffix batch
        self.prefix_batch = max(1, int(prefix_batch or model.cfg.encode_batch_size))
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
        self.stats = {"prefix_rows": 0, "prefix_tokens": 0, "suffix_rows": 0, "suffix_tokens": 0}

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, rows: np.ndarray, soft: torch.Tensor) -> torch.Tensor:
        """Finished h_q (P, hidden) for query rows ``rows`` (P,) with soft vectors ``soft`` (P, hidden)."""
        rows = np.asarray(rows, dtype=np.int64)
        entries = self._entries(rows)
        # each part gets its own copy of its prefix's keys/values: bound the batch by their size
        kv = max((e.kv for e in entries.values()), key=lambda t: t.shape[3])
        per_part = kv.element_size() * kv.numel()
        step = max(1, min(len(rows), self.kv_budget // max(1, per_part)))
        out = [self._suffix(rows[a : a + step], entries, soft[a : a + step]) for a in range(0, len(rows), step)]
        return finish(self.model, torch.cat(out) if len(out) > 1 else out[0])

    def _entries(self, rows: np.ndarray) -> dict[int, _Entry]:
        need = list(dict.fromkeys(int(r) for r in rows))
        got: dict[int, _Entry] = {}
        missing = []
        for r in need:
            if r in self.entries:
                self.entries.move_to_end(r)
                got[r] = self.entries[r]
            else:
                missing.append(r)
        for a in range(0, len(missing), self.prefix_batch):
            chunk = missing[a : a + self.prefix_batch]
            for r, e in zip(chunk, self._prefixes(chunk)):
                got[r] = e
                self.entries[r] = e
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
        return got

    def _prefixes(self, rows: list[int]) -> list[_Entry]:
        """Tokenise ``rows``, split at the placeholder, run the prefixes as one batch."""
        model = self.model
        tok = model.tokens
        batch = tok.queries([self.prompts[r] for r in rows], [self.texts[r] for r in rows], with_placeholder=True)
        lengths = batch.attention_mask.sum(1).tolist()
        ph = batch.placeholder.tolist()
        if min(ph) < 1:
            raise NoPrefix("prefix caching needs at least one token before the placeholder")
        Lp = max(ph)
        ids = batch.input_ids[:, :Lp].clone()
        att = (torch.arange(Lp)[None, :] < torch.tensor(ph)[:, None]).long()
        ids[att == 0] = tok.pad_id
        pool = batch.pool_mask[:, :Lp] * att
        device = model.device
        x = model.backbone.get_input_embeddings()(ids.to(device))
        pos = torch.arange(Lp, device=device)[None, :].expand(len(rows), -1)
        out = model.backbone(inputs_embeds=x, attention_mask=att.to(device), position_ids=pos, use_cache=True)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        pooled = (hidden.float() * pool.to(device)[:, :, None]).sum(1)
        kv = torch.stack([torch.stack([k, v]) for k, v in _cache_layers(out.past_key_values)])  # (layers,2,B,h,L,d)
        self.stats["prefix_rows"] += len(rows)
        self.stats["prefix_tokens"] += int(sum(ph))
        entries = []
        for b in range(len(rows)):
            p, n = ph[b], lengths[b]
            entries.append(_Entry(kv=kv[:, :, b, :, :p].clone(), pooled=pooled[b].clone(),
                                  count=float(pool[b].sum()),
                                  suffix_ids=batch.input_ids[b, p:n].tolist(),
                                  suffix_pool=batch.pool_mask[b, p:n].tolist()))
        return entries

    def _suffix(self, rows: np.ndarray, entries: dict[int, _Entry], soft: torch.Tensor) -> torch.Tensor:
        """One forward pass of every part's suffix on top of its query's cached prefix."""
        model, tok, device = self.model, self.model.tokens, self.model.device
        uniq = list(dict.fromkeys(int(r) for r in rows))
        slot = {r: j for j, r in enumerate(uniq)}
        Lp = max(entries[r].kv.shape[3] for r in uniq)
        Ls = max(len(entries[r].suffix_ids) for r in uniq)
        first = entries[uniq[0]].kv
        layers, _, heads, _, hd = first.shape
        kv = first.new_zeros((layers, 2, len(uniq), heads, Lp, hd))
        for j, r in enumerate(uniq):
            kv[:, :, j, :, : entries[r].kv.shape[3]] = entries[r].kv
        pick = torch.tensor([slot[int(r)] for r in rows], device=kv.device)
        kv = kv.index_select(2, pick)  # (layers, 2, P, heads, Lp, hd)
        P = len(rows)
        ids = torch.full((P, Ls), tok.pad_id, dtype=torch.long)
        pool = torch.zeros((P, Ls), dtype=torch.float32)
        att = torch.zeros((P, Lp + Ls), dtype=torch.long)
        pos = torch.zeros((P, Ls), dtype=torch.long)
        for j, r in enumerate(rows):
            e = entries[int(r)]
            p, s = e.kv.shape[3], len(e.suffix_ids)
            ids[j, :s] = torch.tensor(e.suffix_ids)
            pool[j, :s] = torch.tensor(e.suffix_pool)
            att[j, :p] = 1
            att[j, Lp : Lp + s] = 1
            pos[j] = p + torch.arange(Ls)
        ids = ids.masked_fill(ids == tok.placeholder_id, tok.eos_id)
        x = model.backbone.get_input_embeddings()(ids.to(device))
        x[:, 0] = soft.to(device, x.dtype)  # the placeholder opens every suffix
        cache = _make_cache([(kv[i, 0], kv[i, 1]) for i in range(layers)])
        out = model.backbone(inputs_embeds=x, attention_mask=att.to(device), position_ids=pos.to(device),
                             past_key_values=cache, use_cache=True)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        pool = pool.to(device)
        total = (hidden.float() * pool[:, :, None]).sum(1)
        total = total + torch.stack([entries[int(r)].pooled for r in rows])
        count = pool.sum(1) + torch.tensor([entries[int(r)].count for r in rows], device=device)
        self.stats["suffix_rows"] += P
        self.stats["suffix_tokens"] += int(pool.new_tensor([len(entries[int(r)].suffix_ids) for r in rows]).sum())
        return total / count.clamp_min(1.0)[:, None]


class PrefixSessions:
    """Keeps one ``PrefixCache`` alive for the duration of an outermost call (``session()``), for
    one ``Queries`` object; dropped when that call ends, so a cache never outlives the weights it
    was computed with (validation during training re-encodes the same queries)."""

    def __init__(self) -> None:
        self.depth = 0
        self.key: Any = None
        self.cache: PrefixCache | None = None

    @contextlib.contextmanager
    def session(self):
        self.depth += 1
        try:
            yield self
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.key, self.cache = None, None

    def get(self, model: Any, queries: Any, prompts: Sequence[str], texts: Sequence[str], capacity: int) -> PrefixCache:
        if self.cache is None or self.key is not queries or self.cache.model is not model:
            self.key, self.cache = queries, PrefixCache(model, prompts, texts, capacity=capacity)
        return self.cache


def sessions_for(owner: Any) -> PrefixSessions:
    """The ``PrefixSessions`` of a ranker (created on first use)."""
    sessions = getattr(owner, "_prefix_sessions", None)
    if sessions is None:
        sessions = PrefixSessions()
        owner._prefix_sessions = sessions
    return sessions
