"""Descriptors of written files: what a writer (a local process or a Spark task) hands to the
committer. JSON-serializable so Spark tasks can return them to the driver."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from omnitable.vocabulary.stats import ColumnStats


@dataclass
class FileDescriptor:
    """One written column file. ``path`` is relative to the table location.

    ``column_ids`` binds columns (by name) to the column ids (and so the types) the file was
    written for; the commit rejects a file whose column was replaced since. Empty: unbound.
    """

    file_id: str
    fragment_id: str
    group_name: str
    path: str
    row_count: int
    size_bytes: int
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    feature_versions: dict[str, str] = field(default_factory=dict)
    column_ids: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["columns"] = {k: asdict(v) for k, v in self.columns.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileDescriptor:
        d = dict(d)
        d["columns"] = {k: ColumnStats(**v) for k, v in d["columns"].items()}
        return cls(**d)


@dataclass
class FragmentDescriptor:
    """One written fragment with its files. ``path`` is relative to the table location."""

    fragment_id: str
    batch_id: str
    row_count: int
    path: str
    files: list[FileDescriptor] = field(default_factory=list)
    seq: int = 0

    def to_json(self) -> str:
        d = asdict(self)
        d["files"] = [f.to_dict() for f in self.files]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> FragmentDescriptor:
        d = json.loads(text)
        d["files"] = [FileDescriptor.from_dict(f) for f in d["files"]]
        return cls(**d)
