"""TIGER's sequence-to-sequence model over semantic IDs, and its exact scoring of a whole pool.

Vocabulary: 0 = pad (also the decoder's start token, T5's convention), 1 = end of input, then
each ID level's codes in their own range (level ``l`` code ``c`` -> ``2 + offset_l + c``), then the
hashed user tokens (TIGER prepends one of 2,000 user buckets to the input). Encoder input:
``[user] c(h_1) .. c(h_n) </s>`` for the last ``max_history`` history items (oldest first);
decoder target: the target item's ``levels + 1`` codes. Training is T5's cross-entropy over the
full vocabulary, so the score of an item is exactly the model's log-likelihood of its ID.

**Exact scoring by the code tree.** log p(c1..c4 | h) = sum over steps of the log-softmax at the
step. All pool items' IDs form a trie; a decoder step per trie node (the node's last code on top
of its ancestors' cached self-attention keys/values) gives the next code's distribution for
every child at once. ``TreeScorer`` runs the trie level by level, batched over nodes and queries:
the nodes of a level are the "sequence" of one cross-attention call against the query's encoder
states (cross-attention does not mix decoder positions), so encoder keys/values are computed
once per query, never copied per node. Each node runs once: ~1 + 256 + 2N decoder tokens per
query instead of 4N for candidate-by-candidate teacher forcing (the test checks both agree).
The decoder step is written here from the T5 modules' own sub-layers (layer norms, projections,
relative-position bias, feed-forward), because transformers' cache API has no "per-row parent"
expansion; ``tests/rankers/test_tiger.py`` compares it with the HF forward pass.

**Beam mode** (pools above ``exact_max_items``): only the ``beam_size`` best prefixes of each
level are expanded; items whose full ID was reached are scored exactly and ranked first; every
other item is ranked after them by the log-likelihood of its deepest prefix that was scored
(score = depth * 1e4 + log p(prefix)).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

PAD, EOS, FIRST = 0, 1, 2
DEPTH_SCALE = 1e4  # beam mode: deeper prefixes always rank above shallower ones


@dataclass(frozen=True)
class Vocab:
    """Token layout of one semantic-ID space."""

    level_sizes: tuple[int, ...]  # codes per level, collision level last
    user_buckets: int

    @property
    def offsets(self) -> np.ndarray:
        return FIRST + np.concatenate([[0], np.cumsum(self.level_sizes)[:-1]]).astype(np.int64)

    @property
    def user_offset(self) -> int:
        return FIRST + int(sum(self.level_sizes))

    @property
    def size(self) -> int:
        return self.user_offset + self.user_buckets

    def tokens(self, codes: np.ndarray) -> np.ndarray:
        """(M, levels+1) codes -> token ids."""
        return np.asarray(codes, dtype=np.int64) + self.offsets[None, :]

    def user_token(self, user: Any) -> int:
        if self.user_buckets <= 0 or user is None:
            return -1
        h = int.from_bytes(hashlib.blake2b(str(user).encode(), digest_size=8).digest(), "little")
        return self.user_offset + h % self.user_buckets


def encoder_inputs(item_tokens: np.ndarray, histories: list[np.ndarray], users: list[Any] | None,
                   vocab: Vocab, max_history: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded encoder ids and attention mask for histories of item indices."""
    width = 1 + max_history * item_tokens.shape[1] + 1
    ids = np.zeros((len(histories), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, hist in enumerate(histories):
        hist = np.asarray(hist, dtype=np.int64)[-max_history:] if max_history else np.zeros(0, np.int64)
        u = vocab.user_token(users[i]) if users is not None else -1
        row = ([u] if u >= 0 else []) + item_tokens[hist].reshape(-1).tolist() + [EOS]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    keep = int(mask.sum(axis=1).max()) if len(mask) else 1
    return ids[:, :keep], mask[:, :keep]


def build_t5(vocab: Vocab, d_model: int, d_ff: int, num_layers: int, num_decoder_layers: int, num_heads: int,
             d_kv: int, dropout: float, seed: int) -> Any:
    """A T5 encoder-decoder from a config, randomly initialised (TIGER uses no pretrained weights)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=vocab.size, d_model=d_model, d_ff=d_ff, d_kv=d_kv, num_layers=num_layers,
                   num_decoder_layers=num_decoder_layers, num_heads=num_heads, dropout_rate=dropout,
                   feed_forward_proj="relu", relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, pad_token_id=PAD, eos_token_id=EOS,
                   decoder_start_token_id=PAD, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return T5ForConditionalGeneration(cfg)


# --------------------------------------------------------------------------------------------
# the code tree
# --------------------------------------------------------------------------------------------


@dataclass
class Trie:
    """The prefix tree of a set of IDs: per level, its nodes' parent and token; per item, its
    node at every level (level 0 = the root, level L+1 = the item itself)."""

    parent: list[np.ndarray]  # parent[l]: (R_l,) node index at level l-1 (level 0: [-1])
    token: list[np.ndarray]  # token[l]: (R_l,) the token that leads into the node (root: PAD)
    item_node: np.ndarray  # (M, depth) item's node at levels 0..depth-1 (the last run level)
    item_token: np.ndarray  # (M,) the item's last token

    @classmethod
    def build(cls, tokens: np.ndarray) -> Trie:
        m, depth = tokens.shape
        parent, token = [np.array([-1])], [np.array([PAD])]
        item_node = np.zeros((m, depth), dtype=np.int64)
        for level in range(1, depth):
            uniq, inv = np.unique(tokens[:, :level], axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            first = np.zeros(len(uniq), dtype=np.int64)
            first[inv[::-1]] = np.arange(m)[::-1]  # a representative item per node
            parent.append(item_node[first, level - 1])
            token.append(uniq[:, -1])
            item_node[:, level] = inv
        return cls(parent, token, item_node, tokens[:, -1].copy())

    def ancestors(self, level: int, nodes: np.ndarray) -> list[np.ndarray]:
        """For ``nodes`` of ``level``: their ancestor at each depth 0..level (the last = themselves)."""
        chain = [nodes]
        for lv in range(level, 0, -1):
            chain.append(self.parent[lv][chain[-1]])
        return chain[::-1]


class TreeScorer:
    """Exact (or beam) log-likelihood of every ID in a trie, for a batch of encoded queries."""

    def __init__(self, model: Any) -> None:
        self.model = model
        dec = model.get_decoder() if hasattr(model, "get_decoder") else model.decoder
        self.blocks = list(dec.block)
        self.final_norm = dec.final_layer_norm
        self.embed = dec.embed_tokens
        self.lm_head = model.lm_head
        cfg = model.config
        self.h, self.dk = cfg.num_heads, cfg.d_kv
        scale = getattr(cfg, "scale_decoder_outputs", None)
        self.out_scale = (cfg.d_model ** -0.5) if (scale if scale is not None else cfg.tie_word_embeddings) else 1.0
        att = self.blocks[0].layer[0].SelfAttention
        self.att_scale = float(getattr(att, "scaling", 1.0) or 1.0)

    # -- encoder side ----------------------------------------------------------------------

    def encode(self, ids: Any, mask: Any) -> tuple[list[tuple[Any, Any]], Any]:
        """Encoder states -> per decoder layer the cross-attention keys/values (B, h, S, dk),
        and the additive mask (B, 1, 1, S)."""
        import torch

        enc = self.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        kv = []
        for blk in self.blocks:
            att = blk.layer[1].EncDecAttention
            kv.append((self._heads(att.k(enc)), self._heads(att.v(enc))))
        bias = torch.zeros(mask.shape, dtype=enc.dtype, device=enc.device)
        bias = bias.masked_fill(mask == 0, torch.finfo(enc.dtype).min)[:, None, None, :]
        return kv, bias

    def _heads(self, x: Any) -> Any:  # (B, R, h*dk) -> (B, h, R, dk)
        b, r, _ = x.shape
        return x.view(b, r, self.h, self.dk).transpose(1, 2)

    # -- one decoder step for the nodes of one level ---------------------------------------

    def step(self, level: int, tokens: np.ndarray, anc_pos: list[np.ndarray], past: list[list[tuple[Any, Any]]],
             cross: list[tuple[Any, Any]], cross_bias: Any) -> tuple[Any, list[tuple[Any, Any]]]:
        """Hidden states after the decoder for nodes with ``tokens`` at depth ``level``.

        ``anc_pos[d]`` (d < level): each node's ancestor's row in ``past[d]`` (that level's
        stored self-attention keys/values per layer, (B, h, R_d, dk)). Returns the final hidden
        states (B, R, d_model) and this level's keys/values per layer."""
        import torch

        B = cross[0][0].shape[0]
        dev = cross[0][0].device
        x = self.embed(torch.as_tensor(tokens, device=dev))[None].expand(B, -1, -1)
        R = len(tokens)
        att0 = self.blocks[0].layer[0].SelfAttention
        pos_bias = att0.compute_bias(level + 1, level + 1, device=dev)[:, :, -1:, :]  # (1, h, 1, level+1)
        mine = []
        idx = [torch.as_tensor(p, device=dev) for p in anc_pos]
        for li, blk in enumerate(self.blocks):
            sa = blk.layer[0]
            n = sa.layer_norm(x)
            att = sa.SelfAttention
            q = self._heads(att.q(n))
            k_new, v_new = self._heads(att.k(n)), self._heads(att.v(n))
            mine.append((k_new, v_new))
            keys = torch.stack([past[d][li][0][:, :, idx[d]] for d in range(level)] + [k_new], dim=3)
            vals = torch.stack([past[d][li][1][:, :, idx[d]] for d in range(level)] + [v_new], dim=3)
            # (B, h, R, level+1, dk)
            w = torch.einsum("bhrd,bhrtd->bhrt", q, keys) * self.att_scale + pos_bias
            w = torch.softmax(w.float(), dim=-1).to(q.dtype)
            o = torch.einsum("bhrt,bhrtd->bhrd", w, vals).transpose(1, 2).reshape(B, R, -1)
            x = x + att.o(o)
            ca = blk.layer[1]
            n = ca.layer_norm(x)
            catt = ca.EncDecAttention
            q = self._heads(catt.q(n))
            ck, cv = cross[li]
            w = torch.matmul(q, ck.transpose(2, 3)) * self.att_scale + cross_bias
            w = torch.softmax(w.float(), dim=-1).to(q.dtype)
            o = torch.matmul(w, cv).transpose(1, 2).reshape(B, R, -1)
            x = x + catt.o(o)
            x = blk.layer[-1](x)
        return self.final_norm(x) * self.out_scale, mine

    def log_probs(self, hidden: Any, rows: Any, toks: Any, chunk: int = 4096) -> Any:
        """log p(toks[j] | node rows[j]) for every query: (B, len(rows)), the softmax over the full
        vocabulary computed in row chunks (the logits of a whole level would not fit)."""
        import torch

        out = []
        for a in range(0, len(rows), chunk):
            r, t = rows[a : a + chunk], toks[a : a + chunk]
            uniq, inv = torch.unique(r, return_inverse=True)
            lp = torch.log_softmax(self.lm_head(hidden[:, uniq]).float(), dim=-1)  # (B, U, V)
            out.append(lp[:, inv, t])
        return torch.cat(out, dim=1) if out else hidden.new_zeros((hidden.shape[0], 0))

    # -- whole trie ------------------------------------------------------------------------

    def exact(self, trie: Trie, cross: list[tuple[Any, Any]], cross_bias: Any) -> np.ndarray:
        """(B, M) log-likelihood of every item of ``trie``."""
        import torch

        dev = cross[0][0].device
        depth = len(trie.parent)
        past: list[list[tuple[Any, Any]]] = []
        cum = None  # (B, R_level) log p(prefix) of this level's nodes
        for level in range(depth):
            anc = trie.ancestors(level, np.arange(len(trie.token[level])))
            hidden, kv = self.step(level, trie.token[level], anc[:-1], past, cross, cross_bias)
            past.append(kv)
            if level + 1 < depth:  # children of this level's nodes = next level's nodes
                rows = torch.as_tensor(trie.parent[level + 1], device=dev)
                lp = self.log_probs(hidden, rows, torch.as_tensor(trie.token[level + 1], device=dev))
                cum = lp if cum is None else cum[:, rows] + lp
            else:  # the items: their last token under their deepest node
                rows = torch.as_tensor(trie.item_node[:, level], device=dev)
                lp = self.log_probs(hidden, rows, torch.as_tensor(trie.item_token, device=dev))
                return (lp if cum is None else cum[:, rows] + lp).double().cpu().numpy()
        raise AssertionError("unreachable")

    def beam(self, trie: Trie, cross: list[tuple[Any, Any]], cross_bias: Any, beam_size: int) -> np.ndarray:
        """(B, M) scores of beam mode (see the module docstring); queries one at a time."""
        B = cross[0][0].shape[0]
        return np.vstack([self._beam_one(trie, [(k[b : b + 1], v[b : b + 1]) for k, v in cross],
                                         cross_bias[b : b + 1], beam_size) for b in range(B)])

    def _beam_one(self, trie: Trie, cross: list[tuple[Any, Any]], cross_bias: Any, beam_size: int) -> np.ndarray:
        import torch

        dev = cross[0][0].device
        depth = len(trie.parent)
        M = len(trie.item_token)
        score = np.full(M, -np.inf)
        past: list[list[tuple[Any, Any]]] = []
        ran: list[np.ndarray] = []  # sorted node ids run at each level
        beam, beam_lp = np.array([0]), np.zeros(1)
        for level in range(depth):
            anc = trie.ancestors(level, beam)
            anc_pos = [np.searchsorted(ran[d], anc[d]) for d in range(level)]
            hidden, kv = self.step(level, trie.token[level][beam], anc_pos, past, cross, cross_bias)
            past.append(kv)
            ran.append(beam)
            if level + 1 < depth:
                kids = np.flatnonzero(np.isin(trie.parent[level + 1], beam))
                rows = np.searchsorted(beam, trie.parent[level + 1][kids])
                lp = self.log_probs(hidden, torch.as_tensor(rows, device=dev),
                                    torch.as_tensor(trie.token[level + 1][kids], device=dev))[0].double().cpu().numpy()
                kid_lp = beam_lp[rows] + lp
                reached = np.isin(trie.item_node[:, level + 1], kids)
                pos = np.searchsorted(kids, trie.item_node[reached, level + 1])
                score[reached] = (level + 1) * DEPTH_SCALE + kid_lp[pos]
                top = np.sort(np.argsort(-kid_lp, kind="stable")[:beam_size])
                beam, beam_lp = kids[top], kid_lp[top]
            else:
                items = np.flatnonzero(np.isin(trie.item_node[:, level], beam))
                rows = np.searchsorted(beam, trie.item_node[items, level])
                lp = self.log_probs(hidden, torch.as_tensor(rows, device=dev),
                                    torch.as_tensor(trie.item_token[items], device=dev))[0].double().cpu().numpy()
                score[items] = (level + 1) * DEPTH_SCALE + beam_lp[rows] + lp
        return score
