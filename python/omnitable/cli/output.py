"""Output strategies for the CLI: rich text for people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable


class Output:
    """Where command results go. Commands call these methods, never ``print``."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False)

    def result(self, data: Any, render: Any = None) -> None:
        """Emit a command's result: ``data`` as JSON, or ``render(console)`` as text."""
        if self.as_json:
            sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        elif render is not None:
            render(self.console)
        else:
            self.console.print(data)

    def message(self, text: str) -> None:
        """Progress/status text (stderr in JSON mode so stdout stays parseable)."""
        (self.err if self.as_json else self.console).print(text)

    def error(self, text: str) -> None:
        self.err.print(f"[bold red]error:[/] {text}")

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> RichTable:
        t = RichTable(title=title, title_justify="left", header_style="bold")
        for c in columns:
            t.add_column(c)
        for r in rows:
            t.add_row(*[str(v) for v in r])
        return t

    @contextmanager
    def progress(self) -> Iterator[Callable[..., None]]:
        """A progress display for long steps: yields ``report(step, done, total, detail="")``
        (``detail``: text shown after the counts, e.g. rows and ETA).

        Bars go to stderr in JSON mode so stdout stays parseable; they vanish when done.
        """
        console = self.err if self.as_json else self.console
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}"),
        )
        with Progress(*columns, console=console, transient=True) as bar:
            tasks: dict[str, TaskID] = {}

            def report(step: str, done: int, total: int, detail: str = "") -> None:
                if step not in tasks:
                    tasks[step] = bar.add_task(step, total=total, detail=detail)
                bar.update(tasks[step], completed=done, total=total, detail=detail)

            yield report
