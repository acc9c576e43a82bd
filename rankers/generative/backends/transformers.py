"""``TransformersBackend``: a Hugging Face causal LM run in process (CPU or GPU).

- Model: a local folder (config, tokenizer, weights), a ``.gguf`` file (transformers dequantises
  it; ``gguf_file=`` names the file inside a folder), a hub id (the local Hugging Face cache only),
  or an offline alias (``smollm2-135m`` -> the SmolLM2-135M-Instruct Q4_1 GGUF in the offline model
  folder), all resolved by ``rbench_rankers.models``. The model is loaded on first use, so a run
  answered entirely from the response cache never loads it.
- ``chat``: the tokenizer's chat template (``add_generation_prompt=True``), left padding, batches of
  ``batch_size``; greedy (``do_sample=False``) when ``temperature == 0``, else sampling after
  ``torch.manual_seed(decoding.seed)``. Generation stops at EOS or at a stop string, and the text is
  cut before the first stop string. ``tokens_in`` = the prompt's tokens (padding excluded);
  ``tokens_out`` = generated tokens up to and including the first EOS; ``seconds`` = the batch's
  wall time split evenly over its requests.
- Identity: the weights are identified by a sha256 of their files' **contents**
  (``rbench_rankers.models.weights_digest``), so a replaced file of the same size is a new model to
  the cache.
- A chat whose last message is the assistant's is *continued* (``continue_final_message``): a
  primed answer (``supports_prefill``), as PRP primes the noun and IRanker its ``<think>``.
- ``continuation_logprobs``: the mean log-probability of a continuation (pointwise query
  likelihood). ``count_tokens`` / ``context_length``: what ``fit_words`` shrinks prompts by.
- ``next_token_logprobs``: one forward pass per batch, ``log_softmax`` of the last position's
  logits (in float32). A label maps to a token as **the first token of the label's encoding
  without special tokens** (``tokenizer.encode(label, add_special_tokens=False)[0]``), so "A",
  " A" and "Yes" may be different tokens: pass the labels exactly as the answer would begin.
- Prompts longer than ``max_length`` (minus the new tokens) raise ``RBenchError``: a ranker sizes
  its prompts, the backend never cuts them silently.
"""

from __future__ import annotations

import time
from typing import Any

from rbench.plugin import RBenchError
from rbench_rankers.models import from_pretrained, home_as_tilde, resolve_model, weights_digest

from . import Chat, Completion, Decoding, NextTokenScores


def template_text(tok: Any, chat: Chat) -> str:
    """The prompt text of a conversation: the chat template with the generation prompt, or, when
    the last message is the assistant's (a primed answer: PRP's "Passage", IRanker's thinking
    prefix), that message continued (no end-of-turn after it)."""
    if chat and chat[-1].get("role") == "assistant":
        return str(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=False,
                                           continue_final_message=True))
    return str(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))


