"""The prompts of the generative rankers, each following its paper's published prompt.

Every prompt reads the task's domain wording from the paper's four templates
(``rbench.api.PROMPTS``: "candidate items", "candidate LLMs/agents", "candidate passages",
"candidate products"), so one ranker says "item" / "model" / "passage" / "product" according to
``task.spec.domain`` (``generic`` reads as ``passage``, as its template is the passage one).
Where a paper's prompt says "passage" the domain's noun takes its place; nothing else changes.

Sources (the wording below follows the cited papers' published prompts; the prompts were written
from those papers' descriptions, not copied from their code):

- ``rankgpt_chat``: RankGPT's listwise permutation prompt, Sun et al. 2023, "Is ChatGPT Good at
  Search? Investigating Large Language Models as Re-Ranking Agents" (EMNLP 2023): the system
  message "You are RankGPT, ...", the numbered ``[1]..[n]`` passages and the closing instruction
  asking for output like ``[2] > [1]``. RankGPT sends each passage as its own chat turn (with an
  assistant "Received passage [i]." in between); here the passages go in one user turn, as
  rank_llm's open-model listwise rankers (RankVicuna/RankZephyr) do: small chat models follow a
  single turn better, and it is fewer template tokens.
- ``prp_chat``: PRP's pairwise prompt, Qin et al. 2024, "Large Language Models are Effective Text
  Rankers with Pairwise Ranking Prompting" (NAACL Findings 2024), verbatim up to the noun:
  ``Given a query "{query}", which of the following two passages is more relevant to the
  query?\\n\\nPassage A: "..."\\n\\nPassage B: "..."\\n\\nOutput Passage A or Passage B:``.
- ``iranker_step_chat`` / ``iranker_direct_chat``: IRanker, Feng et al. 2025, "IRanker: Towards
  Ranking Foundation Model": iterative decoding that, at each step, shows the query and the
  candidates still in play and asks for the *least* relevant one, which is eliminated, until one
  is left; and the "direct" variant that asks for the whole ranking at once. Candidates keep the
  identifier of their input position through the steps (``[1]..[n]``; eliminated ones simply
  disappear), so an answer always names one fixed candidate.
- ``relevance_chat``: pointwise relevance generation, Liang et al. 2022 (HELM, "Holistic
  Evaluation of Language Models", its MS MARCO prompt): ``Passage: ...\\nQuery: ...\\nDoes the
  passage answer the query? Answer 'Yes' or 'No'``; the score is logprob("Yes") - logprob("No").
- ``query_likelihood_chat``: query likelihood, Sachan et al. 2022, "Improving Passage Retrieval
  with Zero-Shot Question Generation" (UPR): ``Passage: ...\\nPlease write a question based on this
  passage.``; the score is the mean log-probability of the query's tokens as the answer.

Candidate texts are cut to ``max_words`` words (``truncate``; default 300, RankGPT's cut) and,
optionally, ``max_chars`` characters (default 0: off). A prompt that still does not fit the
backend's context is shrunk (``GenerativeRanker.fit_words``: fewer words per candidate, as
rank_llm shrinks passages to fit), and the smallest word limit used is recorded.

``TEMPLATE_VERSION`` names this file's wording: it is part of every response-cache key, so an
edited prompt is never answered from the cache of the old one. Bump it with any wording change.
"""

from __future__ import annotations

from dataclasses import dataclass

from rbench.api import PROMPTS

Message = dict[str, str]
Chat = list[Message]

TEMPLATE_VERSION = "2"  # bump on any change of a prompt's wording (it keys the response cache)


@dataclass(frozen=True)
class Wording:
    """The domain's words: the noun of one candidate, its plural, and the task's name."""

    noun: str
    plural: str
    task: str


# From the templates' "(candidate items)", "(candidate LLMs/agents)", "(candidate passages)",
# "(candidate products)"; routing's "LLMs/agents" reads as "model".
WORDING: dict[str, Wording] = {
    "recommendation": Wording("item", "items", "Recommendation"),
    "routing": Wording("model", "models", "Routing"),
    "passage": Wording("passage", "passages", "Passage Ranking"),
    "product": Wording("product", "products", "Product Searching"),
    "generic": Wording("passage", "passages", "Passage Ranking"),
}
assert set(WORDING) == set(PROMPTS)  # one wording per template of the paper


