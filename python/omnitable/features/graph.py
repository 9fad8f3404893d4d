"""The column-level dependency graph of a table's features.

Nodes are features; an edge F → G means G reads an output of F. Raw columns are leaves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from omnitable.exceptions import ValidationError
from omnitable.features.definition import Feature


@dataclass
class FeatureGraph:
    """Features by name, who produces each derived column, and each feature's level."""

    features: dict[str, Feature]
    producer: dict[str, str]  # output column -> feature name

    @classmethod
    def build(cls, features: Iterable[Feature], raw_columns: Iterable[str]) -> FeatureGraph:
        """Validate and build the graph.

        Raises:
            ValidationError: unknown inputs, output clashes (with raw columns or between
                features), self-dependencies or cycles.
        """
        raw = set(raw_columns)
        by_name: dict[str, Feature] = {}
        producer: dict[str, str] = {}
        for f in features:
            if f.name in by_name:
                raise ValidationError(f"Cannot register feature '{f.name}' twice in one graph")
            by_name[f.name] = f
            for out in f.outputs:
                if out in raw:
                    raise ValidationError(
                        f"Cannot register feature '{f.name}': output '{out}' clashes with an "
                        "existing raw column"
                    )
                if out in producer:
                    raise ValidationError(
                        f"Cannot register feature '{f.name}': output '{out}' is already produced "
                        f"by feature '{producer[out]}'"
                    )
                producer[out] = f.name
        for f in by_name.values():
            for i in f.inputs:
                if i not in raw and i not in producer:
                    raise ValidationError(
                        f"Cannot register feature '{f.name}': input '{i}' is neither a column of "
                        "the table nor an output of a registered feature"
                    )
                if producer.get(i) == f.name:
                    raise ValidationError(
                        f"Cannot register feature '{f.name}': it reads its own output '{i}'"
                    )
        graph = cls(by_name, producer)
        graph.levels()  # raises on cycles
        return graph

    def deps(self, name: str) -> set[str]:
        """Features whose outputs ``name`` reads."""
        return {self.producer[i] for i in self.features[name].inputs if i in self.producer}

    def levels(self) -> dict[str, int]:
        """Level 1 reads only raw columns; level k reads outputs of levels < k."""
        level: dict[str, int] = {}
        visiting: list[str] = []

        def visit(name: str) -> int:
            if name in level:
                return level[name]
            if name in visiting:
                cycle = [*visiting[visiting.index(name) :], name]
                raise ValidationError(
                    "Cannot register features: dependency cycle " + " -> ".join(cycle)
                )
            visiting.append(name)
            lv = 1 + max((visit(d) for d in self.deps(name)), default=0)
            visiting.pop()
            level[name] = lv
            return lv

        for name in sorted(self.features):
            visit(name)
        return level

    def ancestors(self, names: Iterable[str]) -> set[str]:
        """``names`` and every feature they depend on, transitively."""
        out: set[str] = set()
        stack = list(names)
        while stack:
            n = stack.pop()
            if n not in out:
                out.add(n)
                stack.extend(self.deps(n))
        return out

    def topological(self, names: Iterable[str]) -> list[str]:
        lv = self.levels()
        return sorted(names, key=lambda n: (lv[n], n))
