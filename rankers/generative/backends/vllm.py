"""``VLLMBackend``: vLLM's offline engine (``vllm.LLM``), for CUDA GPUs. Optional extra:
``pip install 'rbench[vllm]'``; vllm is imported when the backend is built, never before.

- ``chat``: ``llm.chat(conversations, SamplingParams(temperature, top_p, seed, max_tokens, stop))``
  (vLLM applies the tokenizer's chat template with the generation prompt). ``tokens_in`` /
  ``tokens_out`` are the prompt's and the answer's token counts; ``seconds`` the call's wall time
  split evenly over its requests.
- ``next_token_logprobs``: ``SamplingParams(max_tokens=1, temperature=0, logprobs=20)``; a label's
  token is the first token of its encoding without special tokens (as ``TransformersBackend``),
  looked up among the first position's top-20 logprobs (``None`` when not among them).
"""

from __future__ import annotations

import time
from typing import Any

from rbench.plugin import RBenchError
from rbench_rankers.models import resolve_model, weights_digest

from . import Chat, Completion, Decoding, NextTokenScores

TOP_LOGPROBS = 20


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise RBenchError(f"the vllm backend needs vLLM ({type(exc).__name__}: {exc}): "
                          "pip install 'rbench[vllm]' (needs a CUDA GPU)") from None
    return vllm


class VLLMBackend:
    kind = "vllm"
    supports_logprobs = True
    supports_prefill = True  # a chat ending with an assistant message is continued

    def __init__(self, model: str, dtype: str = "auto", tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = 4096, seed: int = 0,
                 gguf_file: str | None = None, revision: str = "", device: str = "auto", batch_size: int = 256,
                 **engine_options: Any) -> None:
        if device not in ("auto", "cuda") and not device.startswith("cuda"):
            raise RBenchError(f"the vllm backend runs on CUDA GPUs (device={device!r}); use backend=transformers")
        self.batch_size = int(batch_size)  # requests per CachedBackend chunk (vLLM batches them itself)
        vllm = import_vllm()
        where, gguf = resolve_model(model, gguf_file)
        target = f"{where}/{gguf}" if gguf else where
        self.model_name, self.dtype = model, dtype
        self._identity = {"backend": "vllm", "model": model, "weights": weights_digest(model, gguf_file),
                          "dtype": dtype, "tensor_parallel_size": int(tensor_parallel_size),
                          "vllm": getattr(vllm, "__version__", "")}
        if revision:
            self._identity["revision"] = revision
        kwargs: dict[str, Any] = dict(model=target, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                                      gpu_memory_utilization=gpu_memory_utilization, seed=seed, **engine_options)
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        if revision:
            kwargs["revision"] = revision
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many kinds; one line for the user
            raise RBenchError(f"vLLM could not load {model!r} ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:200]})") from exc
        self._vllm = vllm

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def _run(self, chats: list[Chat], params: Any) -> list[Any]:
        """``llm.chat`` in input order; primed chats (last message the assistant's) are continued."""
        primed = [i for i, c in enumerate(chats) if c and c[-1].get("role") == "assistant"]
        plain = [i for i in range(len(chats)) if i not in set(primed)]
        out: list[Any] = [None] * len(chats)
        for group, cont in ((plain, False), (primed, True)):
            if not group:
                continue
            got = self.llm.chat([chats[i] for i in group], params, use_tqdm=False,
                                add_generation_prompt=not cont, continue_final_message=cont)
            for i, o in zip(group, got):
                out[i] = o
        return out

    def chat(self, chats: list[Chat], decoding: Decoding) -> list[Completion]:
        if not chats:
            return []
        params = self._vllm.SamplingParams(temperature=decoding.temperature, top_p=decoding.top_p,
                                           seed=decoding.seed, max_tokens=decoding.max_new_tokens,
                                           stop=list(decoding.stop) or None)
        t0 = time.perf_counter()
        outs = self._run(chats, params)
        each = (time.perf_counter() - t0) / len(chats)
        return [Completion(text=o.outputs[0].text, tokens_in=len(o.prompt_token_ids or []),
                           tokens_out=len(o.outputs[0].token_ids or []), seconds=each) for o in outs]

    def next_token_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[NextTokenScores]:
        if not chats:
            return []
        tok = self.llm.get_tokenizer()
        token_of = {}
        for label in labels:
            ids = tok.encode(label, add_special_tokens=False)
            if not ids:
                raise RBenchError(f"label {label!r} encodes to no token for model {self.model_name!r}")
            token_of[label] = int(ids[0])
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        t0 = time.perf_counter()
        outs = self._run(chats, params)
        each = (time.perf_counter() - t0) / len(chats)
        result = []
        for o in outs:
            first = (o.outputs[0].logprobs or [{}])[0]  # token id -> Logprob
            result.append(NextTokenScores(
                logprobs={lab: (float(first[t].logprob) if t in first else None) for lab, t in token_of.items()},
                tokens_in=len(o.prompt_token_ids or []), seconds=each))
        return result

    def close(self) -> None:
        self.llm = None
