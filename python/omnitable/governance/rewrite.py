"""Rewriting batches as of one snapshot: the core of compaction and folding (docs/governance.md).

Every fragment of a batch is read as of the plan's version, with every column that is still
visible there (active and retired: a retired column's data must survive for ``Table.restore``),
each from the file that provides it (newest wins, so update overlays are folded in). The rows its
deletion vector marks are dropped, ``_ai_unique_id_`` and the row order are kept, and consecutive
fragments of the same *layout* are written together as target-sized fragments of a new batch of
the same name.

A fragment's layout is the list of its *slots*: the columns one kind of file provided, grouped
by column group, feature version and lineage (the feature, the engine and, per input, whether
the input file its lineage names is still that input's current file). Only fragments with equal
layouts are merged, so every new file has one column set and one lineage, and a feature's state
(done, stale, missing) is exactly what it was: an input that was current is named by its new
file, one that was not keeps naming its old file (still stale).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, LineageEntry
from omnitable.catalog.records import BatchRecord, ColumnRecord, FileRecord, FragmentRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import CorruptInputError
from omnitable.format.fs import delete_quietly
from omnitable.format.keyindex import index_path, write_key_index
from omnitable.format.writer import WriteOptions, batch_directory, new_id, write_column_file
from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor
from omnitable.vocabulary.keys import key_hashes, table_key

Lineage = tuple[str, str, tuple[tuple[str, bool], ...]]  # feature, engine, (input, current)


@dataclass(frozen=True, order=True)
class Slot:
    """One file of a rewritten fragment: ``columns`` (column id, feature version) of ``group``
    with one lineage (None: raw columns)."""

    group: str
    columns: tuple[tuple[int, str], ...]
    lineage: Lineage | None


@dataclass
class OldFragment:
    """A fragment of the batch as the plan read it."""

    record: FragmentRecord
    keep: np.ndarray | None  # rows kept (None: all)
    live_rows: int
    layout: tuple[Slot, ...]
    providers: dict[int, FileRecord]  # column id -> providing file


@dataclass
class BatchStats:
    """A batch's shape at a snapshot: what the jobs decide on."""

    batch: BatchRecord
    fragments: int
    rows: int
    deleted: int
    files: int
    overlays: int  # files beyond one per (fragment, group): update overlays to fold

    @property
    def live(self) -> int:
        return self.rows - self.deleted

    def to_action(self, target: int) -> dict[str, Any]:
        return {
            "batch": self.batch.name, "batch_id": self.batch.batch_id,
            "fragments": self.fragments, "files": self.files, "rows": self.live,
            "deleted_rows": self.deleted, "overlay_files": self.overlays,
            "target_fragments": max(1, math.ceil(self.live / target)) if self.live else 0,
        }  # fmt: skip


def batch_stats(snap: Snapshot) -> list[BatchStats]:
    """The shape of every batch of ``snap`` (loaded with its files, statistics not needed)."""
    out = {b.batch_id: BatchStats(b, 0, 0, 0, 0, 0) for b in snap.batches}
    for frag in snap.fragments:
        st = out[frag.batch_id]
        files = snap.files_by_fragment.get(frag.fragment_id, [])
        dv = snap.deletion(frag.fragment_id)
        st.fragments += 1
        st.rows += frag.row_count
        st.deleted += dv.deleted_count if dv is not None else 0
        st.files += len(files)
        st.overlays += len(files) - len({f.group_name for f in files})
    return list(out.values())


@dataclass
class Rewritten:
    """What rewriting the planned batches wrote: the commit's pieces and every path written."""

    new_batches: list[tuple[str, str]] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)  # new batch -> the read position kept
    removed_batches: list[str] = field(default_factory=list)
    fragments: list[FragmentDescriptor] = field(default_factory=list)
    removed_fragments: list[str] = field(default_factory=list)
    lineage: list[LineageEntry] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # relative to the table location
    summary: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def request(self, op: str, base_version: int) -> CommitRequest:
        return CommitRequest(
            op=op,
            base_version=base_version,
            summary=dict(self.summary),
            new_batches=self.new_batches,
            batch_positions=self.positions,
            removed_batches=self.removed_batches,
            new_fragments=self.fragments,
            removed_fragments=self.removed_fragments,
            lineage=self.lineage,
            rewrite=True,
        )


def rewrite_batches(
    ctx: TableContext, base_version: int, batch_ids: Sequence[str], target_rows: int,
    regroup: Mapping[int, str] | None = None,
) -> Rewritten:  # fmt: skip
    """Write the batches ``batch_ids`` of ``base_version`` again (see the module docstring)
    under new names; nothing is committed. ``regroup``: column id -> the column group its raw
    values are written to (columns with a lineage or feature version keep theirs). On an error
    the files already written are removed before it propagates."""
    out = Rewritten()
    try:
        return _rewrite(ctx, base_version, batch_ids, target_rows, out, regroup or {})
    except BaseException:
        delete_quietly(ctx.location.fs, [ctx.location.child_path(p) for p in out.paths])
        raise


