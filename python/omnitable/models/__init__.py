"""The model store: versioned model artifacts, content-addressed by SHA-256 (docs/models.md).

``Warehouse.models`` returns the warehouse's :class:`ModelStore`; records live in the catalog's
``omnitable_meta`` table, artifacts on any filesystem the warehouse layer opens.
"""

from omnitable.models.store import ModelRecord, ModelStore

__all__ = ["ModelRecord", "ModelStore"]
