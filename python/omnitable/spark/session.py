"""Spark wiring: a SparkSession with the OmniTable extension jar, SQL extension and catalog."""

from __future__ import annotations

import os
import sys
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


def require_delta(spark: SparkSession) -> None:
    """Raise a clear error when ``spark`` cannot read or write Delta tables."""
    from py4j.java_gateway import JavaClass

    jvm: Any = spark.sparkContext._jvm
    if not isinstance(jvm.io.delta.tables.DeltaTable, JavaClass):
        raise MissingDependencyError(
            "Cannot use error tables: this Spark session has no Delta Lake; start it with "
            "omnitable.spark_session() (which adds the jars fetched by scripts/fetch-jars.sh) or "
            "add --packages io.delta:delta-spark_4.1_2.13:4.1.0"
        )


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
    **conf: Any,
) -> SparkSession:
    """A SparkSession that reads OmniTable tables.

    Configures ``spark.jars`` (the extension jar), ``spark.sql.extensions``, the ``omnitable``
    catalog (``SELECT … FROM omnitable.<table>``) and ``spark.omnitable.warehouse`` (default for
    ``spark.read.format("omnitable")``). Binds the driver to 127.0.0.1. With ``delta=True`` (and
    the Delta jars fetched by ``scripts/fetch-jars.sh``) it also wires Delta Lake, which error
    tables use. Extra Spark settings go in ``conf``, e.g.
    ``spark_session(**{"spark.executor.memory": "2g"})``.

    If a session is already running in this process, Spark reuses it and static settings
    (jars, extensions) cannot change; stop it first.

    Raises:
        ValidationError: the warehouse address holds a literal password; write it ``env:NAME``
            (Spark settings show in its UI, event logs and ``SET`` output and reach executors).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise MissingDependencyError("Cannot start Spark: pip install 'pyspark>=4.1,<4.2'") from exc
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
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
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def active_or_new_session(spark: SparkSession | None, warehouse: HasAddress) -> SparkSession:
    """``spark`` if given, else the active session, else a new local one for ``warehouse``."""
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return spark_session(warehouse)
