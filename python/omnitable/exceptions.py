"""The OmniTable error family.

Every error raised on purpose by OmniTable derives from :class:`OmniTableError`. Messages follow
"Cannot <verb> <object>: <detail>" and, where there is one, say what to do next.
"""

from __future__ import annotations

from typing import Any


class OmniTableError(Exception):
    """Root of every error OmniTable raises on purpose."""


class ValidationError(OmniTableError, ValueError):
    """An argument or an input dataset is invalid; nothing was changed."""


class SchemaMismatchError(ValidationError):
    """Input data does not match the table's logical schema."""


class UnknownColumnError(ValidationError, KeyError):
    """A column name is not part of the table's schema."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class NotFoundError(OmniTableError, LookupError):
    """A table, ref, version, batch or feature does not exist."""


class AlreadyExistsError(OmniTableError):
    """A table, batch or ref with that name already exists."""


class CommitConflict(OmniTableError):
    """A concurrent commit wrote the same (fragment, column) cells; nothing was committed.

    Attributes:
        conflicts: ``(fragment_id, column)`` pairs written by the other commit.
    """

    def __init__(self, message: str, conflicts: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.conflicts = conflicts or []


class ErrorRatioExceeded(OmniTableError):
    """Too many records failed a feature in a backfill; the step committed nothing.

    Attributes:
        feature: ``name@version`` of the feature.
        failed / computed: records that failed / records of the checked chunk (all of them,
            also in a retry that recomputes only the failed ones).
    """

    def __init__(self, message: str, feature: str, failed: int, computed: int) -> None:
        super().__init__(message)
        self.feature, self.failed, self.computed = feature, failed, computed


class IsolationLimitError(OmniTableError):
    """More records of one batch failed than the isolation policy's ``max_failures`` allows.

    Attributes:
        failures: the failures found before stopping (``omnitable.isolation.RecordFailure``
            records, ordered by position).
    """

    def __init__(self, message: str, failures: list[Any]) -> None:
        super().__init__(message)
        self.failures = failures


class CatalogError(OmniTableError):
    """The catalog database could not be reached or used."""


class CommitOutcomeUnknown(CatalogError):
    """The connection was lost during a commit and the catalog could not be asked whether it
    landed; the written files were kept.

    Attributes:
        token: the commit's token (``commits.commit_token`` once it is found).
    """

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


class CatalogVersionError(CatalogError):
    """The catalog was created by another schema version than this software ships."""


class CorruptInputError(ValidationError):
    """An input file could not be read (corrupt or not of the declared format); ``path``, when
    known, is the file's path under its table."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class MissingDependencyError(OmniTableError, ImportError):
    """An optional dependency is missing; the message carries the exact install command."""


class AuditFailed(OmniTableError):
    """A check of ``Table.publish`` failed; nothing was merged.

    Attributes:
        check: the failed check (its function name, or its SQL).
        reason: what it said (False returned, the exception raised, the failing rows).
    """

    def __init__(self, message: str, check: str, reason: str) -> None:
        super().__init__(message)
        self.check = check
        self.reason = reason


class MergeConflict(CommitConflict):
    """Both branches of a merge changed the same things differently and the strategy was
    ``fail``; nothing was committed.

    Attributes:
        details: every conflict, a :class:`omnitable.dataops.merge_plan.Conflict` (kind, where,
            column, what the source and the target have, rows).
    """

    def __init__(self, message: str, details: list[Any]) -> None:
        super().__init__(message, [(c.where, c.column or "*") for c in details])
        self.details = details
