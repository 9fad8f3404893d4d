"""The durable work queue of a backfill plan (docs/catalog.md, "Work queue"; docs/features.md).

Several processes running the same plan share its work items through the existing
``omnitable_meta`` table (the catalog schema is not changed for it):

- ``queue:<table_id>:<plan_id>``: the header, a JSON object ``{"state": "open"|"finished"|"failed",
  "signature", "base_version", "branch", "items", "created"}``. ``plan_id`` is a stable hash of
  the plan (table, branch, base version, targets, batches, steps and their fragments), so
  processes that plan the same work find the same queue; ``signature`` hashes what was asked
  (table, branch, targets, batches, chunk size), so a process that planned later (at a newer
  version, after some items were committed) finds the open queue and joins it.
- ``queue:<table_id>:<plan_id>:<step>-<chunk>`` (zero-padded, so keys sort in step order): one
  work item, ``{"step", "chunk", "fragments", "state": "pending"|"leased"|"done"|"failed",
  "owner": {"run_id", "host", "pid"}, "token", "expires", "heartbeat", "attempts", "version",
  "error"}``.

The header and all items are inserted in one write transaction, so concurrent creators end with
one set (the loser's insert of the header fails and it reads the winner's). Leasing picks one
``pending`` item, or a ``leased`` one whose lease expired, of the first step not yet done (a
step's items are leased only once every item of the previous steps is done): on PostgreSQL the
candidate row is re-read ``SELECT ... FOR UPDATE SKIP LOCKED`` (a row another leaser holds is
skipped, not waited on); on SQLite the whole read-pick-write runs under the database write lock
(the write transaction begins immediately). A fresh ``token`` per lease tells owners apart.

While a worker commits an item's chunk, :func:`holding_item` makes the item current for the
thread; the table's commit (catalog/commit.py) then calls :func:`check_item` inside its
transaction, after the table lock: the item must still be ``leased`` with our token (read
``FOR UPDATE`` on PostgreSQL, so a re-lease waits for the commit to end), else
:class:`ItemLeaseLost` is raised and nothing is committed; and :func:`mark_committed` marks it
``done`` with the new version in the same transaction. An item is therefore committed exactly
once even when its lease expired while a worker was committing and another worker took it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from omnitable.catalog.store import CatalogStore
from omnitable.exceptions import OmniTableError

PENDING, LEASED, DONE, FAILED = "pending", "leased", "done", "failed"


class ItemLeaseLost(OmniTableError):
    """A work item's lease was taken by another worker (or the item is done): the chunk must not
    commit; the other worker's commit counts."""


@dataclass(frozen=True)
class Item:
    """One work item: a chunk of one step's fragments."""

    table_id: str
    plan_id: str
    step: int
    chunk: int
    fragments: list[str]
    state: str = PENDING
    owner: dict[str, Any] = field(default_factory=dict)
    token: str = ""
    expires: float = 0.0
    heartbeat: float = 0.0
    attempts: int = 0
    version: int | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        return item_key(self.table_id, self.plan_id, self.step, self.chunk)

    def to_json(self) -> str:
        doc = {k: v for k, v in asdict(self).items() if k not in ("table_id", "plan_id")}
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, table_id: str, plan_id: str, raw: str) -> Item:
        return cls(table_id, plan_id, **json.loads(raw))

    def leasable(self, now: float) -> bool:
        return self.state == PENDING or (self.state == LEASED and self.expires < now)


@dataclass(frozen=True)
class Wait:
    """Nothing to lease now: items of the current step are leased by live workers."""


@dataclass(frozen=True)
class Finished:
    """Every item is done (or the queue was finished)."""


@dataclass(frozen=True)
class Failed:
    """An item failed for good: the plan cannot finish (``error`` says which and why)."""

    error: str


def header_key(table_id: str, plan_id: str) -> str:
    return f"queue:{table_id}:{plan_id}"


def item_key(table_id: str, plan_id: str, step: int, chunk: int) -> str:
    return f"{header_key(table_id, plan_id)}:{step:04d}-{chunk:06d}"


def this_owner(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid()}


def _rows(conn: Connection, prefix: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text("SELECT key, value FROM omnitable_meta WHERE key LIKE :p ORDER BY key"),
        {"p": prefix + "%"},  # "_" in an id matches itself too: filtered below
    ).all()
    return [(str(k), str(v)) for k, v in rows if str(k).startswith(prefix)]


