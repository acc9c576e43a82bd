"""The lexical tokenizer shared by the lexical rankers (queries and documents go through the same one).

Choices (the paper says only "BM25"), written down here so that results can be reproduced:

- **Tokens** are the maximal runs of the regex ``\\w+`` (Python's Unicode-aware word characters:
  letters, digits and ``_`` of any script), after lowercasing with ``str.lower``. One-character
  tokens are kept (unlike bm25s' default pattern ``\\b\\w\\w+\\b``): item titles, product names and
  model names carry meaning in single letters and digits ("Rocky 2", "GPT-4", "size M").
- **Stopwords**: on by default, with Lucene's English stop set (the 33 words of
  ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, also Elasticsearch's ``_english_``), i.e. the list of
  the Anserini/Pyserini BM25 baselines usually reported on MS MARCO and BEIR. Without it, BM25's
  idf floor gives words such as "the" a small positive weight, so a long document full of "the"
  gains from a query that contains it; these words also have the longest postings, so removing
  them makes scoring faster. ``stopwords=False`` keeps every token.
- **No stemming** by default: a stemmer needs another dependency and Porter/Snowball
  implementations differ in detail, so scores would depend on the installation; much of rbench's
  candidate text is titles, product and model names, where stemming conflates unrelated names;
  and unstemmed tokens keep the scores checkable against rank-bm25 on the same tokens. The cost:
  on MS MARCO, Anserini's Porter-stemmed BM25 scores somewhat higher than unstemmed BM25, so our
  passage numbers are not Pyserini's.
- No Unicode normalisation beyond lowercasing, and ``None`` texts count as empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (a word list, not code).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)

TOKEN_PATTERN = r"\w+"


@dataclass(frozen=True)
class Tokenizer:
    """Lowercase, split into ``\\w+`` runs, drop stopwords; the same call for queries and documents."""

    lowercase: bool = True
    stopwords: bool = True
    pattern: str = TOKEN_PATTERN
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern))

    def __call__(self, text: Any) -> list[str]:
        if text is None:
            return []
        text = text if isinstance(text, str) else str(text)
        if self.lowercase:
            text = text.lower()
        tokens = self._regex.findall(text)
        if self.stopwords:
            stop = ENGLISH_STOPWORDS
            # the stop list is lowercase: compare case-insensitively when the text keeps its case
            tokens = [t for t in tokens if (t if self.lowercase else t.lower()) not in stop]
        return tokens

    def describe(self) -> str:
        parts = [f"regex {self.pattern}", "lowercase" if self.lowercase else "case kept",
                 "Lucene English stopwords" if self.stopwords else "no stopwords", "no stemming"]
        return ", ".join(parts)
