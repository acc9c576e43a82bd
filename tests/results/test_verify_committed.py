"""``rbench verify`` checks the committed pool-variant records for real (issue 40, item 3).

The nine records under ``records/large/ml-100k~mixed`` and ``~scaled-*`` draw candidates from the
MS MARCO (TREC DL19) pool. Issue 30's package move renamed the tag hashed into every variant's
fingerprint ("rbench.pools v1" became "rbench.tasks.pools v1") with no change to any candidate,
so ``verify`` found "other data" and skipped them. These tests load the donor from the shared DL19
files (skipped when they are absent) and need every one of those records to verify, and a forged
copy to fail.

Bugs caught (planted by hand, then reverted): the tag renamed again (9 SKIPs); a donor's pool
read after ``rbench.tasks.fit_positives`` (its fingerprint then moves with its own test split:
9 SKIPs); a forged metric passing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rbench.core import paths
from tests.helpers import cli

REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("ml-100k~mixed", "ml-100k~scaled-3000", "ml-100k~scaled-5000")


@pytest.fixture
def dl19(shared_data):
    src = shared_data / "msmarco-dl19"
    if not src.exists():
        pytest.skip("msmarco-dl19 not in ../shared/data")
    paths.raw_dir("msmarco").parent.mkdir(parents=True, exist_ok=True)
    paths.raw_dir("msmarco").symlink_to(src, target_is_directory=True)
    return src


def test_the_committed_variant_records_verify(capsys, dl19):
    folders = [REPO / "records" / "large" / v for v in VARIANTS]
    n = sum(len(list(f.glob("*.json"))) for f in folders)
    assert n >= 9
    code, text, err = cli(capsys, "verify", *map(str, folders))
    assert code == 0, text + err
    assert f"{n} records: {n} OK, 0 MISMATCH, 0 SKIP" in text, text


def test_a_forged_variant_record_fails(capsys, dl19, tmp_path):
    src = REPO / "records" / "large" / "ml-100k~mixed"
    dst = tmp_path / "large" / "ml-100k~mixed"
    shutil.copytree(src, dst)
    rec = dst / "bm25.json"
    data = json.loads(rec.read_text())
    data["metrics"]["RR"] = 0.9
    rec.write_text(json.dumps(data))
    code, text, _ = cli(capsys, "verify", str(rec))
    assert code == 1 and text.startswith(f"MISMATCH {rec}") and "RR: stored 0.900000" in text, text
