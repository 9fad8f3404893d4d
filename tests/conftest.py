"""Shared fixtures: warehouses on SQLite and PostgreSQL catalogs, and a local Spark session.

PostgreSQL tests need ``OMNITABLE_TEST_POSTGRES_URL`` (``scripts/start-postgres.sh`` prints one);
without it they are skipped, unless ``OMNITABLE_REQUIRE_POSTGRES=1`` (CI), where they fail.

Worker processes (``./dev test``: ``pytest -n 2 --dist loadfile``): a module's tests run in one
worker (its module-scoped fixtures start once), except in the modules of ``SPREAD_MODULES``,
whose tests are handed out one by one, and the modules of ``LONG_MODULES`` go first
(``pytest_xdist_make_scheduler``).

A module whose tests each use tables of their own names is marked ``shared_warehouse``
(``pytestmark = pytest.mark.shared_warehouse``): ``catalog_spec`` and ``wh`` then give its tests
one warehouse per backend for the module (per worker) instead of a catalog per test.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import omnitable
from jvm_watch import JvmWatch, output_to
from omnitable.catalog.address import parse_address

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PG_ENV = "OMNITABLE_TEST_POSTGRES_URL"
# Spark jars only the tests use (`scripts/fetch-jars.sh --test`, run by ./dev test and pytest)
TEST_JARS = Path(__file__).parent / "jars"


def find_test_jar(prefix: str) -> Path | None:
    """The test jar whose file name starts with ``prefix``, or None when it was not fetched."""
    found = sorted(TEST_JARS.glob(f"{prefix}*.jar"))
    return found[-1] if found else None


# Large modules of independent tests (function-scoped fixtures only): with all their tests in one
# worker they would keep it busy for most of the run.
SPREAD_MODULES = frozenset({
    "tests/catalog/test_commit_races.py",
    "tests/conformance/test_conformance.py",
})  # fmt: skip

# Modules that take minutes in one worker (one long child process): handed out first, so that
# the other worker's many short modules fill the time instead of leaving one worker idle at the
# end (xdist hands out the modules with the most tests first, these have few).
LONG_MODULES = (
    "tests/test_benchmarks.py",  # every benchmark in one child process
    "tests/exec/test_crash_escalation.py",  # crashing backfills in a child process
    "tests/connect/test_connect_session.py",  # a child pytest on a Spark Connect server
    "tests/spark/test_spark_credentials.py",  # a child Spark application
    "tests/features/test_backfill_restart.py",  # killed backfills in child processes
    "tests/spark/test_spark_local_cluster.py",  # a local-cluster Spark
    "tests/features/test_spark_submit_example.py",  # two spark-submit jobs
)  # fmt: skip


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but the tests of ``SPREAD_MODULES`` go to any worker one by one (after
    the whole modules: xdist hands out the largest units first). (``--dist loadgroup`` cannot do
    this: xdist 3.8 marks a group in ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadingLoadFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module in SPREAD_MODULES else module

        def _assign_work_unit(self, node: Any) -> None:
            if not getattr(self, "_long_first", False):  # the first hand-out: LONG_MODULES first
                self._long_first = True
                for scope in reversed([s for s in self.workqueue if s in LONG_MODULES]):
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SpreadingLoadFileScheduling(config, log)


def postgres_base_url() -> str | None:
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("OMNITABLE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{PG_ENV} is not set but OMNITABLE_REQUIRE_POSTGRES=1")
        pytest.skip(f"PostgreSQL tests need {PG_ENV} (see scripts/start-postgres.sh)")
    return url


_DROP_LANES = 4


class PostgresDatabases:
    """Creates throw-away databases on the test server."""

    def __init__(self, base_url: str) -> None:
        self.base = parse_address(base_url)
        self.created: list[str] = []

    def _admin(self):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(**self.base.connect_params(), autocommit=True)

    def create(self) -> str:
        name = f"omt_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.base.url.set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        """Drop every database this session created, on a few connections at once (hundreds of
        one-by-one drops took minutes at the end of a session)."""
        from concurrent.futures import ThreadPoolExecutor

        def drop(names: list[str]) -> None:
            with self._admin() as conn:
                for name in names:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        lanes = [self.created[i::_DROP_LANES] for i in range(_DROP_LANES)]
        with ThreadPoolExecutor(_DROP_LANES) as pool:
            list(pool.map(drop, [lane for lane in lanes if lane]))
        self.created.clear()


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[PostgresDatabases]:
    url = postgres_base_url()
    assert url is not None
    dbs = PostgresDatabases(url)
    yield dbs
    dbs.drop_all()


SHARED_WAREHOUSE = "shared_warehouse"


class SharedWarehouses:
    """The warehouses of a module marked ``shared_warehouse``: one per catalog backend, made when
    a test first asks for it and closed with the module."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.specs: dict[str, tuple[str, str | None]] = {}
        self.open: dict[str, omnitable.Warehouse] = {}

    def spec(self, backend: str, dbs: PostgresDatabases | None) -> tuple[str, str | None]:
        if backend not in self.specs:
            tmp = self.tmp_path_factory.mktemp(f"shared-wh-{backend}")
            if dbs is None:
                self.specs[backend] = str(tmp / "wh"), None
            else:
                self.specs[backend] = dbs.create(), str(tmp / "data")
        return self.specs[backend]

    def warehouse(self, spec: tuple[str, str | None]) -> omnitable.Warehouse:
        uri, root = spec
        if uri not in self.open:
            self.open[uri] = omnitable.connect(uri, root=root)
        return self.open[uri]

    def close(self) -> None:
        for warehouse in self.open.values():
            warehouse.close()
        self.open.clear()


