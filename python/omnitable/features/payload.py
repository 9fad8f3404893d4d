"""Pickled feature code: features defined where users write them (a notebook cell, a script's
``__main__``, a closure, a lambda).

A pandas feature whose function another process cannot import is stored by value: its function
is pickled with cloudpickle (the copy pyspark ships, so every process that runs Spark can read
it) into ``<table dir>/_features/<sha256>.pkl``, named by the sha256 of its bytes and written
before the registration commits. The feature's catalog definition (``features.definition``, a
JSON document) records the file, its hash and the environment it was pickled in: the Python
version and the versions of pyarrow, pandas, numpy, pyspark, omnitable and of every top-level
module the function's globals and closure reference that belongs to an installed distribution.

Loading (the backfill driver, each Python worker) reads the file, checks its hash, then checks
the environment: another Python ``major.minor`` or a missing package is incompatible; another
``major.minor`` of a package is refused unless the run allows version drift; patch releases
differ freely. Unpickling runs code: register only from trusted sources.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import logging
import platform
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from omnitable.exceptions import ValidationError
from omnitable.format.fs import Location

PAYLOAD_DIR = "_features"
BASE_PACKAGES = ("pyarrow", "pandas", "numpy", "pyspark", "omnitable")
PICKLER = "pyspark.cloudpickle"
log = logging.getLogger("omnitable.features")


def _cloudpickle() -> Any:
    from pyspark import cloudpickle  # the copy every Spark Python worker has (imported lazily)

    return cloudpickle


def _normalized_dumps(fn: Callable[..., Any]) -> bytes:
    """cloudpickle with code objects' file names and first line numbers left out, so the same
    code defined in another file or at another line (a notebook cell re-run after a kernel
    restart) pickles to the same bytes."""
    cloudpickle = _cloudpickle()

    class Normalized(cloudpickle.Pickler):  # type: ignore[name-defined]
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.CodeType):
                plain = obj.replace(co_filename="", co_firstlineno=1)
                return self.dispatch_table[types.CodeType](plain)
            return super().reducer_override(obj)

        def _function_getnewargs(self, func: Any) -> Any:  # cloudpickle's hook (pinned pyspark)
            refs = getattr(self, "globals_ref", None)
            if isinstance(refs, dict) and not refs.get(id(func.__globals__)):
                base = {k: func.__globals__.get(k) for k in ("__name__", "__package__")}
                refs[id(func.__globals__)] = {k: v for k, v in base.items() if v is not None}
            return super()._function_getnewargs(func)

    buffer = io.BytesIO()
    Normalized(buffer, protocol=5).dump(fn)
    return buffer.getvalue()


def pickle_function(fn: Callable[..., Any], feature: str) -> tuple[bytes, dict[str, Any]]:
    """The payload of ``fn`` and its metadata (stored in the feature's definition as
    ``payload``): ``sha256``, ``path`` (relative to the table directory), ``python``,
    ``packages`` (distribution -> version), ``modules`` (top-level modules it references that
    no distribution provides: local modules, shipped to Spark executors like those of features
    stored by reference), ``pickler`` and ``fingerprint`` (the hash of the pickle without file
    names and line numbers).

    Raises:
        ValidationError: ``fn`` cannot be pickled.
    """
    try:
        data = _cloudpickle().dumps(fn, protocol=5)
        normalized = _normalized_dumps(fn)
    except Exception as exc:
        raise ValidationError(
            f"Cannot register feature '{feature}': its function cannot be pickled "
            f"({type(exc).__name__}: {exc}); define it at module level in an importable module, "
            "or keep objects that cannot be pickled (connections, locks) out of its globals"
        ) from exc
    sha = hashlib.sha256(data).hexdigest()
    meta = {
        "sha256": sha,
        "path": f"{PAYLOAD_DIR}/{sha}.pkl",
        "bytes": len(data),
        "python": platform.python_version(),
        "packages": environment(fn),
        "modules": local_modules(fn),
        "pickler": PICKLER,
        "fingerprint": hashlib.sha256(normalized).hexdigest(),
    }
    return data, meta


def environment(fn: Callable[..., Any]) -> dict[str, str]:
    """Versions of the base packages and of the distributions providing the top-level modules
    ``fn`` references (globals, closure cells, nested functions of the same kind)."""
    by_module = importlib.metadata.packages_distributions()
    names = set(BASE_PACKAGES)
    for top in sorted(_referenced_modules(fn)):
        names.update(by_module.get(top, []))
    out = {}
    for name in sorted(names):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def local_modules(fn: Callable[..., Any]) -> list[str]:
    """Top-level modules ``fn`` references that are neither in the standard library nor
    provided by an installed distribution."""
    by_module = importlib.metadata.packages_distributions()
    stdlib = sys.stdlib_module_names
    refs = _referenced_modules(fn)
    return sorted(m for m in refs if m not in by_module and m not in stdlib and m != "omnitable")


def _referenced_modules(fn: Callable[..., Any], seen: set[int] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return set()
    seen.add(id(fn))
    values = [fn.__globals__[n] for n in _code_names(fn.__code__) if n in fn.__globals__]
    values += [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
    values += list(fn.__defaults__ or ())
    out: set[str] = set()
    for value in values:
        if isinstance(value, types.ModuleType):
            out.add(value.__name__.split(".", 1)[0])
        elif isinstance(value, types.FunctionType) and value.__module__ in ("__main__", None):
            out |= _referenced_modules(value, seen)
        else:
            try:
                module = getattr(value, "__module__", None) or type(value).__module__
            except Exception:  # an object whose attribute lookup fails: its type's module
                module = type(value).__module__
            if isinstance(module, str) and module not in ("__main__", "builtins"):
                out.add(module.split(".", 1)[0])
            if isinstance(value, types.FunctionType):
                out |= _referenced_modules(value, seen)
    return out


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def write_payload(location: Location, data: bytes, meta: Mapping[str, Any]) -> None:
    """Write the payload file (content-addressed: an existing file with the registered content
    is kept; a missing or modified one is written again)."""
    path = location.child_path(meta["path"])
    if location.fs.get_file_info(path).type != pa.fs.FileType.NotFound:
        with location.fs.open_input_stream(path) as stream:
            if hashlib.sha256(stream.read()).hexdigest() == meta["sha256"]:
                return
    location.fs.create_dir(location.child_path(PAYLOAD_DIR), recursive=True)
    with location.fs.open_output_stream(path) as out:
        out.write(data)


def load_function(
    location: Location, meta: Mapping[str, Any], feature: str, allow_version_drift: bool
) -> Callable[..., Any]:
    """The function stored in a payload, after checking its file and the environment.

    Raises:
        ValidationError: the file is missing or its content is not the registered one, the
            environment is incompatible (see the module doc), or unpickling fails.
    """
    data = read_payload(location, meta, feature)
    check_environment(meta, feature, allow_version_drift)
    try:
        fn = _cloudpickle().loads(data)
    except Exception as exc:
        raise ValidationError(
            f"Cannot load feature '{feature}': unpickling its registered code failed "
            f"({type(exc).__name__}: {exc}); a module it uses may be missing here (install it "
            "or add it to the import path)"
        ) from exc
    if not callable(fn):
        raise ValidationError(f"Cannot load feature '{feature}': its payload is not a function")
    return fn


def read_payload(location: Location, meta: Mapping[str, Any], feature: str) -> bytes:
    """The payload's bytes, checked against the registered hash."""
    path = location.child_path(meta["path"])
    try:
        with location.fs.open_input_stream(path) as stream:
            data: bytes = stream.read()
    except (FileNotFoundError, OSError) as exc:
        raise ValidationError(
            f"Cannot load feature '{feature}': its pickled code {path} is missing ({exc}); "
            "register the same code again (re-run its definition) to write it again"
        ) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != meta["sha256"]:
        raise ValidationError(
            f"Cannot load feature '{feature}': its pickled code {path} was modified (sha256 "
            f"{actual}, registered {meta['sha256']}); it is not run. Register the same code "
            "again (re-run its definition) to write it again"
        )
    return data


