"""The extension jar: one jar, JDBC drivers inside, PostgreSQL relocated, services consistent."""

from __future__ import annotations

import zipfile

from omnitable.spark.session import jar_path


def test_jar_bundles_relocated_drivers_and_the_schema() -> None:
    with zipfile.ZipFile(jar_path()) as jar:
        names = set(jar.namelist())
        services = {
            n: jar.read(n).decode().split()
            for n in names
            if n.startswith("META-INF/services/") and not n.endswith("/")
        }
        schema = jar.read("omnitable/schema.sql").decode()
    assert "io/omnitable/shaded/org/postgresql/Driver.class" in names
    assert not any(n.startswith("org/postgresql/") for n in names), "PostgreSQL must be relocated"
    assert "org/sqlite/JDBC.class" in names  # kept in place: its JNI symbols name org.sqlite
    assert any(n.startswith("org/sqlite/native/Linux/x86_64/") for n in names)
    # Spark and Scala are provided; only OmniTable's shims of Spark-private APIs live under Spark's
    # packages (org.apache.spark.omnitable.SparkInternals, org.apache.spark.sql.omnitable.SqlInternals)
    shims = ("org/apache/spark/omnitable/", "org/apache/spark/sql/omnitable/")
    bundled = [n for n in names if n.startswith(("org/apache/spark/", "scala/"))]
    assert all(n.startswith(shims) or n.endswith("/") for n in bundled), "Spark/Scala are provided"
    for service, classes in services.items():
        for cls in classes:
            assert cls.replace(".", "/") + ".class" in names, f"{service} names missing {cls}"
    assert services["META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"] == [
        "io.omnitable.spark.source.OmniTableDataSource"
    ]
    from omnitable.catalog.store import schema_script

    assert schema == schema_script(), "the jar bundles python/omnitable/catalog/schema.sql as built"
