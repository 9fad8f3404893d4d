"""The model store on SQLite and PostgreSQL catalogs: files, directories and objects round-trip
verified by SHA-256; a flipped byte fails the load naming both hashes; re-registering is
idempotent only for identical content; delete is refused while a feature references the model;
``env:`` credentials stay out of records, reprs and errors."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

import omnitable
from omnitable.exceptions import (
    AlreadyExistsError,
    CorruptInputError,
    NotFoundError,
    ValidationError,
)
from omnitable.models import ModelRecord, ModelStore


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_register_list_get_load(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    models = wh.models
    weights = _file(tmp_path, "w.bin", b"weights-v1")
    rec = models.register("scorer", "1", weights, framework="torch", metadata={"acc": 0.9})
    assert rec.sha256 == hashlib.sha256(b"weights-v1").hexdigest()
    assert (rec.kind, rec.size, rec.framework, rec.metadata) == ("file", 10, "torch", {"acc": 0.9})
    assert rec.path.startswith(wh.root.child_uri("_models/"))
    weights.write_bytes(b"changed")  # the store holds its own copy
    assert Path(models.load("scorer", "1")).read_bytes() == b"weights-v1"

    d = tmp_path / "bundle"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "sub" / "w.bin").write_bytes(b"abc")
    drec = models.register("bundle", "v1.0", d)
    assert (drec.kind, drec.size, drec.framework) == ("directory", 5, None)
    loaded = Path(models.load("bundle", "v1.0"))
    assert (loaded / "sub" / "w.bin").read_bytes() == b"abc"

    orec = models.register("lookup", "2", {"a": [1, 2]}, metadata={"rows": 2})
    assert (orec.kind, orec.framework) == ("object", "pickle")
    assert models.load("lookup", "2") == {"a": [1, 2]}

    assert [(r.name, r.version) for r in models.list()] == [
        ("bundle", "v1.0"),
        ("lookup", "2"),
        ("scorer", "1"),
    ]
    assert models.list("scorer") == [rec]
    stored = sorted(p.name for p in (Path(wh.root.path) / "_models").iterdir())
    assert stored == sorted([rec.sha256, drec.sha256, orec.sha256])  # no temporary left over
    assert models.get("lookup", "2") == orec
    with pytest.raises(NotFoundError, match="No model 'scorer' version '9'"):
        models.get("scorer", "9")


def test_corrupt_artifact_fails_naming_both_hashes(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    rec = wh.models.register("m", "1", _file(tmp_path, "m.bin", b"0123456789"))
    stored = Path(wh.models.load("m", "1"))
    data = bytearray(stored.read_bytes())
    data[3] ^= 0x01
    stored.write_bytes(bytes(data))
    bad = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(CorruptInputError) as err:
        wh.models.load("m", "1")
    assert rec.sha256 in str(err.value) and bad in str(err.value)

    obj = wh.models.register("o", "1", [1, 2, 3])
    blob = Path(wh.root.path) / "_models" / obj.sha256
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x00")
    with pytest.raises(CorruptInputError, match=obj.sha256):
        wh.models.load("o", "1")
    # re-registering the same content repairs the blob
    wh.models.register("o", "1", [1, 2, 3])
    assert wh.models.load("o", "1") == [1, 2, 3]


def test_idempotent_and_conflicting_registration(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    a = wh.models.register("m", "1", _file(tmp_path, "a", b"A"))
    assert wh.models.register("m", "1", _file(tmp_path, "a2", b"A")) == a
    with pytest.raises(AlreadyExistsError) as err:
        wh.models.register("m", "1", _file(tmp_path, "b", b"B"))
    assert a.sha256 in str(err.value) and hashlib.sha256(b"B").hexdigest() in str(err.value)
    assert wh.models.list() == [a]


def test_concurrent_registrations_one_wins(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    sources = [_file(tmp_path, f"s{i}", bytes([i % 2])) for i in range(4)]  # two contents
    barrier = threading.Barrier(len(sources))
    results: list[object] = [None] * len(sources)

    def register(i: int) -> None:
        barrier.wait()
        try:
            results[i] = wh.models.register("race", "1", sources[i])
        except AlreadyExistsError as exc:
            results[i] = exc

    threads = [threading.Thread(target=register, args=(i,)) for i in range(len(sources))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    [winner] = wh.models.list()
    for i, got in enumerate(results):
        same = hashlib.sha256(bytes([i % 2])).hexdigest() == winner.sha256
        assert got == winner if same else isinstance(got, AlreadyExistsError)
    loaded = Path(wh.models.load("race", "1")).read_bytes()
    assert hashlib.sha256(loaded).hexdigest() == winner.sha256


def test_delete_and_feature_reference(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    a = wh.models.register("m", "1", _file(tmp_path, "a", b"A"))
    wh.models.register("twin", "1", _file(tmp_path, "a2", b"A"))  # shares the blob
    blob = Path(wh.root.path) / "_models" / a.sha256
    assert wh.models.delete("twin", "1").name == "twin"
    assert blob.exists()  # still used by m@1

    t = wh.create_table("t", {"x": "string"})
    t.register(omnitable.sql_feature("tag", "concat(x, ' m@1')", "string", "1", inputs=["x"]))
    with pytest.raises(ValidationError, match=r"default\.t\.tag@1"):
        wh.models.delete("m", "1")
    wh.drop_table("t")
    assert wh.models.delete("m", "1") == a
    assert not blob.exists()
    assert wh.models.list() == []
    with pytest.raises(NotFoundError):
        wh.models.delete("m", "1")
    with pytest.raises(NotFoundError):
        wh.models.load("m", "1")


def test_bad_input(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    f = _file(tmp_path, "f", b"x")
    for name, version in [("", "1"), ("a:b", "1"), ("1m", "1"), ("m", "a@b"), ("m", ""), (3, "1")]:
        with pytest.raises(ValidationError):
            wh.models.register(name, version, f)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="no file or directory"):
        wh.models.register("m", "1", tmp_path / "missing")
    with pytest.raises(ValidationError, match="JSON"):
        wh.models.register("m", "1", f, metadata={"x": object()})
    with pytest.raises(ValidationError, match="framework"):
        wh.models.register("m", "1", f, framework="a b")
    with pytest.raises(ValidationError, match="pickled"):
        wh.models.register("m", "1", lambda: 1)
    assert wh.models.list() == []


def test_env_credentials_never_leak(
    wh: omnitable.Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-value-xyz"
    monkeypatch.setenv("OMNITABLE_TEST_MODEL_TOKEN", secret)
    with pytest.raises(ValidationError, match="credential"):
        ModelStore(wh.catalog, wh.root, storage_options={"token": secret})
    with pytest.raises(ValidationError, match="allowed prefixes"):
        ModelStore(wh.catalog, wh.root, storage_options={"token": "env:HOME"})
    store = ModelStore(
        wh.catalog,
        wh.root,
        storage_options={"skip_instance_cache": "env:OMNITABLE_TEST_MODEL_TOKEN"},
    )
    uri = f"memory://omnitable-models-{tmp_path.name}"
    rec = store.register("remote", "1", _file(tmp_path, "r", b"remote"), uri=uri)
    assert rec.path == f"{uri}/{rec.sha256}"
    assert Path(store.load("remote", "1")).read_bytes() == b"remote"  # downloaded, verified
    raw = wh.catalog.store.get_meta("model:remote:1")
    assert raw is not None and ModelRecord.from_json(raw) == rec
    assert secret not in raw and "OMNITABLE_TEST_MODEL_TOKEN" not in raw
    assert secret not in repr(store)
    monkeypatch.delenv("OMNITABLE_TEST_MODEL_TOKEN")
    with pytest.raises(ValidationError) as err:
        store.load("remote", "1")
    assert "OMNITABLE_TEST_MODEL_TOKEN" in str(err.value) and secret not in str(err.value)
