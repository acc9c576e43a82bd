"""``rbench rankers`` shows each generative ranker's prompt and defaults."""

from __future__ import annotations

import json

from rbench.cli.app import main


def test_rbench_rankers_shows_the_generative_rankers_prompts_and_defaults(capsys):
    assert main(["rankers", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    expect = {"rankgpt": "You are RankGPT", "prp": "which of the following two passages is more relevant",
              "iranker": "least relevant", "pointwise-llm": "Does the passage answer the query?"}
    for name, phrase in expect.items():
        text = " ".join(m["content"] for m in rows[name]["prompt"])
        assert phrase in text and "QUERY" in text and "CANDIDATE" in text, name
        options = {o["name"]: o["default"] for o in rows[name]["options"]}
        assert options["backend"] == "transformers" and options["model"] == "smollm2-135m"
        assert options["temperature"] in (0, 0.0, "0.0")
    assert "[1] CANDIDATE 1" in " ".join(m["content"] for m in rows["iranker"]["prompt"])
    assert "prompt" not in rows["bm25"]
    assert main(["rankers"]) == 0
    shown = capsys.readouterr().out
    assert "rankgpt prompt system: You are RankGPT" in shown and "prp prompt user: Given a query" in shown
