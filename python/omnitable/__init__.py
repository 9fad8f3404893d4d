"""OmniTable: logical wide tables for LLM and ML training data on Spark.

Public API (re-exports only; see the modules for details)::

    import omnitable
    wh = omnitable.connect()                       # ./omnitable-warehouse, SQLite catalog
    t = wh.create_table("docs", {"text": "string"})
    t.append(df, append_name="crawl/2026-10")
    t.read(columns=["text"])
    spark = omnitable.spark_session()
"""

import importlib
from typing import TYPE_CHECKING, Any

from omnitable.exceptions import (
    AlreadyExistsError,
    AuditFailed,
    CatalogError,
    CatalogVersionError,
    CommitConflict,
    CommitOutcomeUnknown,
    CorruptInputError,
    ErrorRatioExceeded,
    MergeConflict,
    MissingDependencyError,
    NotFoundError,
    OmniTableError,
    SchemaMismatchError,
    UnknownColumnError,
    ValidationError,
)
from omnitable.observability.logs import configure_from_environment

if TYPE_CHECKING:  # the re-exports below are imported on first use (PEP 562)
    from omnitable.catalog.refs import Ref
    from omnitable.dataops.delete import DeleteResult
    from omnitable.dataops.merge import MergeResult
    from omnitable.dataops.update import UpdateResult
    from omnitable.features.definition import Feature, feature, model_feature, sql_feature
    from omnitable.format.writer import WriteOptions
    from omnitable.isolation import failure_counter, isolated, isolated_schema
    from omnitable.observability import ProgressEvent, configure_logging, metrics
    from omnitable.spark.session import spark_session
    from omnitable.table import BatchInfo, Table
    from omnitable.vocabulary.names import APPEND_NAME, ROW_ID
    from omnitable.warehouse import Warehouse, connect, upgrade_catalog

# name -> module: a Spark Python worker that imports one module (omnitable.exec.task) does not
# import the catalog, the data operations and the rest of the facade
_LAZY = {
    "Ref": "omnitable.catalog.refs",
    "DeleteResult": "omnitable.dataops.delete",
    "MergeResult": "omnitable.dataops.merge",
    "UpdateResult": "omnitable.dataops.update",
    "Feature": "omnitable.features.definition",
    "feature": "omnitable.features.definition",
    "model_feature": "omnitable.features.definition",
    "sql_feature": "omnitable.features.definition",
    "WriteOptions": "omnitable.format.writer",
    "failure_counter": "omnitable.isolation",
    "isolated": "omnitable.isolation",
    "isolated_schema": "omnitable.isolation",
    "ProgressEvent": "omnitable.observability",
    "configure_logging": "omnitable.observability",
    "metrics": "omnitable.observability",
    "spark_session": "omnitable.spark.session",
    "BatchInfo": "omnitable.table",
    "Table": "omnitable.table",
    "APPEND_NAME": "omnitable.vocabulary.names",
    "ROW_ID": "omnitable.vocabulary.names",
    "Warehouse": "omnitable.warehouse",
    "connect": "omnitable.warehouse",
    "upgrade_catalog": "omnitable.warehouse",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omnitable' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

configure_from_environment()  # OMNITABLE_LOG_FORMAT=json|text: docs/observability.md

__all__ = [
    "APPEND_NAME",
    "ROW_ID",
    "AlreadyExistsError",
    "AuditFailed",
    "BatchInfo",
    "CatalogError",
    "CatalogVersionError",
    "CommitConflict",
    "CommitOutcomeUnknown",
    "CorruptInputError",
    "DeleteResult",
    "ErrorRatioExceeded",
    "Feature",
    "MergeConflict",
    "MergeResult",
    "MissingDependencyError",
    "NotFoundError",
    "OmniTableError",
    "ProgressEvent",
    "Ref",
    "SchemaMismatchError",
    "Table",
    "UnknownColumnError",
    "UpdateResult",
    "ValidationError",
    "Warehouse",
    "WriteOptions",
    "__version__",
    "configure_logging",
    "connect",
    "failure_counter",
    "feature",
    "isolated",
    "isolated_schema",
    "metrics",
    "model_feature",
    "spark_session",
    "sql_feature",
    "upgrade_catalog",
]
