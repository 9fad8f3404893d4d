"""Registering features on a table and reading them back.

Registration validates the whole graph (inputs exist, outputs unique, no cycles), refuses changed
code under an unchanged version, stores a pandas feature by reference when it imports back from
its stored reference and by value otherwise (its pickled code written to the table directory
before the commit, :mod:`omnitable.features.payload`), and commits the feature versions together with their output columns. The commit
conflicts when another registration committed since the graph was validated (so two concurrent
registrations cannot form a cycle).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, FeatureRow, NewColumn
from omnitable.exceptions import NotFoundError, ValidationError
from omnitable.features.definition import (
    MODEL_OPTION,
    MODEL_STORAGE_OPTION,
    Feature,
    model_reference,
    storable,
)
from omnitable.features.graph import FeatureGraph
from omnitable.features.payload import write_payload
from omnitable.models.store import ModelStore
from omnitable.spark.session import current_session
from omnitable.vocabulary.names import APPEND_NAME

if TYPE_CHECKING:
    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext

_IDENT = re.compile(r"`((?:[^`]|``)+)`|\b([A-Za-z_][A-Za-z0-9_]*)\b")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def current_features(ctx: TableContext) -> dict[str, Feature]:
    """Current version of every registered feature whose outputs are active columns (not
    retired, not rolled back to before its registration; docs/dataops.md): the one whose
    registration committed last (catalog commit order, not wall clock time)."""
    _, columns = ctx.all_columns()
    active = {c.name for c in columns if c.state == "active"}
    out: dict[str, Feature] = {}
    for row in ctx.feature_rows():
        f = Feature.from_definition(row["definition"], row["fingerprint"])
        if active.issuperset(f.outputs):  # else retired, or rolled back to before it
            out[row["name"]] = f
    return out


def feature_versions(ctx: TableContext, name: str) -> list[Feature]:
    rows = ctx.feature_rows(name)
    if not rows:
        raise NotFoundError(f"Cannot find feature '{name}' on table '{ctx.name}'")
    latest = {r["version"]: r for r in rows}  # a version made current again has several rows
    ordered = sorted(latest.values(), key=lambda r: r["registered_version"])
    return [Feature.from_definition(r["definition"], r["fingerprint"]) for r in ordered]


def table_graph(ctx: TableContext) -> FeatureGraph:
    snap = ctx.snapshot(with_files=False)
    raw = [c.name for c in snap.columns if c.feature is None] + [APPEND_NAME]
    return FeatureGraph.build(current_features(ctx).values(), raw)


def register(ctx: TableContext, features: tuple[Feature, ...]) -> int | None:
    """Register features; returns the new version, or None when nothing changed."""
    if not features:
        raise ValidationError("Cannot register: give at least one feature")
    for f in features:
        if not isinstance(f, Feature):
            raise ValidationError(
                f"Cannot register {f!r}: decorate the function with @omnitable.feature(...) or "
                "build it with omnitable.sql_feature(...)"
            )
    snap = ctx.snapshot(with_files=False)
    current = current_features(ctx)
    raw = [c.name for c in snap.columns if c.feature is None] + [APPEND_NAME]
    known = (
        set(raw)
        | {o for f in current.values() for o in f.outputs}
        | {o for f in features for o in f.outputs}
    )
    resolved = []
    payloads: dict[str, bytes] = {}
    for f in features:
        f, data = storable(f)
        if data is not None:
            payloads[f.name] = data
        if f.kind == "sql" and not f.inputs:
            f = f.with_inputs(_sql_inputs(f, known))
        f = _with_model(ctx, f)
        resolved.append(f)
    names = [f.name for f in resolved]
    if len(set(names)) != len(names):
        raise ValidationError(f"Cannot register: feature names repeat in {names}")

    rows: list[FeatureRow] = []
    for f in resolved:
        _check_version_rule(ctx, f)
        if f.name not in current or current[f.name].version != f.version:
            rows.append(FeatureRow(f.name, f.version, f.kind, f.definition(), f.code_fingerprint))
    merged = {**current, **{f.name: f for f in resolved}}
    FeatureGraph.build(merged.values(), raw)

    new_columns, removed = _column_changes(snap, current, resolved)
    _write_payloads(ctx, rows, current, resolved, payloads)
    if not rows and not new_columns and not removed:
        return None
    req = CommitRequest(
        op="register",
        base_version=snap.version,
        summary={
            "features": [f"{r.name}@{r.version}" for r in rows],
            "columns": [c.name for c in new_columns],
        },
        new_columns=new_columns,
        removed_columns=removed,
        features=rows,
    )
    failpoint("register.before_commit")
    return ctx.commit(req)


def _write_payloads(
    ctx: TableContext,
    rows: list[FeatureRow],
    current: dict[str, Feature],
    resolved: list[Feature],
    payloads: dict[str, bytes],
) -> None:
    """Write the pickled code of the features registered (before the commit that references
    it), and again that of current ones registered unchanged whose file is missing or modified
    (the same bytes: registering the same code repairs it)."""
    new = {r.name for r in rows}
    for f in resolved:
        if f.name not in payloads or f.payload is None:
            continue
        now = current.get(f.name)
        same = now is not None and (now.payload or {}).get("sha256") == f.payload["sha256"]
        if f.name in new or same:
            write_payload(ctx.location, payloads[f.name], f.payload)


def _column_changes(
    snap: Snapshot, current: dict[str, Feature], resolved: list[Feature]
) -> tuple[list[NewColumn], list[str]]:
    """The output columns registering ``resolved`` adds, and those it removes (an output whose
    type changed is replaced; one the new version no longer produces is removed).

    Raises:
        ValidationError: a feature's group holds other columns, or an output is already a
            column of another feature or of the table.
    """
    by_name = {c.name: c for c in snap.columns}
    new_columns: list[NewColumn] = []
    removed: list[str] = []
    for f in resolved:
        clash = [c.name for c in snap.columns if c.group_name == f.name and c.feature != f.name]
        if clash:
            raise ValidationError(
                f"Cannot register feature '{f.name}': its outputs are stored in column group "
                f"'{f.name}', which already holds column(s) {', '.join(clash)}; rename the feature"
            )
        for out, ddl in f.outputs.items():
            col = by_name.get(out)
            if col is not None and col.feature == f.name and col.data_type == ddl:
                continue
            if col is not None and col.feature != f.name:
                raise ValidationError(
                    f"Cannot register feature '{f.name}': output '{out}' is already a column "
                    + (f"produced by feature '{col.feature}'" if col.feature else "of the table")
                )
            if col is not None:
                removed.append(out)  # the output's type changed: a new column replaces it
            new_columns.append(NewColumn(out, ddl, True, f.name, f.name))
        previous = current.get(f.name)
        if previous is not None:
            removed += [o for o in previous.outputs if o not in f.outputs and o in by_name]
    return new_columns, removed


def _check_version_rule(ctx: TableContext, f: Feature) -> None:
    for row in ctx.feature_rows(f.name):
        if row["version"] != f.version:
            continue
        stored = row["definition"]
        same_shape = (
            tuple(stored["inputs"]) == f.inputs
            and stored["outputs"] == f.outputs
            and stored["kind"] == f.kind
            and stored.get("expr") == f.expr
            and _model_of(stored.get("options") or {}) == _model_of(f.options)
            and bool((stored.get("options") or {}).get("per_record"))
            == bool(f.options.get("per_record"))
        )
        if row["fingerprint"] != f.code_fingerprint or not same_shape:
            raise ValidationError(
                f"Cannot register feature '{f.name}': version {f.version} is already registered "
                "with different code or inputs/outputs; bump the version (e.g. "
                f'version="{_next_version(f.version)}") so computed columns are marked stale'
            )


def _with_model(ctx: TableContext, f: Feature) -> Feature:
    """A model feature with its model's record in its options (``model_sha256``, ``_path``,
    ``_kind``, ``_framework``): what workers load and verify, and what lineage shows.

    Raises:
        ValidationError: the model is not in the warehouse's model store.
    """
    ref = model_reference(f)
    if ref is None:
        return f
    name, version = ref.split("@")
    try:
        record = ModelStore(ctx.catalog, ctx.root).get(name, version)
    except NotFoundError:
        raise ValidationError(
            f"Cannot register model feature '{f.name}': model '{ref}' is not in the model store; "
            f"register it first (wh.models.register('{name}', '{version}', ...))"
        ) from None
    found = {
        "model_sha256": record.sha256,
        "model_path": record.path,
        "model_kind": record.kind,
        "model_framework": record.framework,
    }
    return dataclasses.replace(f, options={**f.options, **found})


def _model_of(options: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What a registered version fixes of its model: reference, hash, storage options."""
    return (options.get(MODEL_OPTION), options.get("model_sha256"),
            options.get(MODEL_STORAGE_OPTION) or None)  # fmt: skip


