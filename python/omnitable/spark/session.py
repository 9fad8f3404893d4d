"""Spark wiring: a SparkSession with the OmniTable extension jar, SQL extension and catalog."""

from __future__ import annotations

import os
import re
import sys
import warnings
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from omnitable.catalog.address import CatalogAddress, parse_address
from omnitable.exceptions import MissingDependencyError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class HasAddress(Protocol):
    """A warehouse (or a table's context): anything that knows its catalog address."""

    @property
    def address(self) -> CatalogAddress: ...


EXTENSIONS_CLASS = "io.omnitable.spark.OmniTableSparkSessionExtensions"
CATALOG_CLASS = "io.omnitable.spark.source.OmniTableCatalog"
CATALOG_NAME = "omnitable"
JAR_NAME = "omnitable-spark.jar"
DELTA_JARS = ("delta-spark_4.1_2.13-4.1.0.jar", "delta-storage-4.1.0.jar")
DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
WAREHOUSE_KEY = "spark.omnitable.warehouse"
CATALOG_WAREHOUSE_KEY = f"spark.sql.catalog.{CATALOG_NAME}.warehouse"
# More warehouses configured for a session; the JVM reads the env:NAME password of a `warehouse`
# read option only for a warehouse configured there (docs/spark.md, "Credentials").
WAREHOUSES_PREFIX = "spark.omnitable.warehouses."
# A path no Delta table lives at: resolving the delta source for it tells whether Delta is there.
DELTA_PROBE_PATH = "file:/nonexistent/omnitable-delta-probe"


def jar_path() -> Path:
    """Path of the bundled extension jar.

    Raises:
        MissingDependencyError: the jar was not built (``./dev jar`` builds it).
    """
    path = Path(str(resources.files("omnitable").joinpath("jars", JAR_NAME)))
    if not path.is_file():
        raise MissingDependencyError(
            f"Cannot start Spark with OmniTable: the extension jar {path} is missing; build it "
            "with `./dev jar` (or reinstall a wheel that bundles it)"
        )
    return path


def delta_jar_paths() -> list[Path] | None:
    """Paths of the bundled Delta Lake jars, or None when they were not fetched."""
    root = Path(str(resources.files("omnitable").joinpath("jars")))
    paths = [root / name for name in DELTA_JARS]
    return paths if all(p.is_file() for p in paths) else None


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (or one of its DataFrames), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def error_condition(exc: BaseException) -> str | None:
    """The Spark error condition (error class) of ``exc``, classic or Connect; None if none."""
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return str(get()) if callable(get) and get() else None


def require_delta(spark: SparkSession) -> None:
    """Raise a clear error when ``spark`` cannot read or write Delta tables.

    A session configured with Delta's extension or catalog (as :func:`spark_session` does) has
    it. Otherwise Spark is asked to resolve the ``delta`` source for a path that does not exist
    (public API only, so on a Connect session too): without Delta Lake that fails with
    ``DATA_SOURCE_NOT_FOUND``; with it, only because the path is missing, which is ignored.
    """
    extensions = str(spark.conf.get("spark.sql.extensions", None) or "")
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", None)
    if DELTA_EXTENSIONS in extensions.split(",") or catalog == DELTA_CATALOG:
        return
    try:
        spark.read.format("delta").load(DELTA_PROBE_PATH).schema  # noqa: B018 - analysis
    except Exception as exc:
        if error_condition(exc) != "DATA_SOURCE_NOT_FOUND":
            return
        raise MissingDependencyError(
            "Cannot use error tables: this Spark session has no Delta Lake; start it with "
            "omnitable.spark_session() (which adds the jars fetched by scripts/fetch-jars.sh) or "
            "add --packages io.delta:delta-spark_4.1_2.13:4.1.0"
        ) from exc


def warehouse_string(warehouse: HasAddress | str | os.PathLike[str] | None) -> str:
    """The warehouse string for Spark settings and read options.

    The JVM resolves an ``env:NAME`` password of a ``warehouse`` read option only for a server in
    the application's static configuration (``spark.omnitable.warehouse``,
    ``spark.omnitable.warehouses.<alias>`` or a catalog's ``warehouse``, set when the application
    starts, e.g. by :func:`spark_session`; same user, host, port and variable, any database):
    settings changed at run time never count, so a query cannot send a configured secret to a
    server of its choosing.

    Raises:
        ValidationError: the address holds a literal password (Spark would show it in its UI,
            event logs and ``SET`` output and copy it to executors); ``env:NAME`` is required.
    """
    if warehouse is None or isinstance(warehouse, (str, os.PathLike)):
        return parse_address(warehouse).spark_warehouse_string()
    return warehouse.address.spark_warehouse_string()