def _rewrite(
    ctx: TableContext, base_version: int, batch_ids: Sequence[str], target_rows: int,
    out: Rewritten, regroup: Mapping[int, str],
) -> Rewritten:  # fmt: skip
    head = ctx.snapshot(version=base_version, scope=SnapshotScope(fragments=False))
    names = [b.name for b in head.batches if b.batch_id in set(batch_ids)]
    snap = ctx.snapshot(version=base_version, scope=SnapshotScope(batches=frozenset(names),
                                                                  stats=False))  # fmt: skip
    columns = ctx.catalog.columns_at(ctx.record, ctx.branch, base_version)
    rewriter = _Rewriter(ctx, snap, columns, ctx.options(target_fragment_rows=target_rows), out)
    rewriter.regroup = regroup
    prefix = new_id()[:24]  # new ids sort like the batches they replace (one commit adds them)
    first: dict[str, int] = {}
    for i, f in enumerate(snap.fragments):  # the table's row order
        first.setdefault(f.batch_id, i)
    chosen = sorted(
        (b for b in snap.batches if b.batch_id in set(batch_ids)),
        key=lambda b: first.get(b.batch_id, len(first)),
    )
    for i, batch in enumerate(chosen):
        rewriter.batch(batch, f"{prefix}{i:08x}")
    return out