def _items(conn: Connection, table_id: str, plan_id: str) -> list[Item]:
    prefix = header_key(table_id, plan_id) + ":"
    return [Item.from_json(table_id, plan_id, v) for _, v in _rows(conn, prefix)]


def _lock_read(conn: Connection, key: str, skip_locked: bool = False) -> str | None:
    q = "SELECT value FROM omnitable_meta WHERE key = :k"
    if conn.dialect.name != "sqlite":
        q += " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    raw = conn.execute(text(q), {"k": key}).scalar()
    return None if raw is None else str(raw)


def _ours(conn: Connection, item: Item) -> Item | None:
    """``item`` as stored, read ``FOR UPDATE`` (PostgreSQL; SQLite: under the write lock), when
    it is still leased with our token; None when it is gone, settled or leased by another."""
    raw = _lock_read(conn, item.key)
    if raw is None:
        return None
    cur = Item.from_json(item.table_id, item.plan_id, raw)
    return cur if cur.state == LEASED and cur.token == item.token else None


def _update(conn: Connection, item: Item) -> None:
    conn.execute(
        text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
        {"k": item.key, "v": item.to_json()},
    )


def create(
    store: CatalogStore, table_id: str, plan_id: str, header: dict[str, Any], items: list[Item]
) -> bool:
    """Create the queue (header and items in one transaction) unless it exists (a ``failed``
    one is replaced: the same plan runs again after the failure); whether this call created
    it."""
    key = header_key(table_id, plan_id)
    doc = json.dumps({**header, "state": "open", "items": len(items), "created": time.time()})
    try:
        with store.write() as conn:
            found = _lock_read(conn, key)
            if found is not None and json.loads(found)["state"] != FAILED:
                return False
            if found is not None:
                conn.execute(
                    text("DELETE FROM omnitable_meta WHERE key = :k OR key LIKE :p"),
                    {"k": key, "p": key + ":%"},
                )
            conn.execute(
                text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
                {"k": key, "v": doc},
            )
            for item in items:
                conn.execute(
                    text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
                    {"k": item.key, "v": item.to_json()},
                )
        return True
    except IntegrityError:  # a concurrent creator inserted the header first
        return False


def read_header(store: CatalogStore, table_id: str, plan_id: str) -> dict[str, Any] | None:
    raw = store.get_meta(header_key(table_id, plan_id))
    return None if raw is None else dict(json.loads(raw))


def find_open(
    store: CatalogStore, table_id: str, signature: str
) -> tuple[str, dict[str, Any]] | None:
    """The open queue of this table with ``signature`` (the oldest one), as (plan_id, header)."""
    prefix = f"queue:{table_id}:"
    with store.read() as conn:
        found = [
            (k[len(prefix) :], json.loads(v))
            for k, v in _rows(conn, prefix)
            if ":" not in k[len(prefix) :]
        ]
    open_ = [(p, h) for p, h in found if h["state"] == "open" and h["signature"] == signature]
    return min(open_, key=lambda x: x[1]["created"]) if open_ else None


def items(store: CatalogStore, table_id: str, plan_id: str) -> list[Item]:
    """Every item of the queue, in step order."""
    with store.read() as conn:
        return _items(conn, table_id, plan_id)


def lease_next(
    store: CatalogStore, table_id: str, plan_id: str, owner: dict[str, Any], ttl_s: float
) -> Item | Wait | Finished | Failed:
    """Lease the next item for ``ttl_s`` seconds (see the module doc)."""
    with store.write() as conn:
        header = conn.execute(  # not locked: leasers must not queue up on the header
            text("SELECT value FROM omnitable_meta WHERE key = :k"),
            {"k": header_key(table_id, plan_id)},
        ).scalar()
        doc = None if header is None else json.loads(header)
        if doc is not None and doc["state"] == FAILED:
            return Failed(str(doc.get("error")))
        if doc is None or doc["state"] != "open":
            return Finished()
        queue = _items(conn, table_id, plan_id)
        open_steps = [i.step for i in queue if i.state != DONE]
        if not open_steps:
            return Finished()
        now = time.time()
        for cand in [i for i in queue if i.step == min(open_steps) and i.leasable(now)]:
            raw = _lock_read(conn, cand.key, skip_locked=True)
            if raw is None:  # held by another leaser (PostgreSQL): skip it
                continue
            cur = Item.from_json(table_id, plan_id, raw)
            if not cur.leasable(now):
                continue
            new = replace(cur, state=LEASED, owner=owner, token=uuid.uuid4().hex,
                          expires=now + ttl_s, heartbeat=now, attempts=cur.attempts + 1)  # fmt: skip
            _update(conn, new)
            return new
        return Wait()


