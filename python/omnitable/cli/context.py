"""What every ``omnitable`` command gets: the global options (``click``'s ``obj``)."""

from __future__ import annotations

from dataclasses import dataclass

from omnitable.cli.output import Output
from omnitable.warehouse import Warehouse, connect


@dataclass
class Context:
    """Options shared by every command."""

    warehouse: str | None
    out: Output
    verbose: bool

    def connect(self) -> Warehouse:
        return connect(self.warehouse)
