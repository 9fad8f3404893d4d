"""Maintenance jobs racing each other (docs/governance.md, "Conflicts") on SQLite and PostgreSQL:
compact and fold on one batch (either paused while the other commits), and expiry against a
compaction both ways: nothing a live version reads is deleted, every version history() does not
mark expired reads back as before."""

from __future__ import annotations

from typing import Any

import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import NotFoundError

from .conftest import decayed_table

pytestmark = pytest.mark.shared_warehouse


def _versions(t: omnitable.Table) -> dict[int, list[Any]]:
    """Every version history() does not mark expired, read back."""
    return {h.version: t.read(version=h.version).to_pylist() for h in t.history() if not h.expired}


MAINTAIN: dict[str, dict[str, Any]] = {
    "compact": {"target_fragment_rows": 100},
    "fold": {"min_deleted_fraction": 0.1},
}


@pytest.mark.parametrize("paused,other", [("compact", "fold"), ("fold", "compact")])
def test_compact_and_fold_on_one_batch(
    wh: omnitable.Warehouse, name: str, paused: str, other: str
) -> None:
    """The paused job's commit conflicts ("the batch it replaces was changed"), it prepares
    again on the rewritten batch and has nothing left to do."""
    t = decayed_table(wh, name)
    rows, before = t.read().to_pylist(), _versions(t)
    results: list[Any] = []

    def commit_other() -> None:
        results.extend(t.maintain([other], options={other: MAINTAIN[other]}))

    with hooked("governance.before_commit", commit_other):
        (mine,) = t.maintain([paused], options={paused: MAINTAIN[paused]})
    assert results[0].outcome == "committed"
    assert mine.outcome == "nothing_to_do"
    assert t.read().to_pylist() == rows and len(t.snapshot().fragments_of(["b0"])) == 1
    assert {v: r for v, r in _versions(t).items() if v in before} == before


def test_expiry_commits_while_a_compaction_executes(wh: omnitable.Warehouse, name: str) -> None:
    """The compaction read its base version's files; expiry keeps the head's files, so the
    compaction commits, and every unexpired version reads back."""
    t = decayed_table(wh, name)
    rows, before = t.read().to_pylist(), _versions(t)
    expired: list[Any] = []

    def expire() -> None:
        expired.extend(t.maintain(["expire"], options={"expire": {"retain_last": 1}}))

    with hooked("governance.after_file", expire):
        (compact,) = t.maintain(["compact"], options={"compact": MAINTAIN["compact"]})
    assert expired[0].outcome == "committed" and compact.outcome == "committed"
    assert t.read().to_pylist() == rows
    now = _versions(t)
    assert {v: r for v, r in now.items() if v in before} == {
        v: r for v, r in before.items() if v in now
    }
    assert {h.version for h in t.history() if h.expired} == {0, 1}
    with pytest.raises(NotFoundError, match="expired"):
        t.read(version=1)


def test_a_compaction_commits_while_an_expiry_is_prepared(
    wh: omnitable.Warehouse, name: str
) -> None:
    """Expiry planned on the old head (retain 1); the compaction ends the old fragments and
    commits first: the expire commit re-computes what is purgeable and keeps the old head's
    files (still at its horizon), so every unexpired version reads back."""
    t = decayed_table(wh, name)
    head, rows = t.version, t.read().to_pylist()
    compacted: list[Any] = []

    def compact() -> None:
        compacted.extend(t.maintain(["compact"], options={"compact": MAINTAIN["compact"]}))

    with hooked("governance.after_prepare", compact):
        (expire,) = t.maintain(["expire"], options={"expire": {"retain_last": 1}})
    assert compacted[0].outcome == "committed" and expire.outcome == "committed"
    assert expire.summary["horizons"] == {"main": head}
    assert t.read(version=head).to_pylist() == rows == t.read().to_pylist()
    assert [h.version for h in t.history() if not h.expired][-1] == head


def test_an_error_after_the_commit_keeps_the_committed_files(
    wh: omnitable.Warehouse, name: str
) -> None:
    """An error once the commit's transaction ended (a lost connection, an interrupt) must not
    remove the files the commit references: run_job removes only unreferenced ones."""
    t = decayed_table(wh, name)
    rows, version = t.read().to_pylist(), t.version

    def fail() -> None:
        raise KeyboardInterrupt

    with hooked("commit.after_commit", fail), pytest.raises(KeyboardInterrupt):
        t.maintain(["compact"], options={"compact": MAINTAIN["compact"]})
    assert t.version == version + 1 and len(t.snapshot().fragments_of(["b0"])) == 1
    assert t.read().to_pylist() == rows
