"""``make_backend``: the one factory the generative rankers call.

    make_backend("transformers", model="smollm2-135m", batch_size=8)
    make_backend("vllm", model="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16")
    make_backend("openai", base_url="http://127.0.0.1:8000/v1", model="qwen2.5-7b")

Each backend module is imported only when its kind is asked for (torch, transformers and vllm
stay unimported otherwise).
"""

from __future__ import annotations

from typing import Any

from rbench.plugin import RBenchError

from .backend import Backend

KINDS = ("openai", "transformers", "vllm")


def make_backend(kind: str, **options: Any) -> Backend:
    if kind == "transformers":
        from .hf import TransformersBackend

        cls: Any = TransformersBackend
    elif kind == "vllm":
        from .vllm_engine import VLLMBackend

        cls = VLLMBackend
    elif kind == "openai":
        from .openai_compat import OpenAIBackend

        cls = OpenAIBackend
    else:
        raise RBenchError(f"unknown generation backend {kind!r}; choose one of: {', '.join(KINDS)}")
    try:
        return cls(**options)
    except TypeError as exc:
        if "__init__()" not in str(exc):  # a bug inside the constructor, not a wrong option
            raise
        raise RBenchError(f"backend {kind!r}: {str(exc).replace('__init__()', 'options:')}") from None
