"""Catalog credentials on the JVM side: which ``env:NAME`` passwords a read may resolve, and that
a known password shows up nowhere Spark exposes (docs/spark.md, "Credentials")."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from sqlalchemy.engine import make_url

import omnitable
from omnitable.spark.session import WAREHOUSES_PREFIX

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def table(pg_databases: Any, tmp_path: Path) -> Iterator[omnitable.Table]:
    """A 5-row table in a fresh PostgreSQL catalog (password ``env:OMNITABLE_PG_PASSWORD``)."""
    with omnitable.connect(pg_databases.create(), root=str(tmp_path / "data")) as wh:
        t = wh.create_table("cred", {"x": "long"})
        t.append(pa.table({"x": list(range(5))}), "b0")
        yield t


def _with_password(uri: str, password: str | None, query: str = "") -> str:
    u = make_url(uri)
    info = u.username + (f":{password}" if password is not None else "")
    return f"postgresql://{info}@{u.host}:{u.port}/{u.database}{query}"


def test_read_option_env_password_only_for_a_configured_warehouse(
    spark: Any, table: omnitable.Table
) -> None:
    t = table
    uri = t.warehouse.uri
    assert ":env:OMNITABLE_" in uri
    # the test server (user, host, port, variable) is in the session's static configuration
    # (tests/conftest.py), so any database on it can be read through a read option
    assert spark.read.format("omnitable").option("warehouse", uri).load("cred").count() == 5
    assert t.to_spark(spark).count() == 5
    # a server named only by a read option, or configured at run time (spark.conf.set / SQL SET),
    # never receives the secret
    u = make_url(uri)
    elsewhere = f"postgresql://{u.username}:env:OMNITABLE_PG_PASSWORD@127.0.0.2:{u.port}/x"
    key = WAREHOUSES_PREFIX + "set_at_run_time"
    spark.sql(f"SET {key}={elsewhere}")
    try:
        for wh in (elsewhere, _with_password(uri, "env:OMNITABLE_OTHER_SECRET")):
            with pytest.raises(AnalysisException, match="OMNITABLE_CREDENTIAL_NOT_ALLOWED") as exc:
                spark.read.format("omnitable").option("warehouse", wh).load("cred").count()
            assert "static configuration" in str(exc.value)
    finally:
        spark.conf.unset(key)


def test_read_options_refuse_literal_passwords_without_showing_them(
    spark: Any, table: omnitable.Table
) -> None:
    """Spark prints read options in plans (EXPLAIN, event logs), so a password must not be one."""
    url = make_url(table.warehouse.uri)
    password = str(table.warehouse.address.connect_url().password)
    options = [
        _with_password(table.warehouse.uri, None, f"?password={password}&sslpassword=k3y-s3cret"),
        _with_password(table.warehouse.uri, password),
    ]
    messages = []
    for option in options:
        with pytest.raises(AnalysisException, match="OMNITABLE_PASSWORD_IN_CONFIG") as exc:
            spark.read.format("omnitable").option("warehouse", option).load("cred")
        messages.append(str(exc.value))
    for message in messages:
        assert f"password={password}" not in message and "k3y-s3cret" not in message, message
        assert f":{password}@" not in message and "env:NAME" in message, message
    assert f"{url.host}:{url.port}/{url.database}?password=***&sslpassword=***" in messages[0]
    assert f"//{url.username}:***@{url.host}" in messages[1]


@pytest.mark.slow
def test_a_known_password_appears_nowhere_spark_shows(pg_databases: Any, tmp_path: Path) -> None:
    """SET, DESCRIBE/EXPLAIN EXTENDED, errors, the session's Hadoop conf, the JVM command line
    and the event log, for catalog (env:NAME) and read-option (literal) passwords alike. In the
    same Spark application (one JVM start): a statically configured warehouse naming a variable
    outside the allowed prefixes still cannot read it (the catalog plugin connects)."""
    uri = pg_databases.create()
    role, secret = f"omt_leak_{uuid.uuid4().hex[:8]}", f"Leak-{uuid.uuid4().hex}"
    admin = pg_databases._admin()
    admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{secret}'")
    script = Path(__file__).with_name("credentials_check.py")
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        AWS_SECRET_ACCESS_KEY="not-to-be-sent",
    )
    logs = tmp_path / "events"
    logs.mkdir()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), uri, role, secret, str(logs), str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        pg_databases.drop_all()
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        admin.close()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "OK" in proc.stdout.splitlines() and "counts:" in proc.stdout, proc.stdout
    assert "Row(count(1)=10) / 6" in proc.stdout, proc.stdout
