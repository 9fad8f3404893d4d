"""Leases: which governance service may run one job on one table (docs/governance.md, "Running
as a service").

A lease is a row of the existing ``omnitable_meta`` table (the catalog schema is not changed for
it) under the key ``lease:<table_id>:<job>``, a JSON object ``{"owner": ..., "token": ...,
"expires": epoch seconds}``. It is acquired by a compare-and-set inside one write transaction
(absent, expired, or already ours: take it; else report the holder), renewed by rewriting the
row only when it still holds our token, and released by deleting it only when it still does.
``token`` is fresh per acquisition, so an owner that lost its lease and took it again never
mistakes the new lease for the old one.

While a job runs, :func:`holding` makes the lease current for the thread; every catalog commit
of that table (catalog/commit.py, catalog/expiry.py) and the orphan job's deletes call
:func:`check_held` inside their transaction, after the table lock: if another owner took the
lease meanwhile (ours had expired), the commit raises :class:`LeaseLost` and nothing is
committed. On PostgreSQL the lease row is read ``FOR UPDATE``, so a takeover waits for the commit
to end; on SQLite writers are serialized. Expiry times are the services' wall clocks: they must
agree to well within the TTL.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from omnitable.catalog.store import CatalogStore
from omnitable.exceptions import OmniTableError


class LeaseLost(OmniTableError):
    """A job's lease expired and another service took it: the job must not commit."""


@dataclass(frozen=True)
class Lease:
    """A held lease: ``value`` is the row as we last wrote it."""

    table_id: str
    job: str
    owner: str
    token: str
    expires: float

    @property
    def key(self) -> str:
        return lease_key(self.table_id, self.job)

    def to_json(self) -> str:
        doc = {"owner": self.owner, "token": self.token, "expires": self.expires}
        return json.dumps(doc, sort_keys=True)


@dataclass(frozen=True)
class Holder:
    """Who holds a lease we could not take, and until when."""

    owner: str
    expires: float


def lease_key(table_id: str, job: str) -> str:
    return f"lease:{table_id}:{job}"


_current: ContextVar[Lease | None] = ContextVar("omnitable_lease", default=None)


def _read(conn: Connection, key: str, lock: bool = False) -> str | None:
    q = "SELECT value FROM omnitable_meta WHERE key = :k"
    if lock and conn.dialect.name != "sqlite":
        q += " FOR UPDATE"
    raw = conn.execute(text(q), {"k": key}).scalar()
    return None if raw is None else str(raw)


def acquire(
    store: CatalogStore, table_id: str, job: str, owner: str, ttl_s: float
) -> Lease | Holder:
    """Take the lease of ``job`` on the table for ``ttl_s`` seconds when it is free, expired or
    already ``owner``'s; else return its :class:`Holder`."""
    lease = Lease(table_id, job, owner, uuid.uuid4().hex, time.time() + ttl_s)
    try:
        with store.write() as conn:
            raw = _read(conn, lease.key, lock=True)
            if raw is None:
                conn.execute(
                    text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
                    {"k": lease.key, "v": lease.to_json()},
                )
                return lease
            doc = json.loads(raw)
            if doc["owner"] != owner and float(doc["expires"]) > time.time():
                return Holder(str(doc["owner"]), float(doc["expires"]))
            done = conn.execute(
                text("UPDATE omnitable_meta SET value = :v WHERE key = :k AND value = :old"),
                {"k": lease.key, "v": lease.to_json(), "old": raw},
            )
            if done.rowcount == 1:
                return lease
            return Holder("unknown", time.time())  # taken between our read and write
    except IntegrityError:  # another service inserted it first
        raw = store.get_meta(lease.key)
        doc = json.loads(raw) if raw else {"owner": "unknown", "expires": time.time()}
        return Holder(str(doc["owner"]), float(doc["expires"]))


def renew(store: CatalogStore, lease: Lease, ttl_s: float) -> Lease | None:
    """Extend ``lease`` by ``ttl_s`` from now; None when it is no longer ours (taken)."""
    new = Lease(lease.table_id, lease.job, lease.owner, lease.token, time.time() + ttl_s)
    with store.write() as conn:
        raw = _read(conn, lease.key, lock=True)
        if raw is None or json.loads(raw)["token"] != lease.token:
            return None
        conn.execute(
            text("UPDATE omnitable_meta SET value = :v WHERE key = :k AND value = :old"),
            {"k": lease.key, "v": new.to_json(), "old": raw},
        )
    return new


def release(store: CatalogStore, lease: Lease) -> bool:
    """Delete ``lease`` when it is still ours; whether it was."""
    with store.write() as conn:
        raw = _read(conn, lease.key, lock=True)
        if raw is None or json.loads(raw)["token"] != lease.token:
            return False
        conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": lease.key})
    return True


def holder(store: CatalogStore, table_id: str, job: str) -> Holder | None:
    """Who holds the lease of ``job`` on the table (expired or not), if anyone."""
    raw = store.get_meta(lease_key(table_id, job))
    if raw is None:
        return None
    doc = json.loads(raw)
    return Holder(str(doc["owner"]), float(doc["expires"]))


@contextmanager
def holding(lease: Lease) -> Iterator[None]:
    """Make ``lease`` the current one of this thread: commits of its table check it."""
    reset = _current.set(lease)
    try:
        yield
    finally:
        _current.reset(reset)


def check_held(conn: Connection, table_id: str) -> None:
    """Inside a commit transaction of ``table_id`` (after its table lock): when this thread
    runs a job under a lease of that table, the lease must still hold our token.

    Raises:
        LeaseLost: another service took the lease; nothing may be committed.
    """
    lease = _current.get()
    if lease is None or lease.table_id != table_id:
        return
    raw = _read(conn, lease.key, lock=True)
    if raw is not None and json.loads(raw)["token"] == lease.token:
        return
    now = "nobody" if raw is None else repr(json.loads(raw)["owner"])
    raise LeaseLost(
        f"Cannot commit {lease.job}: its lease on the table (id {table_id}) was lost (it expired "
        f"and is now held by {now}); nothing was committed"
    )