def spark_session(
    warehouse: HasAddress | str | os.PathLike[str] | None = None,
    master: str = "local[*]",
    app_name: str = "omnitable",
    *,
    delta: bool = True,
    remote: str | None = None,
    **conf: Any,
) -> SparkSession:
    """A SparkSession that reads OmniTable tables: a classic one, or a Spark Connect one.

    Configures ``spark.jars`` (the extension jar), ``spark.sql.extensions``, the ``omnitable``
    catalog (``SELECT … FROM omnitable.<table>``) and ``spark.omnitable.warehouse`` (default for
    ``spark.read.format("omnitable")``). Binds the driver to 127.0.0.1. With ``delta=True`` (and
    the Delta jars fetched by ``scripts/fetch-jars.sh``) it also wires Delta Lake, which error
    tables use. Extra Spark settings go in ``conf``, e.g.
    ``spark_session(**{"spark.executor.memory": "2g"})``.

    If a session is already running in this process, Spark reuses it and static settings
    (jars, extensions) cannot change; stop it first.

    Args:
        remote: build a Spark Connect session (needs the ``connect`` extra). ``"local[2]"`` (any
            ``local…`` master) starts a Connect server in this process with every setting above
            (gRPC on 127.0.0.1, port 15002 unless ``spark.connect.grpc.binding.port`` is set);
            ``"sc://host:port"`` connects to a running server, which must have been started with
            the jar and the extension (docs/spark.md, "Spark Connect"): only the settings a
            session may change (the warehouse, the ``omnitable`` catalog, ``conf``) are sent.
            ``master`` is ignored then.

    Raises:
        ValidationError: the warehouse address holds a literal password; write it ``env:NAME``
            (Spark settings show in its UI, event logs and ``SET`` output and reach executors);
            or ``remote`` is neither ``local…`` nor ``sc://…``.
        MissingDependencyError: ``remote`` is given without the ``connect`` extra installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise MissingDependencyError("Cannot start Spark: pip install 'pyspark>=4.1,<4.2'") from exc
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = _settings(warehouse, delta, conf)
    if remote is not None:
        return _connect_session(remote, app_name, settings, conf)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _settings(
    warehouse: HasAddress | str | os.PathLike[str] | None, delta: bool, conf: dict[str, Any]
) -> dict[str, str]:
    """Every Spark setting of :func:`spark_session` (``conf`` last, jars and extensions merged)."""
    conf = dict(conf)
    wh = warehouse_string(warehouse)
    jar = str(jar_path())
    settings: dict[str, str] = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.extensions": EXTENSIONS_CLASS,
        f"spark.sql.catalog.{CATALOG_NAME}": CATALOG_CLASS,
        CATALOG_WAREHOUSE_KEY: wh,
        WAREHOUSE_KEY: wh,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    jars = [jar]
    extensions = [EXTENSIONS_CLASS]
    delta_jars = delta_jar_paths() if delta else None
    if delta_jars is not None:
        jars += [str(p) for p in delta_jars]
        extensions.append(DELTA_EXTENSIONS)
        settings["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    extra_jars = str(conf.pop("spark.jars", "")).strip(",")
    settings["spark.jars"] = ",".join(jars + ([extra_jars] if extra_jars else []))
    extra_ext = str(conf.pop("spark.sql.extensions", "")).strip(",")
    settings["spark.sql.extensions"] = ",".join(extensions + ([extra_ext] if extra_ext else []))
    settings.update({k: str(v) for k, v in conf.items()})
    for key, value in settings.items():
        if key in (WAREHOUSE_KEY, CATALOG_WAREHOUSE_KEY) or key.startswith(WAREHOUSES_PREFIX):
            warehouse_string(value)  # refuses a literal password given through ``conf``
    return settings


# What a session on a running Connect server may set (the server's static settings are its own).
_REMOTE_KEYS = (
    f"spark.sql.catalog.{CATALOG_NAME}",
    CATALOG_WAREHOUSE_KEY,
    WAREHOUSE_KEY,
    "spark.sql.session.timeZone",
    "spark.sql.execution.arrow.pyspark.enabled",
)
# Python packages the Connect client needs (pyspark's `connect` extra).
_CONNECT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")


def _connect_session(
    remote: str, app_name: str, settings: dict[str, str], conf: dict[str, Any]
) -> SparkSession:
    """A Spark Connect session: a local server started here (``local…``) or a running one."""
    import importlib.util

    from pyspark.sql import SparkSession

    from omnitable.exceptions import ValidationError

    if not remote.startswith(("local", "sc://")):
        raise ValidationError(
            f"Cannot start a Spark Connect session: remote '{remote}' is neither a local master "
            "('local[2]') nor a Connect URL ('sc://host:15002')"
        )
    missing = [m for m in _CONNECT_MODULES if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        raise MissingDependencyError(
            f"Cannot start a Spark Connect session: {', '.join(missing)} not installed; "
            "pip install 'omnitable[connect]' (or 'pyspark[connect]==4.1.1')"
        )
    if remote.startswith("local"):
        settings = {"spark.connect.grpc.binding.address": "127.0.0.1", **settings}
    else:
        keep = set(_REMOTE_KEYS) | set(conf)
        settings = {k: v for k, v in settings.items() if k in keep}
    builder = SparkSession.builder.remote(remote).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        if remote.startswith("local"):
            # The local server starts with every setting; pyspark then sets them all again on
            # the client session, where the static ones warn "Failed to set" (they are set).
            for key in settings:
                warnings.filterwarnings(
                    "ignore", f"Failed to set {re.escape(key)} to", category=UserWarning
                )
        return builder.getOrCreate()


def current_session() -> SparkSession | None:
    """This thread's active session, else the process's default one (the last the builder made),
    else None.

    ``getActiveSession`` alone is thread-local on the JVM side: a Python thread other than the one
    that built the session (a thread pool, a new connection to the JVM) sees none.
    """
    try:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    try:
        return SparkSession.active()  # the default session where no thread-local one is set
    except PySparkRuntimeError:  # NO_ACTIVE_OR_DEFAULT_SESSION
        return None


def active_or_new_session(spark: SparkSession | None, warehouse: HasAddress) -> SparkSession:
    """``spark`` if given, else the current session (:func:`current_session`), else a new local
    one for ``warehouse``."""
    if spark is not None:
        return spark
    return current_session() or spark_session(warehouse)
