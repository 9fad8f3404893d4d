from __future__ import annotations

from pathlib import Path

import pytest

from omnitable.catalog.address import parse_address
from omnitable.exceptions import ValidationError


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
    addr = parse_address("postgresql://bob:env:OMT_TEST_PW@db.internal:5433/wh")
    monkeypatch.setenv("OMT_TEST_PW", "s3cret")
    url = addr.connect_url()
    assert url.password == "s3cret"
    assert url.drivername == "postgresql+psycopg"
    assert "s3cret" not in addr.redacted() and "s3cret" not in repr(addr)
    assert "env:OMT_TEST_PW" in addr.warehouse_string()


def test_postgres_missing_env_password_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMT_UNSET_PW", raising=False)
    addr = parse_address("postgresql://bob:env:OMT_UNSET_PW@localhost/wh")
    with pytest.raises(ValidationError, match="OMT_UNSET_PW"):
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
    ],
)
def test_bad_addresses(bad: str) -> None:
    with pytest.raises(ValidationError, match="Cannot"):
        parse_address(bad)


def test_a_file_is_not_a_warehouse_directory(tmp_path: Path) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValidationError, match="is a file"):
        parse_address(f)