def environment_differences(meta: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(incompatible, drifted): what differs between the payload's recorded environment and
    this process's. Incompatible: Python ``major.minor``, a package not installed. Drifted:
    a package's ``major.minor``."""
    incompatible, drifted = [], []
    here = platform.python_version()
    if _minor(meta["python"]) != _minor(here):
        incompatible.append(f"Python {meta['python']} (here {here})")
    for name, version in sorted(meta.get("packages", {}).items()):
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            incompatible.append(f"{name}=={version} (not installed here)")
            continue
        if _minor(installed) != _minor(version):
            drifted.append(f"{name}=={version} (here {installed})")
    return incompatible, drifted


def check_environment(meta: Mapping[str, Any], feature: str, allow_version_drift: bool) -> None:
    """Raise when this environment cannot run the payload (see :func:`environment_differences`);
    a drift that is allowed is logged."""
    incompatible, drifted = environment_differences(meta)
    if incompatible:
        raise ValidationError(
            f"Cannot load feature '{feature}': this environment ({sys.executable}) is not "
            f"compatible with the one its code was pickled in: {'; '.join(incompatible + drifted)}"
            "; run it where the recorded versions are installed, or register the feature again "
            "from here"
        )
    if drifted and not allow_version_drift:
        raise ValidationError(
            f"Cannot load feature '{feature}': library versions differ from those its code "
            f"was pickled with: {'; '.join(drifted)}; install the recorded versions, register "
            "the feature again from here, or allow it with allow_version_drift=True "
            "(CLI: --allow-version-drift)"
        )
    if drifted:
        log.warning("feature %s runs with other library versions: %s", feature, "; ".join(drifted))


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])
