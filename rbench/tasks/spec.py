"""Declarative task metadata (like MTEB's TaskMetadata): what a task is, where its data comes
from, its license and sizes in the paper, and the paper's prompt template for its domain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Scenario = Literal["small", "large", "ultra"]
Domain = Literal["recommendation", "routing", "passage", "product", "generic"]
SCENARIOS: tuple[str, ...] = ("small", "large", "ultra")

# The paper's four templates (Appendix "Prompt Usage"); [USER QUERY] becomes ``{query}``.
_TEMPLATE = "Task: {task}\n\nQuery: {{query}}\n\n<|embedding|> {instruction}"
PROMPTS: dict[str, str] = {
    "recommendation": _TEMPLATE.format(
        task="Recommendation",
        instruction="Based on the global context information (candidate items) and the query above, "
        "recommend the most relevant item.",
    ),
    "routing": _TEMPLATE.format(
        task="Routing",
        instruction="Based on the global context information (candidate LLMs/agents) and the query "
        "above, select the most suitable route or model.",
    ),
    "passage": _TEMPLATE.format(
        task="Passage Ranking",
        instruction="Based on the global context information (candidate passages) and the query above, "
        "identify the most relevant passage.",
    ),
    "product": _TEMPLATE.format(
        task="Product Searching",
        instruction="Based on the global context information (candidate products) and the query above, "
        "return the product that best matches the search intent.",
    ),
}
PROMPTS["generic"] = PROMPTS["passage"]
PLACEHOLDER = "<|embedding|>"


@dataclass(frozen=True)
class Source:
    """One public input of a task."""

    name: str
    url: str
    license: str
    sha256: str | None = None
    note: str = ""


@dataclass(frozen=True)
class TaskSpec:
    name: str
    title: str
    scenario: Scenario
    domain: Domain
    description: str
    paper_candidates: int | None  # per-query list size for the small scenario
    paper_queries: int | None
    sources: tuple[Source, ...]
    license: str
    loader: str  # "module:function" returning TaskData
    how_to_get: str
    protocol: str = ""  # every choice the paper leaves open, written down
    embedded: bool = False  # data ships inside an installed package (no download)
    options: str | None = None  # "module:Dataclass" of task options (``--set task.key=value``)
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def prompt(self) -> str:
        return PROMPTS[self.domain]

    def render_prompt(self, query: str) -> str:
        return self.prompt.replace("{query}", query)