def heartbeat(store: CatalogStore, item: Item, ttl_s: float) -> bool:
    """Extend ``item``'s lease by ``ttl_s`` from now; False when it is no longer ours."""
    with store.write() as conn:
        cur = _ours(conn, item)
        if cur is None:
            return False
        now = time.time()
        _update(conn, replace(cur, expires=now + ttl_s, heartbeat=now))
    return True


def settle(store: CatalogStore, item: Item, state: str, error: str | None = None) -> bool:
    """Set our leased ``item`` to ``state`` (``pending``: give it back; ``done``: nothing to
    commit; ``failed``: for good, with ``error``); False when it is no longer ours."""
    with store.write() as conn:
        cur = _ours(conn, item)
        if cur is None:
            return False
        _update(conn, replace(cur, state=state, token="" if state == PENDING else cur.token,
                              expires=0.0, error=error))  # fmt: skip
        if state == FAILED:  # the plan cannot finish: other workers stop, a new plan starts anew
            key = header_key(item.table_id, item.plan_id)
            doc = json.loads(_lock_read(conn, key) or "{}")
            why = f"work item {item.step}-{item.chunk} failed (worker {cur.owner}): {error}"
            conn.execute(
                text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
                {"k": key, "v": json.dumps({**doc, "state": FAILED, "error": why})},
            )
    return True


def finish(store: CatalogStore, table_id: str, plan_id: str) -> bool:
    """When every item is done: mark the header ``finished`` and delete the items (a later plan
    of the same work starts anew); whether this call finished it."""
    key = header_key(table_id, plan_id)
    with store.write() as conn:
        raw = _lock_read(conn, key)
        if raw is None or json.loads(raw)["state"] != "open":
            return False
        queue = _items(conn, table_id, plan_id)
        if any(i.state != DONE for i in queue):
            return False
        doc = {**json.loads(raw), "state": "finished", "finished": time.time(),
               "versions": sorted({i.version for i in queue if i.version is not None})}  # fmt: skip
        conn.execute(
            text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
            {"k": key, "v": json.dumps(doc)},
        )
        conn.execute(text("DELETE FROM omnitable_meta WHERE key LIKE :p"), {"p": key + ":%"})
    return True


_current: ContextVar[Item | None] = ContextVar("omnitable_queue_item", default=None)


@contextmanager
def holding_item(item: Item) -> Iterator[None]:
    """Make ``item`` the current one of this thread: commits of its table check and finish it."""
    reset = _current.set(item)
    try:
        yield
    finally:
        _current.reset(reset)


def check_item(conn: Connection, table_id: str) -> Item | None:
    """Inside a commit transaction of ``table_id`` (after its table lock): the current item of
    this thread, if any, must still be leased with our token.

    Raises:
        ItemLeaseLost: another worker took the item (our lease expired) or it is done.
    """
    item = _current.get()
    if item is None or item.table_id != table_id:
        return None
    raw = _lock_read(conn, item.key)
    cur = None if raw is None else Item.from_json(table_id, item.plan_id, raw)
    if cur is not None and cur.state == LEASED and cur.token == item.token:
        return item
    now = "gone" if cur is None else f"{cur.state}, owner {cur.owner}"
    if cur is not None and cur.version is not None:
        now += f", committed at version {cur.version}"
    raise ItemLeaseLost(
        f"Cannot commit work item {item.step}-{item.chunk} of queue {item.plan_id}: its lease "
        f"expired and another worker took it (now {now}); nothing was committed (the other "
        "worker's commit counts)"
    )


def mark_committed(conn: Connection, item: Item | None, version: int) -> None:
    """In the commit transaction that checked ``item``: mark it done at ``version``."""
    if item is not None:
        _update(conn, replace(item, state=DONE, version=version, expires=0.0))
