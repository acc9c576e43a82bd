"""Offline builders for the LRanker tests: a tiny random Qwen3 (causal) and a tiny BERT (encoder),
each with a tokenizer trained locally on a few strings, and a toy task in the real prompt format."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rbench.api import PROMPTS, Pool, Queries, Ragged, TaskData, TaskSpec

WORDS = [f"w{i}" for i in range(120)] + (
    "Task Recommendation Query Based on the global context information candidate items and query above "
    "recommend most relevant item . : ; ( ) Genres Passage Ranking passages identify"
).split()


def _word_tokenizer(special: list[str], **named: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=special))
    return tk, PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", **named)


def build_tiny_qwen(dest: Path, hidden: int = 64, layers: int = 2) -> Path:
    """Qwen3Model with random weights; tokenizer: whitespace WordLevel, eos <|endoftext|>, no BOS."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    _, tok = _word_tokenizer(["[PAD]", "[UNK]", "<|endoftext|>"], pad_token="[PAD]", eos_token="<|endoftext|>")
    tok.save_pretrained(dest)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=512)
    torch.manual_seed(0)
    Qwen3Model(cfg).save_pretrained(dest)
    return dest


def build_tiny_bert(dest: Path, hidden: int = 32) -> Path:
    """BertModel with random weights; tokenizer adds [CLS] ... [SEP] like real BERT tokenizers."""
    import torch
    from tokenizers import processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tk, _ = _word_tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    cls_id, sep_id = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                      special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]")
    tok.save_pretrained(dest)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=2 * hidden, max_position_embeddings=256)
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(dest)
    return dest


SPEC = TaskSpec(name="toy-lranker", title="toy", scenario="large", domain="recommendation", description="",
                paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="")


def toy_pool(n: int = 40) -> Pool:
    texts = np.array([f"w{i} w{(i * 7) % 120} w{(i * 13) % 120}" for i in range(n)], dtype=object)
    return Pool(ids=np.array([f"i{i}" for i in range(n)], dtype=object), texts=texts, name="toy",
                fingerprint=f"toy-lranker-{n}")


def toy_queries(n: int, tag: str, pool_size: int, seed: int, candidates: int = 0) -> Queries:
    """Query text names the positive's first two words: a learnable toy task."""
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, pool_size, n)
    texts = [f"w{p} w{(p * 7) % 120}" for p in pos]
    cand = None
    if candidates:
        rows = []
        for p in pos:
            others = rng.permutation(np.setdiff1d(np.arange(pool_size), [p]))[: candidates - 1]
            rows.append(rng.permutation(np.concatenate([[p], others])))
        cand = np.stack(rows).astype(np.int64)
    return Queries(ids=np.array([f"{tag}{i}" for i in range(n)], dtype=object), texts=texts,
                   prompts=[PROMPTS["recommendation"].replace("{query}", t) for t in texts],
                   positives=Ragged.from_rows([[int(p)] for p in pos]),
                   grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64), candidates=cand)


def toy_task(n_pool: int = 40, n_train: int = 60, n_valid: int = 12, n_test: int = 12, candidates: int = 0) -> TaskData:
    pool = toy_pool(n_pool)
    return TaskData(spec=SPEC, pool=pool, train=toy_queries(n_train, "t", n_pool, 1, candidates),
                    valid=toy_queries(n_valid, "v", n_pool, 2, candidates),
                    test=toy_queries(n_test, "s", n_pool, 3, candidates))
