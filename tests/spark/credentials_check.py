"""Search everything a Spark session exposes for a known catalog password. Run by
test_spark_credentials.py in its own process (event logging is fixed when a SparkContext starts).

Usage: credentials_check.py WAREHOUSE_URL ROLE SECRET EVENT_LOG_DIR DATA_ROOT

WAREHOUSE_URL is a PostgreSQL catalog (its password an ``env:`` reference the test server
accepts); ROLE may log in to it with password SECRET. The check creates a table there, reads it
through the catalog and a read option (password ``env:OMNITABLE_LEAK_PW``), checks that
``spark_session`` and read options refuse SECRET written literally (in the user info and as
``?password=``), then looks for SECRET in ``SET`` output,
``DESCRIBE EXTENDED``, ``EXPLAIN EXTENDED``, error messages, the session's Hadoop configuration,
the JVM's command line and the event log. Prints ``LEAK <where>`` for each finding, ``OK`` if none.

The same session also has a statically configured catalog ``foreign`` whose warehouse names
``env:AWS_SECRET_ACCESS_KEY`` (set in the environment): a variable outside the allowed prefixes,
which the catalog plugin must refuse to read (``READ foreign`` if it did not). One JVM for both.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyspark
from sqlalchemy.engine import make_url

import omnitable
from omnitable.catalog.address import parse_address
from omnitable.exceptions import ValidationError
from omnitable.spark.session import CATALOG_CLASS


def with_password(url: str, user: str, password: str | None, query: str = "") -> str:
    u = make_url(url)
    info = user + (f":{password}" if password is not None else "")
    return f"postgresql://{info}@{u.host}:{u.port}/{u.database}{query}"


def main() -> None:
    url, role, secret, log_dir, root = sys.argv[1:6]
    found: dict[str, str] = {}
    with omnitable.connect(url, root=root) as wh:
        t = wh.create_table("leak", {"x": "long"})
        t.append(pa.table({"x": list(range(10))}), "b0")
    with _admin(url) as conn:
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')

    os.environ["OMNITABLE_LEAK_PW"] = secret
    os.environ["SPARK_HOME"] = str(Path(str(pyspark.__file__)).parent)
    literal = with_password(url, role, secret)
    settings = {
        "spark.ui.enabled": "false",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": Path(log_dir).as_uri(),
        "spark.eventLog.compress": "false",  # searched as text
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.catalog.foreign": CATALOG_CLASS,
        "spark.sql.catalog.foreign.warehouse": with_password(url, "u", "env:AWS_SECRET_ACCESS_KEY"),
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",  # C1 only: a short-lived JVM
    }
    try:  # refused; were it accepted, the rest shows where the password then goes
        spark = omnitable.spark_session(literal, master="local[1]", **settings)
        found["spark_session(literal password) was accepted"] = ""
    except ValidationError as exc:
        found["spark_session error"] = str(exc)
        env_url = with_password(url, role, "env:OMNITABLE_LEAK_PW")
        spark = omnitable.spark_session(env_url, master="local[1]", **settings)

    def rows(sql: str) -> str:
        return "\n".join(str(r) for r in spark.sql(sql).collect())

    def error(run: Callable[[], object]) -> str:
        try:
            run()
        except Exception as exc:  # any error: its text is what is searched
            return str(exc)
        return ""

    found["count(catalog)"] = rows("SELECT count(*) FROM omnitable.leak")
    foreign = error(lambda: spark.sql("SHOW TABLES IN foreign").collect())
    found["SET"] = rows("SET")
    found["DESCRIBE EXTENDED"] = rows("DESCRIBE TABLE EXTENDED omnitable.leak")
    found["EXPLAIN EXTENDED"] = rows("EXPLAIN EXTENDED SELECT * FROM omnitable.leak WHERE x > 3")
    found["missing table (catalog)"] = error(lambda: spark.sql("SELECT * FROM omnitable.nope"))
    env_option = with_password(url, role, "env:OMNITABLE_LEAK_PW")
    df = spark.read.format("omnitable").option("warehouse", env_option).load("leak")
    found["count(option)"] = str(df.where("x > 3").count())
    df.createOrReplaceTempView("leak_view")
    found["EXPLAIN (option)"] = rows("EXPLAIN EXTENDED SELECT * FROM leak_view")
    found["DESCRIBE (option)"] = rows("DESCRIBE EXTENDED leak_view")
    for name, wh_option in (
        ("user info", literal),
        ("query", with_password(url, role, None, f"?sslmode=disable&password={secret}")),
    ):
        found[f"literal password (option {name})"] = error(
            lambda o=wh_option: spark.read.format("omnitable").option("warehouse", o).load("leak")
        )
    found["missing table (option)"] = error(
        lambda: spark.read.format("omnitable").option("warehouse", env_option).load("nope")
    )
    jvm = spark.sparkContext._jvm
    writer = jvm.java.io.StringWriter()
    spark._jsparkSession.sessionState().newHadoopConf().writeXml(writer)
    found["session Hadoop conf"] = writer.toString()
    pid = jvm.java.lang.ProcessHandle.current().pid()
    found["JVM command line"] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    spark.stop()
    for log in Path(log_dir).rglob("*"):
        if log.is_file():
            found[f"event log {log.name}"] = log.read_text(errors="replace")

    problems = [f"LEAK {k}" for k, v in found.items() if secret in v or k.endswith("accepted")]
    problems += [
        f"ACCEPTED {k}"
        for k, v in found.items()
        if k.startswith("literal password") and "OMNITABLE_PASSWORD_IN_CONFIG" not in v
    ]
    if "outside the allowed prefixes" not in foreign:
        problems.append(f"READ foreign (env:AWS_SECRET_ACCESS_KEY): {foreign or 'no error'}")
    if not any(k.startswith("event log") for k in found):
        problems.append("NO EVENT LOG written: nothing was searched there")
    print("\n".join(problems))
    print(f"counts: {found['count(catalog)']} / {found['count(option)']}")
    print("OK" if not problems else "FAILED")
    sys.exit(1 if problems else 0)


def _admin(url: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(**parse_address(url).connect_params(), autocommit=True)


if __name__ == "__main__":
    main()