def wording(domain: str) -> Wording:
    return WORDING.get(domain, WORDING["generic"])


def truncate(text: str, max_chars: int = 0, max_words: int = 0) -> str:
    """``text`` with its whitespace runs collapsed, cut to its first ``max_words`` words, then to
    ``max_chars`` characters (0: no cut)."""
    words = str(text).split()
    flat = " ".join(words[:max_words] if max_words > 0 else words)
    return flat if max_chars <= 0 or len(flat) <= max_chars else flat[:max_chars].rstrip()


def numbered(texts: list[str], ids: list[int] | None = None) -> str:
    """``[i] text`` lines; ``ids`` are 0-based positions (shown 1-based), default 0..n-1."""
    ids = list(range(len(texts))) if ids is None else ids
    return "\n".join(f"[{i + 1}] {t}" for i, t in zip(ids, texts))


# ------------------------------------------------------------------------------------- RankGPT

RANKGPT_SYSTEM = ("You are RankGPT, an intelligent assistant that can rank {plural} based on their "
                  "relevancy to the query.")


def rankgpt_chat(query: str, texts: list[str], domain: str) -> Chat:
    """RankGPT's permutation prompt (Sun et al. 2023) over ``texts`` numbered [1]..[n]."""
    w, n = wording(domain), len(texts)
    user = (f"I will provide you with {n} {w.plural}, each indicated by number identifier []. \n"
            f"Rank the {w.plural} based on their relevance to query: {query}.\n\n"
            f"{numbered(texts)}\n\n"
            f"Search Query: {query}. \n"
            f"Rank the {n} {w.plural} above based on their relevance to the search query. The {w.plural} "
            f"should be listed in descending order using identifiers. The most relevant {w.plural} should "
            f"be listed first. The output format should be [] > [], e.g., [2] > [1]. Only response the "
            f"ranking results, do not say any word or explain.")
    return [{"role": "system", "content": RANKGPT_SYSTEM.format(plural=w.plural)},
            {"role": "user", "content": user}]


# ----------------------------------------------------------------------------------------- PRP

PRP_TEMPLATE = ('Given a query "{query}", which of the following two {plural} is more relevant to the query?'
                '\n\n{Noun} A: "{a}"\n\n{Noun} B: "{b}"\n\nOutput {Noun} A or {Noun} B:')


def prp_chat(query: str, a: str, b: str, domain: str, prime: bool = False) -> Chat:
    """PRP's pairwise prompt (Qin et al. 2024); the answer labels are "A" and "B". ``prime``: the
    assistant turn already holds the domain's noun ("Passage"), so the next token is the label
    (" A" / " B"), as llm-rankers scores it."""
    w = wording(domain)
    chat = [{"role": "user", "content": PRP_TEMPLATE.format(query=query, plural=w.plural,
                                                            Noun=w.noun.capitalize(), a=a, b=b)}]
    if prime:
        chat.append({"role": "assistant", "content": w.noun.capitalize()})
    return chat


# ------------------------------------------------------------------------------------- IRanker

IRANKER_SYSTEM = ("You are IRanker, an assistant that ranks candidate {plural} for a {task} task by "
                  "eliminating, one at a time, the least relevant candidate.")
# IRanker's reference evaluation (eval_router.py): one question per GraphRouter scenario
ROUTING_LEAST = {
    "balance": ("least BALANCED for handling this query, considering both the query requirements and "
                "cost efficiency"),
    "cost": ("least COST-EFFICIENT for handling this query, prioritizing cost efficiency while still "
             "meeting the minimum requirements"),
    "performance": ("least PERFORMANCE-EFFICIENT for handling this query, prioritizing performance and "
                    "quality while still being cost-conscious"),
}
THINK_SUFFIX = " Show your work in <think> </think> tags. And return the final answer in <answer> </answer> tags."
THINK_PRIME = "Let me solve this step by step.\n<think>"  # the reference's assistant prefix


