"""Data operations on a table's rows (docs/dataops.md): deletes through deletion vectors.

Every operation is one atomic commit with the usual conflict rules (docs/catalog.md)."""
