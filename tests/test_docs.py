"""The docs site builds strictly, its generated pages follow the registries, the README stays a
page whose links resolve, and no machine-local path reaches a reader."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tasks.test_readme_tasks import page_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# paths of the machine the project is developed on; none may reach a reader
LOCAL_PATHS = re.compile(r"\.\./shared|/work/|/root/")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _shown(value: object) -> str:
    """How a default is written on a generated page: strings as they are, the rest as JSON."""
    return value if isinstance(value, str) and value else json.dumps(value, default=str)


def _text(page: Path) -> str:
    """A built page's text without tags (entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def test_a_generated_task_page_holds_the_registry_facts(site):
    import dataclasses

    from rbench.tasks.registry import resolve

    page = site / "tasks" / "ml-100k" / "index.html"
    assert page.is_file()
    text = _text(page)
    task = resolve("ml-100k")
    assert task.spec.title in text and task.spec.sources[0].url in text
    kind = task.family.options_type(task.spec)
    for f in dataclasses.fields(kind):
        assert re.search(rf"task\.{f.name}\s+.+?\s+{re.escape(_shown(f.default))}\s", text), f.name
    assert "history_len" in text and "20" in text
    assert (site / "tasks" / "rec-clothing" / "index.html").is_file()


def test_a_task_page_says_whether_its_pool_is_built_from_positives(site):
    """TaskSpec.pool_from_positives on the generated pages (issue 40): esci yes (with the prior
    floor and the distractors option), ml-100k no."""
    row = re.compile(r"pool built from the queries' positives\s+(yes|no)\b")
    esci, ml = (_text(site / "tasks" / name / "index.html") for name in ("esci", "ml-100k"))
    assert row.search(esci).group(1) == "yes" and "prior" in esci and "task.distractors" in esci
    assert row.search(ml).group(1) == "no"


def test_a_generated_ranker_page_holds_its_options_and_defaults(site):
    from rbench.rankers import available_rankers, load_ranker_class, ranker_options

    page = site / "rankers" / "bm25" / "index.html"
    text = _text(page)
    for option in ranker_options(load_ranker_class("bm25")):
        assert re.search(rf"\b{option['name']}\s+\S+\s+{re.escape(_shown(option['default']))}\s", text), option["name"]
    assert "term-frequency saturation" in text  # the option's help, from its Config field
    for name in available_rankers():
        assert (site / "rankers" / name / "index.html").is_file(), name
    cli = _text(site / "reference" / "cli-commands" / "index.html")
    assert "rbench run" in cli and "--ranker" in cli and "rbench data download" in cli
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="rbench.public.evaluate"' in api and 'id="rbench.api.Ranker"' in api
    import rbench.plugin  # the plugin guide sends authors to the API page: every toolkit name is on it

    missing = [n for n in rbench.plugin.__all__ if f'id="rbench.plugin.{n}"' not in api]
    assert not missing, f"the API page does not render rbench.plugin's {missing}"


def test_the_measures_page_follows_the_measure_registry(site):
    from rbench.core.measures import FAMILIES, NOT_RANK_BASED
    from rbench.engine.metrics import RECORD_MEASURES

    text = " ".join(_text(site / "reference" / "measures" / "index.html").split())
    bare = "".join(text.split())  # code spans leave spaces around their text
    for family in FAMILIES.values():
        assert "".join(family.definition.replace("`", "").split()) in bare, family.name
        assert family.trec_eval in text
    assert all(name in text for name in NOT_RANK_BASED) and all(m in text for m in RECORD_MEASURES)
    assert "--overwrite only-missing" in text and "n/r" in text


def test_the_built_site_names_no_machine_local_path(site):
    bad = [str(p.relative_to(site)) for p in site.rglob("*.html") if LOCAL_PATHS.search(p.read_text(encoding="utf-8"))]
    assert bad == []


def test_readme_is_one_page_and_its_relative_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    assert missing == []


def test_no_machine_local_path_in_docs_readme_or_messages():
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "mkdocs.yml",
             *(p for p in DOCS.rglob("*") if p.is_file() and p.suffix in (".md", ".py", ".yml")),
             *(ROOT / "rbench").rglob("*.py"), *(ROOT / "rankers").rglob("*.py")]
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in files
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if LOCAL_PATHS.search(line)]
    assert bad == []


def test_the_write_a_ranker_guide_runs_as_written(capsys):
    (block,) = page_blocks(DOCS / "guides" / "write-a-ranker.md")
    namespace: dict = {}
    exec(compile(block, "write-a-ranker.md", "exec"), namespace)
    record = namespace["record"]
    assert record.ranker["name"] == "short-first" and record.ranker["config"] == {"weight": 2.0}
    assert record.n_queries == 100 and "short-first (weight=2.0)" in capsys.readouterr().out


def _hook():
    """docs/hooks/gen_pages.py as a module (mkdocs loads it by path; so does this test)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rbench_docs_gen_pages", DOCS / "hooks" / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_fresh():
    """docs/reference/{cli-commands,measures}.md are committed (linked from help texts and pages
    read outside the built site) and must equal what the generator writes now."""
    hook = _hook()
    stale = [rel for rel, text in hook.committed_pages().items()
             if not (DOCS / rel).is_file() or (DOCS / rel).read_text(encoding="utf-8") != text]
    assert not stale, f"docs/{stale[0]} is stale: run {hook.STALE_HINT} and commit the result"
    # the links that made them worth committing (dead on a repository browser before)
    assert "](reference/cli-commands.md)" in (DOCS / "index.md").read_text(encoding="utf-8")
    assert "](reference/measures.md)" in (DOCS / "concepts.md").read_text(encoding="utf-8")


class _ThirdPartyEP:
    name, value = "acme-ranker", "acme_rankers:AcmeRanker"

    class dist:  # noqa: N801 (importlib.metadata's attribute)
        name = "acme-rankers"

    def load(self) -> type:
        from rbench.api import BaseRanker

        return type("AcmeRanker", (BaseRanker,), {"name": "acme-ranker", "description": "not shipped with rbench",
                                                  "score": lambda self, q, c: None})


def test_only_the_shipped_rankers_get_pages_unless_the_builder_asks(monkeypatch):
    """A third party's plugin installed where the docs are built is no shipped ranker: no page
    (issue 43 item 5), unless RBENCH_DOCS_PLUGINS=1."""
    from rbench import rankers as discovery

    real = discovery._entry_points
    monkeypatch.setattr(discovery, "_entry_points", lambda: {**real(), "acme-ranker": _ThirdPartyEP()})
    monkeypatch.delenv("RBENCH_DOCS_PLUGINS", raising=False)
    hook = _hook()
    names = [name for name, _, _ in hook._rankers()]
    assert "bm25" in names and "acme-ranker" not in names
    assert "acme-ranker" in discovery.available_rankers()  # (rbench rankers still lists what is installed)
    monkeypatch.setenv("RBENCH_DOCS_PLUGINS", "1")
    hook = _hook()
    assert "acme-ranker" in [name for name, _, _ in hook._rankers()]