def _next_version(v: str) -> str:
    return str(int(v) + 1) if v.isdigit() else v + ".1"


def _sql_inputs(f: Feature, known: set[str]) -> tuple[str, ...]:
    """Columns an SQL feature's expression mentions, resolved the way Spark resolves them:
    quoted or not, case-insensitively unless the active session sets spark.sql.caseSensitive."""
    assert f.expr is not None
    fold = (lambda n: n) if _case_sensitive() else str.lower
    by_key: dict[str, list[str]] = {}
    for name in sorted(known):
        by_key.setdefault(fold(name), []).append(name)
    outputs = {fold(o) for o in f.outputs}
    text = _STRING.sub(" ", f.expr)
    found: list[str] = []
    for quoted, plain in _IDENT.findall(text):
        key = fold(quoted.replace("``", "`") if quoted else plain)
        matches = by_key.get(key, [])
        if len(matches) > 1:
            raise ValidationError(
                f"Cannot register SQL feature '{f.name}': '{key}' is ambiguous among columns "
                f"{matches} (identifiers are case-insensitive); pass inputs=[...] explicitly"
            )
        if matches and key not in outputs and matches[0] not in found:
            found.append(matches[0])
    if not found:
        raise ValidationError(
            f"Cannot register SQL feature '{f.name}': its expression mentions no column of the "
            "table; pass inputs=[...] explicitly"
        )
    return tuple(found)


def _case_sensitive() -> bool:
    """``spark.sql.caseSensitive`` of the current Spark session (Spark's default, False, without
    one)."""
    session = current_session()
    if session is None:
        return False
    return str(session.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
