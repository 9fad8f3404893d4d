"""``ModelStore``: register, list, load and delete versioned model artifacts (docs/models.md).

An artifact is a file, a directory (both copied) or a Python object (pickled). It is stored
content-addressed under ``<store uri>/<sha256>`` (default ``<warehouse data root>/_models``) on
any filesystem the warehouse layer opens (format/fs.py), and its record lives in the catalog's
``omnitable_meta`` table under ``model:<name>:<version>`` (no schema change): a JSON object with
name, version, sha256, size, framework, kind, metadata, created and path. A directory's SHA-256 is
the hash of its sorted ``relative path NUL file sha256 LF`` lines (empty directories do not
count). :meth:`ModelStore.load` re-hashes what it returns; a mismatch raises and returns nothing.

Credentials are only by reference: ``storage_options`` values may be ``env:NAME`` (NAME under the
allowed prefixes of catalog/address.py), resolved each time a filesystem opens; they are never
stored in a record or written in a message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import pickle
import posixpath
import re
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from omnitable.catalog.address import ENV_PREFIXES_VAR, ENV_REFERENCE, allowed_env_prefixes
from omnitable.catalog.catalog import Catalog
from omnitable.exceptions import (
    AlreadyExistsError,
    CorruptInputError,
    NotFoundError,
    ValidationError,
)
from omnitable.format.fs import Location, resolve_location

META_PREFIX = "model:"
DEFAULT_DIR = "_models"
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,127}")
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
FRAMEWORK_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
# storage option keys that carry a secret: their values must be env:NAME references
SECRET_KEY_PARTS = ("secret", "password", "token", "credential", "key", "sas")
CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelRecord:
    """One registered model version. ``kind``: ``file``, ``directory`` or ``object`` (pickled);
    ``path``: the artifact's URI; ``created``: ISO-8601 UTC; ``size``: bytes of the artifact."""

    name: str
    version: str
    sha256: str
    size: int
    framework: str | None
    kind: str
    path: str
    created: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(raw: str) -> ModelRecord:
        return ModelRecord(**json.loads(raw))


def meta_key(name: str, version: str) -> str:
    return f"{META_PREFIX}{name}:{version}"


def check_model_id(name: Any, version: Any) -> None:
    """Raise ValidationError unless ``name`` and ``version`` match the safe patterns."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValidationError(
            f"Invalid model name {name!r}: use a letter then up to 127 letters, digits, '_', '.' "
            "or '-'"
        )
    if not isinstance(version, str) or not VERSION_PATTERN.fullmatch(version):
        raise ValidationError(
            f"Invalid version {version!r} of model '{name}': use a letter or digit then up to 63 "
            "letters, digits, '_', '.', '+' or '-' (e.g. '1', 'v2.1')"
        )


def check_storage_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``options`` after validation (references are not resolved).

    Raises:
        ValidationError: not a mapping of string keys, a secret-looking key with a literal value,
            or an ``env:NAME`` outside the allowed prefixes.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ValidationError("storage_options must be a mapping of option names to values")
    prefixes = allowed_env_prefixes()
    for key, value in options.items():
        if isinstance(value, str) and value.startswith(ENV_REFERENCE):
            var = value[len(ENV_REFERENCE) :]
            if not var or not any(var.startswith(p) for p in prefixes):
                raise ValidationError(
                    f"storage option '{key}' refers to environment variable '{var}', outside the "
                    f"allowed prefixes ({', '.join(prefixes) or 'none'}); use e.g. "
                    f"env:OMNITABLE_S3_SECRET or add its prefix to {ENV_PREFIXES_VAR}"
                )
        elif any(part in key.lower() for part in SECRET_KEY_PARTS):
            raise ValidationError(
                f"storage option '{key}' looks like a credential: pass it by reference, "
                f"'{key}': 'env:OMNITABLE_...' (the variable is read when the store opens files)"
            )
    return dict(options)


def resolve_storage_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with each ``env:NAME`` replaced by the variable's value (read now)."""
    resolved: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, str) and value.startswith(ENV_REFERENCE):
            var = value[len(ENV_REFERENCE) :]
            found = os.environ.get(var)
            if found is None:
                raise ValidationError(
                    f"storage option '{key}' refers to environment variable {var}, which is not "
                    "set; export it before using the model store"
                )
            resolved[key] = found
        else:
            resolved[key] = value
    return resolved


