"""Making user feature modules importable on Spark executors.

Pandas features are stored as import references. Executors import them; modules that are not
installed in the executors' environment (a project directory, a notebook's helper module) are
shipped with ``SparkSession.addArtifacts(..., pyfile=True)`` — a single module as its file, a
package as a zip of its top-level package. On a classic session that is ``SparkContext.addPyFile``
(each module shipped once per SparkContext); on Spark Connect the files are uploaded to the
server as artifacts of the session (once per Connect session).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import sysconfig
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_SHIPPED: dict[str, set[str]] = {}
# one shipping at a time in a process: two runs starting together (queue workers in threads)
# would both ship a module, and pyspark's addPyFile calls importlib.invalidate_caches, which
# raises KeyError when two threads run it at once (it deletes entries of
# sys.path_importer_cache it listed)
_SHIPPING = threading.Lock()


def _shipping_scope(spark: SparkSession) -> str:
    """What shipped files belong to: a Connect session, or a classic session's application."""
    from omnitable.spark.session import is_connect

    if is_connect(spark):
        return f"connect:{spark.session_id}"  # type: ignore[attr-defined]
    return f"app:{spark.conf.get('spark.app.id')}"


def ship_modules(spark: SparkSession, module_names: list[str]) -> list[str]:
    """Ship the top-level packages of ``module_names`` that live outside site-packages.

    Returns the paths shipped (for logs).
    """
    with _SHIPPING:
        return _ship(spark, module_names)


def _ship(spark: SparkSession, module_names: list[str]) -> list[str]:
    shipped = _SHIPPED.setdefault(_shipping_scope(spark), set())
    out = []
    for name in module_names:
        top = name.split(".", 1)[0]
        if top in shipped or top in sys.builtin_module_names:
            continue
        module = sys.modules.get(top) or importlib.import_module(top)
        path = _source_path(module)
        if path is None or top in _distribution_packages() or _installed(path):
            shipped.add(top)
            continue
        if path.name == "__init__.py":
            archive = _zip_package(path.parent)
            spark.addArtifacts(str(archive), pyfile=True)
            out.append(str(archive))
        else:
            spark.addArtifacts(str(path), pyfile=True)
            out.append(str(path))
        shipped.add(top)
    return out


def _distribution_packages() -> set[str]:
    """Top-level packages provided by installed distributions (editable installs included):
    executors get those from their own environment, like omnitable itself."""
    return set(importlib.metadata.packages_distributions())


def _source_path(module: Any) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _installed(path: Path) -> bool:
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    text = str(path)
    if "site-packages" in text or "dist-packages" in text:
        return True
    return any(text.startswith(str(Path(r).resolve()) + os.sep) for r in roots)


def _zip_package(directory: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="omnitable-ship-")) / f"{directory.name}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in directory.rglob("*.py"):
            zf.write(file, Path(directory.name) / file.relative_to(directory))
    return target


def _new_lock_in_child() -> None:
    """A forked child (a DataLoader worker) may inherit the lock held by a thread it lacks."""
    global _SHIPPING
    _SHIPPING = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