def candidate_name(text: str) -> str:
    """What an answer may call a candidate by: the text before ``": "`` when that is a short name
    (a routing model's "LLaMA-3 (70b): description"), else the text itself."""
    head = str(text).split(": ", 1)[0]
    return head if ": " in str(text) and len(head) <= 100 else str(text)


def iranker_step_chat(query: str, texts: list[str], ids: list[int], domain: str,
                      scenario: str = "", think: bool = False) -> Chat:
    """One elimination step (Feng et al. 2025) worded as IRanker's reference prompts for the
    domain (recommendation: least likely next item; routing: the scenario's "least BALANCED /
    COST-EFFICIENT / PERFORMANCE-EFFICIENT"; passages and the rest: least relevant), with the
    candidates still in play (``ids``: 0-based input positions, shown as [id+1]). ``think``: the
    reference's reasoning format (``<think>`` then ``<answer>``, the assistant turn primed with
    ``THINK_PRIME``); else the answer is the identifier or the full name only."""
    w = wording(domain)
    n = len(texts)
    listing = numbered(texts, ids)
    if domain == "recommendation":
        head = (f"I've interacted with the following {w.plural} in the past, in order:\n{query}\n\n"
                f"Now there are {n} candidate {w.plural} that I might choose next:\n{listing}\n\n"
                f"Please select the one {w.noun} that is least likely to be my next choice, according to my history.")
        name = f"the full name of the {w.noun}"
    elif domain == "routing":
        least = ROUTING_LEAST.get(scenario, ROUTING_LEAST["balance"])
        head = (f"I've been given the following query:\n{query}\n\n"
                f"Now there are {n} candidate LLMs that could handle this query:\n{listing}\n\n"
                f"Please select the one LLM that is {least}.")
        name = "the full name of the LLM"
    else:
        head = (f"Here is a query: {query}.\nAnd here are the candidate {w.plural}:\n{listing}\n\n"
                f"Select the {w.noun} that is the least relevant to the query.")
        name = f"the {w.noun} ID"
    rules = (f"\nYou MUST choose exactly one {w.noun} from the given candidate list."
             f"\nYou can NOT generate or reference {w.plural} that are not in the given candidate list.")
    if think:
        user = f"{head} Please think step by step.{rules}\nReturn {name} or its identifier, e.g. [{ids[-1] + 1}].{THINK_SUFFIX}"
        return [{"role": "system", "content": IRANKER_SYSTEM.format(plural=w.plural, task=w.task)},
                {"role": "user", "content": user},
                {"role": "assistant", "content": THINK_PRIME}]
    user = f"{head}{rules}\nAnswer with its identifier only, e.g. [{ids[-1] + 1}], or with {name} only."
    return [{"role": "system", "content": IRANKER_SYSTEM.format(plural=w.plural, task=w.task)},
            {"role": "user", "content": user}]


def iranker_direct_chat(query: str, texts: list[str], domain: str) -> Chat:
    """IRanker's direct variant: the whole ranking in one answer, ``[i] > [j] > ...``."""
    w = wording(domain)
    user = (f"Task: {w.task}\n\nQuery: {query}\n\nCandidate {w.plural}:\n{numbered(texts)}\n\n"
            f"Rank all {len(texts)} candidate {w.plural} from the most to the least relevant to the query. "
            f"Answer with the identifiers only, in the format [] > [], e.g., [2] > [1].")
    return [{"role": "system", "content": IRANKER_SYSTEM.format(plural=w.plural, task=w.task)},
            {"role": "user", "content": user}]


# ----------------------------------------------------------------------------------- pointwise


def relevance_chat(query: str, text: str, domain: str) -> Chat:
    """HELM's relevance question (Liang et al. 2022); labels "Yes" / "No"."""
    w = wording(domain)
    return [{"role": "user", "content": f"{w.noun.capitalize()}: {text}\nQuery: {query}\n"
                                        f"Does the {w.noun} answer the query? Answer 'Yes' or 'No'."}]


def query_likelihood_chat(text: str, domain: str) -> Chat:
    """UPR's question-generation prompt (Sachan et al. 2022); the query is the continuation."""
    w = wording(domain)
    return [{"role": "user", "content": f"{w.noun.capitalize()}: {text}\n"
                                        f"Please write a question based on this {w.noun}."}]
