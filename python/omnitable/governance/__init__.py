"""Governance: maintenance jobs that keep a table's layout healthy (docs/governance.md)."""
