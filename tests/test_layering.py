"""The Python package's import direction (docs/architecture.md).

Every import between OmniTable modules — at module level, inside functions, or only for type
checking — must go down the unit order below: a unit imports itself and the units listed after
it, never one listed before it. And the module graph has no cycle, within a unit either.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "python" / "omnitable"

UNITS: list[tuple[str, str]] = [  # (unit, layer), top to bottom
    ("omnitable.cli", "apps"),
    ("omnitable.demo", "apps"),
    ("omnitable", "facade"),  # the package's __init__: the public API
    ("omnitable.warehouse", "facade"),
    ("omnitable.table", "facade"),
    ("omnitable.torch", "facade"),  # the PyTorch datasets (torch imported there only)
    ("omnitable.preprocess", "facade"),  # fitted preprocessing, public entry points
    ("omnitable.training", "services"),  # loader, exports, statistics: no JVM, no Spark
    ("omnitable.governance", "services"),
    ("omnitable.exec", "services"),
    ("omnitable.dataops", "services"),
    ("omnitable.features", "services"),
    ("omnitable.ingest", "services"),
    ("omnitable.context", "services"),
    ("omnitable.spark", "services"),
    ("omnitable.isolation", "services"),
    ("omnitable.models", "services"),  # the model store: artifacts + omnitable_meta records (below
    # features and exec, which reference and load models)
    ("omnitable.format", "storage"),
    ("omnitable.catalog", "storage"),
    ("omnitable.vocabulary", "vocabulary"),
    ("omnitable.observability", "vocabulary"),  # progress events, run-id logs, metrics
    ("omnitable.settings", "vocabulary"),
    ("omnitable._failpoints", "vocabulary"),
    ("omnitable.exceptions", "vocabulary"),
]
RANK = {unit: i for i, (unit, _) in enumerate(UNITS)}


def module_names() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = module_names()


def unit_of(module: str) -> str:
    """The longest unit that is ``module`` or a package above it."""
    best = ""
    for unit in RANK:
        if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
            best = unit
    return best


def imports_of(module: str, path: pathlib.Path) -> set[str]:
    """OmniTable modules ``module`` imports, anywhere in its code (type-only imports too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "omnitable")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] != "omnitable":
                continue
            for alias in node.names:  # `from pkg import module` imports that module
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in MODULES else base)
    out.discard(module)
    return out


GRAPH = {m: imports_of(m, p) for m, p in MODULES.items()}


def test_every_module_belongs_to_a_unit() -> None:
    assert [m for m in MODULES if not unit_of(m)] == []


def test_imports_go_down_the_layers() -> None:
    against = [
        f"{m} ({unit_of(m)}) imports {d} ({unit_of(d)})"
        for m, deps in sorted(GRAPH.items())
        for d in sorted(deps)
        if RANK[unit_of(d)] < RANK[unit_of(m)]
    ]
    assert against == [], "imports against the layer order:\n" + "\n".join(against)


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(GRAPH.get(m, ())):
            if state.get(d) == 1:
                cycles.append(" -> ".join([*stack[stack.index(d) :], d]))
            elif d in GRAPH and d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from omnitable.table import Table", {"omnitable.table"}),
        ("from omnitable.catalog import catalog", {"omnitable.catalog.catalog"}),
        ("if TYPE_CHECKING:\n    from omnitable.table import Table", {"omnitable.table"}),
        ("def f():\n    import omnitable.warehouse", {"omnitable.warehouse"}),
        ("from ..table import Table", {"omnitable.table"}),
    ],
)
def test_the_checker_sees_every_kind_of_import(tmp_path, source: str, expected: set[str]) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mod.py"
    path.write_text(source)
    assert imports_of("omnitable.ingest.mod", path) == expected