@pytest.fixture(scope="module")
def shared_warehouses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedWarehouses]:
    shared = SharedWarehouses(tmp_path_factory)
    yield shared
    shared.close()


def _shares_warehouse(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(SHARED_WAREHOUSE) is not None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """(warehouse uri, data root) on each catalog backend: a catalog of the test's own, or, in a
    module marked ``shared_warehouse`` (``pytestmark = pytest.mark.shared_warehouse``: its tests
    each use tables of their own names), one catalog per backend for the whole module (a
    PostgreSQL database costs more than most tests)."""
    dbs = request.getfixturevalue("pg_databases") if request.param == "postgres" else None
    if _shares_warehouse(request):
        shared: SharedWarehouses = request.getfixturevalue("shared_warehouses")
        return shared.spec(request.param, dbs)
    if dbs is None:
        return str(tmp_path / "wh"), None
    return dbs.create(), str(tmp_path / "data")


@pytest.fixture
def wh(
    request: pytest.FixtureRequest, catalog_spec: tuple[str, str | None]
) -> Iterator[omnitable.Warehouse]:
    """A warehouse on ``catalog_spec``: the module's, open for the module, when it shares one."""
    if _shares_warehouse(request):
        shared: SharedWarehouses = request.getfixturevalue("shared_warehouses")
        yield shared.warehouse(catalog_spec)
        return
    uri, root = catalog_spec
    warehouse = omnitable.connect(uri, root=root)
    yield warehouse
    warehouse.close()


_JVM_WATCH: list[JvmWatch] = []  # the shared session's JVM, once ``spark`` started it


@pytest.fixture(autouse=True)
def _spark_jvm_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that needs the shared session fails at once, and clearly, when its JVM has died;
    the test during which it died fails at teardown (tests/jvm_watch.py)."""
    if _JVM_WATCH and "spark" in request.fixturenames:
        _JVM_WATCH[0].check(request.node.nodeid)
    yield
    if _JVM_WATCH and _JVM_WATCH[0].died is None:
        _JVM_WATCH[0].check(request.node.nodeid)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One local[2] SparkSession with the OmniTable jar for the whole test process; the JVM's
    output goes to a file, and its death fails the tests clearly (tests/jvm_watch.py)."""
    # The PostgreSQL test server is part of the application's static configuration: the JVM
    # resolves an env: password of a read option only for such a server (any database on it).
    pg = os.environ.get(PG_ENV)
    iceberg = find_test_jar("iceberg-spark-runtime")  # Spark reads the Iceberg exports with it
    logs = tmp_path_factory.mktemp("spark-jvm")
    with output_to(logs / "jvm.log"):
        session = _shared_session(tmp_path_factory, pg, iceberg, logs)
    watch = JvmWatch(session.sparkContext._gateway.proc, logs / "jvm.log", logs)
    _JVM_WATCH.append(watch)
    yield session
    _JVM_WATCH.clear()
    if watch.proc.poll() is None:  # a dead JVM failed its tests already
        session.stop()


def _shared_session(  # type: ignore[no-untyped-def]
    tmp_path_factory: pytest.TempPathFactory, pg: str | None, iceberg: Path | None, logs: Path
):
    return omnitable.spark_session(
        tmp_path_factory.mktemp("spark-default-wh"),
        master="local[2,4]",  # 4 attempts per task, as on a cluster (crash escalation needs retries)
        **({"spark.omnitable.warehouses.test_postgres": pg} if pg else {}),
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "1g",
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.databricks.delta.snapshotPartitions": "2",
            # a model store's env: storage option resolved in the Python workers (tests/models)
            "spark.executorEnv.OMNITABLE_TEST_WORKER_OPTION": "true",
            "spark.driver.extraJavaOptions": f"-XX:ErrorFile={logs}/hs_err_%p.log",
            **({"spark.jars": str(iceberg)} if iceberg else {}),
        },
    )


