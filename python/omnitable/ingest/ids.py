"""The ``_ai_unique_id_`` values an append adds, and their exact checks (docs/catalog.md).

An append claims ids: the generated ranges it reserved and wrote (one interval per fragment) or
the ids it was given. Before committing, supplied ids are checked against the base snapshot.
At commit, the catalog pre-filters the ids of every commit after the last checked version by
file statistics; a possible overlap comes back as :class:`IdsNotChecked`, and
:func:`commit_append` then checks those commits' ids exactly (one fragment at a time, or as a
Spark join for a DataFrame's ids, so memory stays bounded for hash-like ids) and retries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, IdsNotChecked
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.vocabulary.descriptors import FragmentDescriptor
from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from omnitable.catalog.records import FileRecord, FragmentRecord
    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext

SAMPLE = 5  # ids named in an error
_IDS = SnapshotScope(columns=frozenset({ROW_ID}))  # what the id checks read of a snapshot
_MAX_ROUNDS = 20  # exact re-checks before giving up on a table under constant appends


@dataclass
class IdClaim:
    """Ids one append adds (implements :class:`omnitable.catalog.commit.RowIdClaim`).

    Exactly one of: ``intervals`` (generated ids, inclusive, sorted, disjoint), ``supplied``
    (sorted unique ids held locally) or ``spark_ids`` (a DataFrame with a ``ROW_ID`` column whose
    min/max are ``bounds``).
    """

    checked_version: int
    intervals: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    supplied: np.ndarray | None = None
    spark_ids: DataFrame | None = None
    bounds: tuple[int, int] | None = None

    @classmethod
    def generated(cls, fragments: list[FragmentDescriptor], base_version: int) -> IdClaim:
        """The ids written into ``fragments`` (contiguous within each fragment)."""
        spans = sorted(b for b in (_fragment_bounds(f) for f in fragments) if b is not None)
        arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
        if len(arr) > 1 and bool(np.any(arr[1:, 0] <= arr[:-1, 1])):
            raise ValidationError(
                f"Cannot append: the written fragments' generated {ROW_ID} ranges overlap; "
                "nothing was committed, retry the append"
            )
        return cls(base_version, intervals=arr)

    def may_overlap(self, lo: int, hi: int) -> bool:
        """False only when no claimed id lies in ``[lo, hi]``."""
        if self.spark_ids is not None:
            return self.bounds is None or (self.bounds[0] <= hi and self.bounds[1] >= lo)
        if self.supplied is not None:
            s = self.supplied
            return bool(np.searchsorted(s, lo, "left") < np.searchsorted(s, hi, "right"))
        i = int(np.searchsorted(self.intervals[:, 0], hi, "right")) - 1
        return i >= 0 and int(self.intervals[i, 1]) >= lo

    def clashes(self, values: np.ndarray) -> np.ndarray:
        """The claimed ids among ``values`` (local claims only)."""
        if self.supplied is not None:
            return values[np.isin(values, self.supplied)]
        if len(self.intervals) == 0:
            return values[:0]
        starts, ends = self.intervals[:, 0], self.intervals[:, 1]
        i = np.searchsorted(starts, values, "right") - 1
        inside = (i >= 0) & (values <= ends[np.maximum(i, 0)])
        return values[inside]


def _fragment_bounds(frag: FragmentDescriptor) -> tuple[int, int] | None:
    for f in frag.files:
        if ROW_ID in f.columns:
            return f.columns[ROW_ID].int_bounds()
    return None


def check_reserved(fragments: list[FragmentDescriptor], lo: int, hi: int) -> None:
    """Raise unless every generated id written into ``fragments`` lies in the reserved
    ``[lo, hi]`` (tasks number rows from their partition id; the driver does not trust it)."""
    for frag in fragments:
        b = _fragment_bounds(frag)
        if b is not None and (b[0] < lo or b[1] > hi):
            raise ValidationError(
                f"Cannot append: fragment {frag.fragment_id} holds generated {ROW_ID} values "
                f"[{b[0]}, {b[1]}] outside the reserved range [{lo}, {hi}] (a task saw an "
                "unexpected partition id); nothing was committed, retry the append"
            )
    seqs = [f.seq for f in fragments]
    if len(set(seqs)) != len(seqs):
        raise ValidationError(
            "Cannot append: two written fragments have the same sequence number (a task saw an "
            "unexpected partition id); nothing was committed, retry the append"
        )


def find_clashes(
    ctx: TableContext, snap: Snapshot, claim: IdClaim, batch_names: Iterable[str]
) -> tuple[int, list[int]]:
    """(how many, a few) claimed ids present in the batches ``batch_names`` of ``snap``.

    Only fragments whose ``ROW_ID`` statistics may overlap the claim are read: locally one at a
    time, or in Spark (their id column files joined with the claimed DataFrame)."""
    candidates = _candidates(snap, claim, batch_names)
    if not candidates:
        return 0, []
    if claim.spark_ids is not None:
        uris = [ctx.location.child_uri(f.path) for _, f in candidates]
        return _spark_clashes(claim.spark_ids, uris, snap.column(ROW_ID).physical_name)
    from omnitable.format.reader import FragmentReader

    reader = FragmentReader(ctx.location, snap)
    count = 0
    sample: list[int] = []
    for frag, _ in candidates:
        # deleted rows too: an id is never handed out twice, even after its row was deleted
        values = reader.read_all_rows(frag, [ROW_ID]).column(ROW_ID).to_numpy()
        hits = claim.clashes(values)
        count += len(hits)
        sample.extend(int(x) for x in hits[: SAMPLE - len(sample)])
    return count, sample


def _candidates(
    snap: Snapshot, claim: IdClaim, batch_names: Iterable[str]
) -> list[tuple[FragmentRecord, FileRecord]]:
    """Fragments of ``batch_names`` (with their id file) whose ids may overlap the claim."""
    names = sorted(set(batch_names))
    if not names:
        return []
    rid = snap.column(ROW_ID).column_id
    out = []
    for frag in snap.fragments_of(names):
        provider = snap.resolve(frag.fragment_id, [rid])[rid]
        if provider is None:
            continue
        bounds = provider.stats(rid).int_bounds()
        if bounds is None or claim.may_overlap(*bounds):
            out.append((frag, provider))
    return out


def _spark_clashes(ids: DataFrame, uris: list[str], physical: str) -> tuple[int, list[int]]:
    from pyspark.sql import functions as F

    existing = ids.sparkSession.read.parquet(*uris).select(F.col(physical).alias(ROW_ID))
    joined = ids.select(ROW_ID).join(existing, ROW_ID)
    sample = [int(r[0]) for r in joined.limit(SAMPLE).collect()]
    return (joined.count() if sample else 0), sample


def check_existing(ctx: TableContext, snap: Snapshot, claim: IdClaim, replaced: set[str]) -> None:
    """Raise ValidationError when supplied ids already exist in ``snap`` (outside ``replaced``
    batch ids, which the append replaces)."""
    names = [b.name for b in snap.batches if b.batch_id not in replaced]
    count, sample = find_clashes(ctx, snap, claim, names)
    if count:
        raise ValidationError(
            f"Cannot append to table '{ctx.name}': {count} supplied {ROW_ID} value(s) already "
            f"exist, e.g. {sample}; supply ids that are not in the table (or none)"
        )


def commit_append(ctx: TableContext, req: CommitRequest, claim: IdClaim) -> int:
    """Commit ``req`` with ``claim`` as its row ids; checks the ids of concurrent commits
    exactly whenever the catalog's statistics pre-filter cannot rule out an overlap.

    Raises:
        CommitConflict: a concurrent commit added some of the same ids (named in the message).
    """
    req.row_ids = claim
    failpoint("append.before_commit")
    for _ in range(_MAX_ROUNDS):
        try:
            return ctx.commit(req)
        except IdsNotChecked as exc:
            _check_since(ctx, req, claim, exc.head)
            claim.checked_version = exc.head
    raise CommitConflict(
        f"Cannot commit {req.op} to table '{ctx.name}': other commits kept adding rows while "
        f"its {ROW_ID} values were checked; retry the append",
        [("*", ROW_ID)],
    )


def _check_since(ctx: TableContext, req: CommitRequest, claim: IdClaim, head: int) -> None:
    snap = ctx.snapshot(version=head, branch=req.branch, scope=_IDS)
    names = [b.name for b in snap.batches if b.added_version > claim.checked_version]
    count, sample = find_clashes(ctx, snap, claim, names)
    if count:
        raise CommitConflict(
            f"Cannot commit {req.op} to table '{ctx.name}': {count} of its {ROW_ID} value(s) "
            f"were added by a concurrent commit (after version {claim.checked_version}), e.g. "
            f"{sample}; nothing was committed. Supply ids that are not in the table (or let "
            "OmniTable generate them) and retry.",
            [("*", ROW_ID)],
        )