class _Rewriter:
    def __init__(
        self,
        ctx: TableContext,
        snap: Snapshot,
        columns: list[ColumnRecord],
        options: WriteOptions,
        out: Rewritten,
    ) -> None:
        self.ctx, self.snap, self.options, self.out = ctx, snap, options, out
        self.columns = {c.column_id: c for c in columns}
        self.by_name = {c.name: c for c in columns}
        self.key = table_key(ctx.record.properties)
        self.lineage_rows = self._lineage()
        self.regroup: Mapping[int, str] = {}

    def _lineage(self) -> dict[tuple[str, int], dict[str, Any]]:
        ids = sorted({f.file_id for fs in self.snap.files_by_fragment.values() for f in fs
                      if any(c.feature_version is not None for c in f.columns.values())})  # fmt: skip
        rows = self.ctx.catalog.lineage_of(self.ctx.record, ids) if ids else []
        return {(r["file_id"], int(r["column_id"])): r for r in rows}

    def batch(self, batch: BatchRecord, new_batch: str) -> None:
        olds = [self._old(f) for f in self.snap.fragments if f.batch_id == batch.batch_id]
        self.out.new_batches.append((new_batch, batch.name))
        self.out.positions[new_batch] = batch.position  # the batch keeps its place in reads
        self.out.removed_batches.append(batch.batch_id)
        self.out.removed_fragments += [o.record.fragment_id for o in olds]
        s = self.out.summary
        s["fragments_before"] += len(olds)
        s["files_before"] += sum(
            len(self.snap.files_by_fragment.get(o.record.fragment_id, [])) for o in olds
        )
        s["deleted_rows_dropped"] += sum(o.record.row_count - o.live_rows for o in olds)
        for seq, run in enumerate(self._runs([o for o in olds if o.live_rows > 0])):
            frag = self._write(batch.name, new_batch, seq, run)
            self.out.fragments.append(frag)
            s["fragments_after"] += 1
            s["files_after"] += len(frag.files)
            s["rows"] += frag.row_count
            s["bytes_written"] += sum(f.size_bytes for f in frag.files)

    def _old(self, frag: FragmentRecord) -> OldFragment:
        """The fragment's kept rows, providers and layout at the plan's version."""
        dv = self.snap.deletion(frag.fragment_id)
        keep = None if dv is None else ~dv.mask()
        live = frag.row_count if keep is None else int(keep.sum())
        found = self.snap.resolve(frag.fragment_id, sorted(self.columns))
        providers = {cid: p for cid, p in found.items() if p is not None}
        slots: dict[tuple[str, Lineage | None], list[tuple[int, str]]] = defaultdict(list)
        for cid, p in sorted(providers.items()):
            lineage = self._lineage_key(p, cid, providers)
            version = p.columns[cid].feature_version or ""
            raw = lineage is None and not version
            group = self.regroup.get(cid, p.group_name) if raw else p.group_name
            slots[(group, lineage)].append((cid, version))
        layout = tuple(sorted(Slot(g, tuple(cs), ln) for (g, ln), cs in slots.items()))
        return OldFragment(frag, keep, live, layout, providers)

    def _lineage_key(
        self, p: FileRecord, cid: int, providers: dict[int, FileRecord]
    ) -> Lineage | None:
        row = self.lineage_rows.get((p.file_id, cid))
        if row is None:
            return None
        inputs = []
        for i in row["inputs"]:
            col = self.by_name.get(str(i.get("column")))
            now = providers.get(col.column_id) if col is not None else None
            if now is None:
                current = i.get("file_id") is None
            else:
                current = now.file_id == i.get("file_id") and now.added_version <= p.added_version
            inputs.append((str(i.get("column")), current))
        return (str(row["feature"]), str(row["engine"]), tuple(inputs))

    def _runs(self, olds: list[OldFragment]) -> Iterator[list[OldFragment]]:
        """Consecutive fragments of one layout, up to the target rows each (a larger fragment
        stays alone: compaction never splits one)."""
        run: list[OldFragment] = []
        rows = 0
        for o in olds:
            fits = rows + o.live_rows <= self.options.target_fragment_rows
            if run and (o.layout != run[0].layout or not fits):
                yield run
                run, rows = [], 0
            run.append(o)
            rows += o.live_rows
        if run:
            yield run

    def _write(
        self, name: str, batch_id: str, seq: int, run: list[OldFragment]
    ) -> FragmentDescriptor:
        frag_id = new_id()
        path = f"{batch_directory(name, batch_id)}/{frag_id}"
        files: list[FileDescriptor] = []
        written: dict[int, str] = {}  # column id -> new file id
        tables: dict[str, pa.Array | pa.ChunkedArray] = {}
        for slot in run[0].layout:
            cols = [self.columns[cid] for cid, _ in slot.columns]
            data = pa.concat_tables([self._read(o, cols) for o in run])
            versions = {self.columns[cid].name: fv for cid, fv in slot.columns if fv}
            desc = write_column_file(self.ctx.location, frag_id, path, slot.group, data,
                                     {c.name: c.physical_name for c in cols}, self.options,
                                     versions)  # fmt: skip
            self.out.paths.append(desc.path)
            failpoint("governance.after_file")
            desc.column_ids = {c.name: c.column_id for c in cols}
            files.append(desc)
            written.update({c.column_id: desc.file_id for c in cols})
            tables.update({c.name: data.column(c.name) for c in cols})
        for slot, desc in zip(run[0].layout, files, strict=True):
            self._carry_lineage(slot, desc, run, written)
        rows = sum(o.live_rows for o in run)
        if self.key is not None:
            h1, h2 = key_hashes([tables[k] for k in self.key])
            write_key_index(self.ctx.location, path, h1, h2)
            self.out.paths.append(index_path(path))
        return FragmentDescriptor(frag_id, batch_id, rows, path, files, seq)

    def _read(self, o: OldFragment, cols: list[ColumnRecord]) -> pa.Table:
        """The kept rows of ``cols`` of one old fragment, read from their providing files."""
        arrays: dict[int, pa.ChunkedArray] = {}
        by_file: dict[str, list[ColumnRecord]] = defaultdict(list)
        for c in cols:
            by_file[o.providers[c.column_id].file_id].append(c)
        for cs in by_file.values():
            f = o.providers[cs[0].column_id]
            try:
                with self.ctx.location.fs.open_input_file(
                    self.ctx.location.child_path(f.path)
                ) as handle:
                    t = pq.ParquetFile(handle).read(columns=[c.physical_name for c in cs])
            except (OSError, pa.ArrowInvalid) as exc:
                raise CorruptInputError(f"Cannot read column file {f.path}: {exc}") from exc
            if t.num_rows != o.record.row_count:
                raise CorruptInputError(
                    f"Cannot rewrite fragment {o.record.fragment_id}: file {f.path} has "
                    f"{t.num_rows} rows, the fragment {o.record.row_count}"
                )
            if o.keep is not None:
                t = t.filter(pa.array(o.keep))
            for c in cs:
                arr = t.column(c.physical_name)
                arrays[c.column_id] = (
                    arr if arr.type.equals(c.arrow_type) else arr.cast(c.arrow_type)
                )
        return pa.table({c.name: arrays[c.column_id] for c in cols})

    def _carry_lineage(
        self, slot: Slot, desc: FileDescriptor, run: list[OldFragment], written: dict[int, str]
    ) -> None:
        """The new file's lineage: the first old fragment's, its current inputs named by their
        new files, its errors summed over the run."""
        if slot.lineage is None:
            return
        current = dict(slot.lineage[2])
        for cid, _ in slot.columns:
            rows = [self.lineage_rows[(o.providers[cid].file_id, cid)] for o in run]
            first = rows[0]
            inputs = []
            for i in first["inputs"]:
                col = self.by_name.get(str(i.get("column")))
                mapped = current.get(str(i.get("column"))) and col is not None
                new_file = written.get(col.column_id) if mapped and col is not None else None
                inputs.append({**i, "file_id": new_file} if new_file else dict(i))
            self.out.lineage.append(
                LineageEntry(desc.file_id, self.columns[cid].name, first["feature"],
                             first["feature_version"], inputs, first["engine"],
                             sum(int(r["error_count"] or 0) for r in rows),
                             first["run_id"] or None)
            )  # fmt: skip