Race = Callable[[str, Callable[[], Any], Callable[[], Any]], dict[str, Any]]


@pytest.fixture
def race(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Race:
    """``race(point, first, second)``: run ``first`` in a thread until it reaches failpoint
    ``point`` (e.g. just before its commit), then ``second`` to the end, then let ``first`` go on.
    Returns ``first``'s outcome ({"version": result} or {"error": exception})."""

    def run(point: str, first: Callable[[], Any], second: Callable[[], Any]) -> dict[str, Any]:
        gate = tmp_path / f"gate-{uuid.uuid4().hex[:8]}"
        gate.mkdir(parents=True)
        monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"{point}=pause:{gate}")
        out: dict[str, Any] = {}

        def go() -> None:
            try:
                out["version"] = first()
            except Exception as exc:
                out["error"] = exc

        thread = threading.Thread(target=go)
        thread.start()
        deadline = time.monotonic() + 120
        while not (gate / f"{point}.reached").exists():
            assert thread.is_alive(), out
            assert time.monotonic() < deadline, f"the first writer never reached {point}"
            time.sleep(0.02)
        second()
        (gate / f"{point}.go").touch()
        thread.join(120)
        monkeypatch.delenv("OMNITABLE_FAILPOINTS")
        return out

    return run


PausedCall = Callable[[Any, str, str], tuple[threading.Thread, dict[str, Any]]]


@pytest.fixture
def pause_call(tmp_path: Path) -> Iterator[PausedCall]:
    """``pause_call(spark, sql, point)``: run Spark SQL ``sql`` in a thread with the JVM paused at
    failpoint ``point`` (session setting ``spark.omnitable.test.failpoint``); returns when it is
    there, with the thread and its outcome ({"row": first row as a dict} or {"error": message}).
    Release it with ``(tmp_path / f"{point}.go").touch()``; the setting is unset at teardown."""
    sessions: list[Any] = []

    def start(spark: Any, sql: str, point: str) -> tuple[threading.Thread, dict[str, Any]]:
        sessions.append(spark)
        spark.conf.set("spark.omnitable.test.failpoint", f"{point}=pause:{tmp_path}")
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                out["row"] = next(r.asDict(recursive=True) for r in spark.sql(sql).collect())
            except Exception as exc:  # reported to the test
                out["error"] = str(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 120
        while not (tmp_path / f"{point}.reached").exists():
            assert thread.is_alive(), out
            assert time.monotonic() < deadline, "the CALL never reached its failpoint"
            time.sleep(0.02)
        return thread, out

    yield start
    for spark in sessions:
        spark.conf.unset("spark.omnitable.test.failpoint")


_M64 = (1 << 64) - 1


def _unmix(h: int) -> int:
    """The inverse of the 64-bit mix that hashes integer key values (pandas' ``hash_array``
    of an int64: a splitmix64 finalizer, a bijection)."""

    def unshift(x: int, s: int) -> int:  # inverse of x ^= x >> s
        out = x
        for _ in range(64 // s):
            out = x ^ (out >> s)
        return out & _M64

    h = unshift(h, 31)
    h = (h * pow(0x94D049BB133111EB, -1, 1 << 64)) & _M64
    h = unshift(h, 27)
    h = (h * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & _M64
    return unshift(h, 30)


def _colliding_key(a1: int, b1: int, a2: int) -> int:
    """A ``b2`` for which the key (a2, b2) of two bigint columns has the hash of (a1, b1)."""
    import numpy as np
    from pandas.util import hash_array

    from omnitable.vocabulary.keys import _FOLD

    def h(v: int) -> int:
        return int(hash_array(np.array([v], dtype=np.int64))[0])

    fold = int(_FOLD)
    target = ((h(a1) * fold) & _M64) ^ h(b1) ^ ((h(a2) * fold) & _M64)
    b2 = _unmix(target)
    return b2 - (1 << 64) if b2 >= 1 << 63 else b2


@pytest.fixture
def colliding_key() -> Callable[[int, int, int], int]:
    """``f(a1, b1, a2)``: a ``b2`` such that the keys (a1, b1) and (a2, b2) of two bigint
    columns share their 64-bit key hash (omnitable.vocabulary.keys), built on purpose."""
    return _colliding_key