class TransformersBackend:
    kind = "transformers"
    supports_logprobs = True
    supports_prefill = True  # a chat may end with a partial assistant message, continued

    def __init__(self, model: str, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                 revision: str = "", gguf_file: str | None = None, max_length: int = 4096,
                 trust_remote_code: bool = False) -> None:
        if batch_size < 1:
            raise RBenchError(f"batch_size must be >= 1, got {batch_size}")
        if dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise RBenchError(f"dtype {dtype!r}: choose auto, float32, bfloat16 or float16")
        self.model_name = model
        self.device_option, self.dtype_option = device, dtype
        self.batch_size = int(batch_size)
        self.revision = revision
        self.gguf_file = gguf_file
        self.max_length = int(max_length)
        self.trust_remote_code = trust_remote_code
        self._model: Any = None
        self._tok: Any = None
        self._identity: dict[str, Any] | None = None

    # -- setup ------------------------------------------------------------------------------

    def _device(self) -> str:
        if self.device_option != "auto":
            return self.device_option
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _dtype_name(self) -> str:
        if self.dtype_option != "auto":
            return self.dtype_option
        return "bfloat16" if self._device().startswith("cuda") else "float32"

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            where, gguf = resolve_model(self.model_name, self.gguf_file)
            ident: dict[str, Any] = {"backend": "transformers", "model": self.model_name,
                                     "weights": weights_digest(self.model_name, self.gguf_file),
                                     "dtype": self._dtype_name(), "device": self._device().split(":")[0]}
            if gguf:
                ident["gguf_file"] = gguf
            if self.revision:
                ident["revision"] = self.revision
            self._identity = ident
        return self._identity

    def load(self) -> tuple[Any, Any]:
        """(model, tokenizer), loaded once."""
        if self._model is not None:
            return self._model, self._tok
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        where, gguf = resolve_model(self.model_name, self.gguf_file)
        extra: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if gguf:
            extra["gguf_file"] = gguf
        if self.revision:
            extra["revision"] = self.revision
        dtype = getattr(torch, self._dtype_name())
        try:  # hub ids: the local HF cache only (hub=False: no network here)
            tok = from_pretrained(AutoTokenizer, where, hub=False, **extra)
            model = from_pretrained(AutoModelForCausalLM, where, hub=False, dtype=dtype, **extra)
        except (OSError, ValueError) as exc:
            raise RBenchError(home_as_tilde(
                f"cannot load the language model {self.model_name!r} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); pass a local folder or a .gguf file"
            )) from exc
        if getattr(tok, "chat_template", None) is None:
            raise RBenchError(f"model {self.model_name!r}: its tokenizer has no chat template "
                              "(generative rankers need an instruction-tuned model)")
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        model.to(self._device())
        model.eval()
        if model.generation_config is not None:  # no model-default sampling settings leaking in
            model.generation_config.do_sample = False
            for name in ("temperature", "top_p", "top_k"):
                if hasattr(model.generation_config, name):
                    setattr(model.generation_config, name, None)
        self._model, self._tok = model, tok
        return model, tok

    # -- requests ---------------------------------------------------------------------------

    def _encode(self, chats: list[Chat], room: int) -> tuple[Any, Any]:
        """Left-padded input ids and attention mask for a batch of conversations."""
        _, tok = self.load()
        texts = [template_text(tok, chat) for chat in chats]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        lengths = enc["attention_mask"].sum(dim=1).tolist()
        limit = self.max_length - room
        if max(lengths) > limit:
            raise RBenchError(f"a prompt of {max(lengths)} tokens exceeds max_length={self.max_length} "
                              f"less {room} new tokens for model {self.model_name!r}; shorten the prompt "
                              "(fewer or shorter candidates) or raise max_length")
        return enc["input_ids"].to(self._model.device), enc["attention_mask"].to(self._model.device)

    @property
    def context_length(self) -> int:
        """The most tokens a prompt and its answer may take together (``max_length``)."""
        return self.max_length

    def count_tokens(self, chats: list[Chat]) -> list[int]:
        """Each conversation's prompt length in tokens (as ``chat`` would send it)."""
        _, tok = self.load()
        return [len(tok(template_text(tok, chat), add_special_tokens=False)["input_ids"]) for chat in chats]

    def chat(self, chats: list[Chat], decoding: Decoding) -> list[Completion]:
        out: list[Completion] = []
        for i in range(0, len(chats), self.batch_size):
            out.extend(self._chat_batch(chats[i:i + self.batch_size], decoding))
        return out

    def _chat_batch(self, chats: list[Chat], decoding: Decoding) -> list[Completion]:
        import torch

        model, tok = self.load()
        t0 = time.perf_counter()
        ids, mask = self._encode(chats, decoding.max_new_tokens)
        kwargs: dict[str, Any] = {"max_new_tokens": decoding.max_new_tokens, "pad_token_id": tok.pad_token_id}
        if decoding.temperature > 0:
            torch.manual_seed(decoding.seed)
            kwargs.update(do_sample=True, temperature=decoding.temperature, top_p=decoding.top_p)
        else:
            kwargs.update(do_sample=False)
        if decoding.stop:
            kwargs.update(stop_strings=list(decoding.stop), tokenizer=tok)
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        new = gen[:, ids.shape[1]:].tolist()
        eos = _eos_ids(model, tok)
        each = (time.perf_counter() - t0) / len(chats)
        out = []
        for row, n_in in zip(new, mask.sum(dim=1).tolist()):
            cut = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
            text = tok.decode(row[:cut], skip_special_tokens=True)
            out.append(Completion(text=trim_at_stop(text, decoding.stop), tokens_in=int(n_in), tokens_out=cut,
                                  seconds=each))
        return out

    def label_token_ids(self, labels: tuple[str, ...]) -> dict[str, int]:
        """label -> the first token of its encoding without special tokens."""
        _, tok = self.load()
        out = {}
        for label in labels:
            ids = tok.encode(label, add_special_tokens=False)
            if not ids:
                raise RBenchError(f"label {label!r} encodes to no token for model {self.model_name!r}")
            out[label] = int(ids[0])
        return out

    def next_token_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[NextTokenScores]:
        import torch

        model, _ = self.load()
        token_of = self.label_token_ids(tuple(labels))
        out: list[NextTokenScores] = []
        for i in range(0, len(chats), self.batch_size):
            part = chats[i:i + self.batch_size]
            t0 = time.perf_counter()
            ids, mask = self._encode(part, 0)
            with torch.inference_mode():
                logits = model(input_ids=ids, attention_mask=mask).logits[:, -1, :]
            logp = torch.log_softmax(logits.float(), dim=-1).cpu()
            each = (time.perf_counter() - t0) / len(part)
            for row, n_in in zip(logp, mask.sum(dim=1).tolist()):
                out.append(NextTokenScores(logprobs={lab: float(row[t]) for lab, t in token_of.items()},
                                           tokens_in=int(n_in), seconds=each))
        return out

    def continuation_logprobs(self, chats: list[Chat], continuations: list[str]) -> list[float]:
        """The mean log-probability of each continuation's tokens as the answer to its chat (the
        query-likelihood score of UPR): one forward pass per request, in float32."""
        import torch

        model, tok = self.load()
        out: list[float] = []
        for chat, cont in zip(chats, continuations):
            prompt = tok(template_text(tok, chat), add_special_tokens=False)["input_ids"]
            tail = tok(str(cont), add_special_tokens=False)["input_ids"] or [tok.eos_token_id]
            if len(prompt) + len(tail) > self.max_length:
                raise RBenchError(f"a prompt of {len(prompt) + len(tail)} tokens exceeds max_length={self.max_length} "
                                  f"for model {self.model_name!r}; shorten the candidates (max_candidate_words)")
            ids = torch.tensor([prompt + tail], device=model.device)
            with torch.inference_mode():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1, :]
            logp = torch.log_softmax(logits.float(), dim=-1)
            picked = logp[torch.arange(len(tail)), torch.tensor(tail, device=logp.device)]
            out.append(float(picked.mean()))
        return out

    def close(self) -> None:
        self._model = None
        self._tok = None


def _eos_ids(model: Any, tok: Any) -> set[int]:
    ids: set[int] = set()
    cfg_eos = getattr(model.generation_config, "eos_token_id", None)
    for e in (cfg_eos, tok.eos_token_id):
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, (list, tuple)):
            ids.update(int(x) for x in e)
    return ids


def trim_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> str:
    """``text`` cut before the earliest occurrence of any stop string."""
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[:min(cuts)] if cuts else text
