from __future__ import annotations

from pathlib import Path

import pytest

import omnitable
from omnitable.catalog.address import parse_address
from omnitable.exceptions import ValidationError
from omnitable.spark.session import spark_session
from omnitable.spark.submit_args import submit_args


def test_directory_means_sqlite_file_inside(tmp_path: Path) -> None:
    addr = parse_address(tmp_path / "wh")
    assert addr.is_sqlite
    assert addr.url.database == str(tmp_path / "wh" / "catalog.db")
    assert addr.sqlite_dir == tmp_path / "wh"
    assert addr.warehouse_string() == str(tmp_path / "wh")


def test_default_is_omnitable_warehouse_in_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_address(None).sqlite_dir == tmp_path / "omnitable-warehouse"


def test_sqlite_url(tmp_path: Path) -> None:
    addr = parse_address(f"sqlite:///{tmp_path}/cat.db")
    assert addr.url.database == str(tmp_path / "cat.db")
    assert addr.warehouse_string().startswith("sqlite:///")


def test_postgres_env_password_resolved_at_connect_and_never_rendered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    addr = parse_address("postgresql://bob:env:OMNITABLE_TEST_PW@db.internal:5433/wh")
    monkeypatch.setenv("OMNITABLE_TEST_PW", "s3cret")
    url = addr.connect_url()
    assert url.password == "s3cret"
    assert url.drivername == "postgresql+psycopg"
    assert "s3cret" not in addr.redacted() and "s3cret" not in repr(addr)
    assert "env:OMNITABLE_TEST_PW" in addr.warehouse_string()


def test_connect_params_resolve_the_env_password_and_default_the_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMNITABLE_TEST_PW", "s3cret")
    params = parse_address("postgresql://me:env:OMNITABLE_TEST_PW@db.example/wh").connect_params()
    assert params == {
        "host": "db.example",
        "port": 5432,
        "user": "me",
        "password": "s3cret",
        "dbname": "wh",
    }


def test_postgres_missing_env_password_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNITABLE_UNSET_PW", raising=False)
    addr = parse_address("postgresql://bob:env:OMNITABLE_UNSET_PW@localhost/wh")
    with pytest.raises(ValidationError, match="OMNITABLE_UNSET_PW"):
        addr.connect_url()


@pytest.mark.parametrize(
    "bad",
    [
        "mysql://x/y",
        "ftp://host/wh",
        "",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql://localhost",
        "postgresql://u:hunter2@h:notaport/db",
    ],
)
def test_bad_addresses(bad: str) -> None:
    with pytest.raises(ValidationError, match="Cannot") as err:
        parse_address(bad)
    assert "hunter2" not in str(err.value)


def test_a_file_is_not_a_warehouse_directory(tmp_path: Path) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValidationError, match="is a file"):
        parse_address(f)


def test_env_password_outside_allowed_prefixes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNITABLE_ENV_PREFIXES", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cret")
    addr = parse_address("postgresql://bob:env:AWS_SECRET_ACCESS_KEY@evil.example/db")
    with pytest.raises(ValidationError, match="outside the allowed prefixes") as exc:
        addr.connect_url()
    assert "OMNITABLE_, PG" in str(exc.value) and "aws-s3cret" not in str(exc.value)
    monkeypatch.setenv("PGPASSWORD", "pg-pw")
    assert parse_address("postgresql://bob:env:PGPASSWORD@h/db").connect_url().password == "pg-pw"


def test_env_prefixes_are_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITABLE_ENV_PREFIXES", " MYAPP_ , ")
    monkeypatch.setenv("MYAPP_PW", "mine")
    monkeypatch.setenv("OMNITABLE_PW", "omni")
    assert parse_address("postgresql://u:env:MYAPP_PW@h/db").connect_url().password == "mine"
    with pytest.raises(ValidationError, match="MYAPP_"):
        parse_address("postgresql://u:env:OMNITABLE_PW@h/db").connect_url()


@pytest.mark.postgres
def test_connect_reads_only_allowed_env_passwords(
    pg_databases: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a real server: the right password under a disallowed name is never sent."""
    addr = parse_address(pg_databases.create())  # type: ignore[attr-defined]
    monkeypatch.delenv("OMNITABLE_ENV_PREFIXES", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", str(addr.connect_url().password))
    foreign = addr.url.set(password="env:AWS_SECRET_ACCESS_KEY").render_as_string(False)
    with pytest.raises(ValidationError, match="outside the allowed prefixes"):
        omnitable.connect(foreign, root=str(tmp_path / "data"))
    monkeypatch.setenv("OMNITABLE_ENV_PREFIXES", "OMNITABLE_,AWS_")
    with omnitable.connect(foreign, root=str(tmp_path / "data")) as wh:
        assert wh.tables() == []


def test_redacted_hides_secret_query_parameters() -> None:
    addr = parse_address("postgresql://u:hunter2@h/db?sslmode=require&password=pw1&SSLPassword=pw2")
    shown = addr.redacted()
    assert not any(s in shown for s in ("hunter2", "pw1", "pw2")), shown
    assert "sslmode=require" in shown
    assert "password=***" in shown and "SSLPassword=***" in shown, shown  # as docs/catalog.md says
    assert "pw1" not in repr(addr) and addr.display() == shown


@pytest.mark.parametrize(
    "literal",
    [
        "postgresql://u:hunter2@h/db",
        "postgresql://u@h/db?password=hunter2",
        "postgresql://u:env:OMNITABLE_PW@h/db?sslpassword=hunter2",
    ],
)
def test_spark_is_never_given_a_literal_password(literal: str) -> None:
    addr = parse_address(literal)
    assert addr.has_literal_password
    for give in (addr.spark_warehouse_string, lambda: submit_args(literal)):
        with pytest.raises(ValidationError, match="env:NAME") as exc:
            give()
        assert "hunter2" not in str(exc.value)
    with pytest.raises(ValidationError, match="literal password"):
        spark_session(literal)
    for key in ("spark.omnitable.warehouse", "spark.sql.catalog.omnitable.warehouse"):
        with pytest.raises(ValidationError, match="literal password"):
            spark_session(None, **{key: literal})
    ok = parse_address("postgresql://u:env:OMNITABLE_PW@h/db?sslmode=require")
    assert not ok.has_literal_password
    assert ok.spark_warehouse_string() == "postgresql://u:env:OMNITABLE_PW@h/db?sslmode=require"


@pytest.mark.postgres
def test_table_repr_hides_a_literal_password(pg_databases: object, tmp_path: Path) -> None:
    base = parse_address(pg_databases.create())  # type: ignore[attr-defined]
    password = str(base.connect_url().password)
    literal = base.url.set(password=password).render_as_string(False)
    with omnitable.connect(literal, root=str(tmp_path / "data")) as wh:
        t = wh.create_table("t", {"x": "long"})
        assert f":{password}@" not in repr(t) and ":***@" in repr(t)
        assert f":{password}@" not in repr(wh)
    with omnitable.connect(tmp_path / "wh") as local:
        assert repr(local.create_table("t", {"x": "long"})).endswith(f"{str(tmp_path / 'wh')!r})")