def open_location(uri: str, options: Mapping[str, Any]) -> Location:
    """The Location of ``uri``; with ``options``, opened through fsspec with them resolved."""
    if not options:
        return resolve_location(uri)
    import fsspec

    resolved = resolve_storage_options(options)
    try:
        ffs, path = fsspec.core.url_to_fs(uri, **resolved)
    except (ValueError, ImportError, TypeError) as exc:
        # the message of an fsspec error may echo option values: name only the type
        raise ValidationError(
            f"Cannot open model store '{uri}' with the given storage options "
            f"({type(exc).__name__}); check the URI scheme and the option names"
        ) from None
    return Location(pafs.PyFileSystem(pafs.FSSpecHandler(ffs)), path, uri)


def _file_digest(fs: pafs.FileSystem, path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with fs.open_input_stream(path) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def digest(fs: pafs.FileSystem, path: str) -> tuple[str, int, str]:
    """(sha256, size in bytes, kind ``file`` | ``directory``) of the artifact at ``path``."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        sha, size = _file_digest(fs, path)
        return sha, size, "file"
    if info.type != pafs.FileType.Directory:
        raise NotFoundError(f"No file or directory at '{path}'")
    entries = []
    for child in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
        if child.type == pafs.FileType.File:
            rel = posixpath.relpath(child.path, path.rstrip("/") or "/")
            entries.append((rel, child.path))
    h = hashlib.sha256()
    total = 0
    for rel, full in sorted(entries):
        sha, size = _file_digest(fs, full)
        h.update(f"{rel}\0{sha}\n".encode())
        total += size
    return h.hexdigest(), total, "directory"


class ModelStore:
    """The model store of a warehouse's catalog. Use ``Warehouse.models`` (default options) or
    ``ModelStore(wh.catalog, wh.root, storage_options={...})`` for a store whose artifacts need
    credentials (values ``env:NAME``)."""

    def __init__(
        self,
        catalog: Catalog,
        root: Location,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._catalog = catalog
        self._root = root
        self._options = check_storage_options(storage_options)

    def __repr__(self) -> str:
        return f"ModelStore({self._root.uri!r})"  # options (even references) are not shown

    def _location(self, uri: str | None) -> Location:
        if uri is None:
            if self._options:
                return open_location(self._root.child_uri(DEFAULT_DIR), self._options)
            return self._root.join(DEFAULT_DIR)
        if not isinstance(uri, str) or not uri:
            raise ValidationError(f"uri must be a non-empty string (a path or URI), got {uri!r}")
        return open_location(uri, self._options)

    def _record_dir(self, record: ModelRecord) -> Location:
        return open_location(record.path.rsplit("/", 1)[0], self._options)

    def _artifact(self, record: ModelRecord) -> Location:
        return self._record_dir(record).join(record.sha256)

    # -- records ---------------------------------------------------------------------------

    def _read(self, conn: Connection, name: str, version: str) -> ModelRecord | None:
        raw = conn.execute(
            text("SELECT value FROM omnitable_meta WHERE key = :k"), {"k": meta_key(name, version)}
        ).scalar()
        return None if raw is None else ModelRecord.from_json(raw)

    def _all(self, conn: Connection) -> list[ModelRecord]:
        rows = conn.execute(
            text("SELECT value FROM omnitable_meta WHERE key LIKE :p"), {"p": f"{META_PREFIX}%"}
        )
        return [ModelRecord.from_json(v) for (v,) in rows]

    def get(self, name: str, version: str) -> ModelRecord:
        """The record of ``name`` at ``version``.

        Raises:
            ValidationError: a malformed name or version.
            NotFoundError: no such model version.
        """
        check_model_id(name, version)
        with self._catalog.store.read() as conn:
            record = self._read(conn, name, version)
        if record is None:
            raise NotFoundError(
                f"No model '{name}' version '{version}'; list the registered ones with "
                "wh.models.list()"
            )
        return record

    def list(self, name: str | None = None) -> list[ModelRecord]:
        """Every registered model version (of ``name``), by name then creation time."""
        if name is not None:
            check_model_id(name, "0")
        with self._catalog.store.read() as conn:
            records = self._all(conn)
        if name is not None:
            records = [r for r in records if r.name == name]
        return sorted(records, key=lambda r: (r.name, r.created, r.version))

    # -- register --------------------------------------------------------------------------

    def register(
        self,
        name: str,
        version: str,
        path_or_object: Any,
        framework: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        uri: str | None = None,
    ) -> ModelRecord:
        """Store an artifact and record it as ``name`` at ``version``; returns the record.

        ``path_or_object``: a local file or directory (``str`` or ``os.PathLike``; copied) or
        any other Python object (pickled; framework defaults to ``pickle``). Registering the same
        content again under the same (name, version) returns the existing record (and rewrites its
        artifact if that no longer matches the hash).

        Raises:
            ValidationError: malformed name, version, framework or metadata (JSON object);
                a path that does not exist.
            AlreadyExistsError: (name, version) is registered with a different SHA-256.
        """
        check_model_id(name, version)
        if framework is not None and (
            not isinstance(framework, str) or not FRAMEWORK_PATTERN.fullmatch(framework)
        ):
            raise ValidationError(f"Invalid framework {framework!r}: use e.g. 'torch', 'sklearn'")
        meta = _check_metadata(metadata)
        if isinstance(path_or_object, (str, os.PathLike)):
            source = Path(path_or_object).expanduser().resolve()
            if not source.exists():
                raise ValidationError(
                    f"Cannot register model '{name}' version '{version}': no file or directory "
                    f"at '{path_or_object}'"
                )
            sha, size, kind = digest(pafs.LocalFileSystem(), str(source))
            payload: bytes | Path = source
        else:
            payload = _pickle(path_or_object, name)
            sha, size, kind = hashlib.sha256(payload).hexdigest(), len(payload), "object"
            framework = framework or "pickle"
        existing = self._existing(name, version, sha)
        if existing is not None:  # the same content: repair its blob if it was damaged
            _upload(self._record_dir(existing), sha, payload)
            return existing
        target = self._location(uri)
        _upload(target, sha, payload)
        record = ModelRecord(
            name, version, sha, size, framework, kind, target.child_uri(sha), _now(), meta
        )
        return self._insert(record)

    def _existing(self, name: str, version: str, sha: str) -> ModelRecord | None:
        with self._catalog.store.read() as conn:
            found = self._read(conn, name, version)
        return None if found is None else _same(found, sha)

    def _insert(self, record: ModelRecord) -> ModelRecord:
        try:
            with self._catalog.store.write() as conn:
                found = self._read(conn, record.name, record.version)
                if found is not None:  # a concurrent registration won
                    return _same(found, record.sha256)
                conn.execute(
                    text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
                    {"k": meta_key(record.name, record.version), "v": record.to_json()},
                )
        except IntegrityError:  # PostgreSQL: a concurrent insert of the key committed first
            with self._catalog.store.read() as conn:
                found = self._read(conn, record.name, record.version)
            if found is None:
                raise
            return _same(found, record.sha256)
        return record

    # -- load ------------------------------------------------------------------------------

    def load(self, name: str, version: str) -> Any:
        """The verified artifact: the unpickled object (kind ``object``) or a local path (a file
        or directory; a remote artifact is first downloaded to a new temporary directory).
        Unpickling runs code from the artifact: load only models you trust.

        Raises:
            NotFoundError: no such model version, or its artifact is missing.
            CorruptInputError: the artifact's SHA-256 differs from the record's (both named).
        """
        record = self.get(name, version)
        return load_verified(record, self._options)

    # -- delete ----------------------------------------------------------------------------

    def delete(self, name: str, version: str) -> ModelRecord:
        """Remove the record of ``name`` at ``version`` and, when no other record shares its
        content, its artifact; returns the removed record.

        Raises:
            NotFoundError: no such model version.
            ValidationError: a registered feature of a live table references ``name@version``
                (its definition text contains it).
        """
        check_model_id(name, version)
        with self._catalog.store.write() as conn:
            record = self._read(conn, name, version)
            if record is None:
                raise NotFoundError(f"No model '{name}' version '{version}' to delete")
            users = _feature_users(conn, f"{name}@{version}")
            if users:
                raise ValidationError(
                    f"Cannot delete model '{name}' version '{version}': registered features use "
                    f"it ({', '.join(users)}); drop or re-register those features first"
                )
            conn.execute(
                text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": meta_key(name, version)}
            )
            shared = any(
                r.sha256 == record.sha256 and r.path == record.path for r in self._all(conn)
            )
        if not shared:
            loc = self._artifact(record)
            _remove(loc)
        return record


def load_verified(record: ModelRecord, storage_options: Mapping[str, Any] | None = None) -> Any:
    """The artifact of ``record`` re-hashed against ``record.sha256`` (see
    :meth:`ModelStore.load`); needs no catalog, so a worker holding the record's fields loads it.

    Raises:
        NotFoundError: the artifact is missing.
        CorruptInputError: its SHA-256 differs from the record's (both named).
    """
    loc = open_location(record.path.rsplit("/", 1)[0], dict(storage_options or {})).join(
        record.sha256
    )
    if record.kind == "object":
        try:
            with loc.fs.open_input_stream(loc.path) as f:
                data = f.read()
        except (FileNotFoundError, OSError) as exc:
            raise _missing(record) from exc
        _verify(record, hashlib.sha256(data).hexdigest())
        return pickle.loads(data)  # verified bytes of a registered model
    if isinstance(loc.fs, pafs.LocalFileSystem):
        local = loc.path
    else:
        local = str(Path(tempfile.mkdtemp(prefix="omnitable-model-")) / record.sha256)
        try:
            pafs.copy_files(loc.path, local, source_filesystem=loc.fs)
        except (FileNotFoundError, OSError) as exc:
            raise _missing(record) from exc
    try:
        sha, _, _ = digest(pafs.LocalFileSystem(), local)
    except NotFoundError as exc:
        raise _missing(record) from exc
    _verify(record, sha)
    return local


def _check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValidationError("metadata must be a mapping (a JSON object)")
    try:
        return dict(json.loads(json.dumps(dict(metadata))))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"metadata must be JSON-serializable: {exc}") from exc


def _pickle(obj: Any, name: str) -> bytes:
    """``obj`` pickled: by value with cloudpickle (pyspark's copy, which every Spark worker has)
    when its class is defined in ``__main__`` (a script or notebook), which other processes
    could not import; otherwise with pickle."""
    try:
        if type(obj).__module__ == "__main__":
            from pyspark import cloudpickle

            return bytes(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise ValidationError(
            f"Cannot register model '{name}': the object cannot be pickled ({exc}); save it to "
            "a file and register the path"
        ) from exc


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


def _same(found: ModelRecord, sha: str) -> ModelRecord:
    if found.sha256 == sha:
        return found
    raise AlreadyExistsError(
        f"Model '{found.name}' version '{found.version}' is already registered with SHA-256 "
        f"{found.sha256}, not {sha}; register the new artifact under a new version"
    )


def _intact(loc: Location, sha: str) -> bool:
    try:
        return digest(loc.fs, loc.path)[0] == sha
    except (NotFoundError, OSError):
        return False


def _upload(target: Location, sha: str, payload: bytes | Path) -> None:
    """Write the artifact to ``target/sha`` unless an intact copy is there: copied to a temporary
    name, re-hashed, then moved into place. A crash leaves at most an unrecorded blob (never
    visible), which the next registration of the same content re-checks."""
    dest = target.join(sha)
    if dest.fs.get_file_info(dest.path).type != pafs.FileType.NotFound:
        if _intact(dest, sha):
            return
        _remove(dest)
    dest.fs.create_dir(target.path, recursive=True)
    tmp = target.join(f".tmp-{uuid.uuid4().hex}-{sha}")
    try:
        if isinstance(payload, bytes):
            with tmp.fs.open_output_stream(tmp.path) as f:
                f.write(payload)
        else:
            pafs.copy_files(str(payload), tmp.path, destination_filesystem=tmp.fs)
        got = digest(tmp.fs, tmp.path)[0]
        if got != sha:
            raise ValidationError(
                f"The artifact changed while it was copied (SHA-256 {sha} before, {got} after); "
                "register it again"
            )
        try:
            tmp.fs.move(tmp.path, dest.path)
        except OSError:  # a concurrent registration placed it, or no directory moves (S3)
            if not _intact(dest, sha):
                pafs.copy_files(tmp.path, dest.path, tmp.fs, destination_filesystem=dest.fs)
    finally:
        _remove(tmp)


def _remove(loc: Location) -> None:
    info = loc.fs.get_file_info(loc.path)
    try:
        if info.type == pafs.FileType.Directory:
            loc.fs.delete_dir(loc.path)
        elif info.type == pafs.FileType.File:
            loc.fs.delete_file(loc.path)
    except OSError:
        pass  # best effort: an unreferenced blob is invisible


def _verify(record: ModelRecord, sha: str) -> None:
    if sha != record.sha256:
        raise CorruptInputError(
            f"Model '{record.name}' version '{record.version}' is corrupt: its artifact "
            f"{record.path} hashes to SHA-256 {sha}, the record says {record.sha256}; "
            "re-register the model from its source"
        )


def _missing(record: ModelRecord) -> NotFoundError:
    return NotFoundError(
        f"The artifact of model '{record.name}' version '{record.version}' is missing at "
        f"{record.path}; re-register the model from its source"
    )


def _feature_users(conn: Connection, ref: str) -> list[str]:
    """``table.feature@version`` of the live tables' feature rows whose definition contains
    ``ref`` (a model reference ``name@version``)."""
    rows = conn.execute(
        text(
            "SELECT t.namespace, t.name AS tname, f.name, f.version, f.definition FROM features f "
            "JOIN tables t ON t.table_id = f.table_id WHERE f.definition LIKE :p"
        ),
        {"p": f"%{ref}%"},
    )
    found = {f"{r.namespace}.{r.tname}.{r.name}@{r.version}" for r in rows if ref in r.definition}
    return sorted(found)
