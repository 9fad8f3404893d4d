"""The durable work queue of a backfill plan: idempotent creation, leasing in step order, two
workers sharing a plan, a killed worker's item leased again, and a lease that expired while its
worker was committing (the chunk is committed exactly once); the commit paths on both engines
(Spark jobs, and the ``python`` engine's local worker)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import omt_queue_features as F
import pyarrow as pa
import pytest

import omnitable
from omnitable.catalog import queue as q
from omnitable.exec.queue import QueueOptions, join_queue, plan_id, run_queue
from omnitable.exec.runner import RunOptions

ROWS = [f" Row {i} " for i in range(16)]
ENGINES = pytest.mark.parametrize("engine", ["spark", "python"])


def _table(wh: omnitable.Warehouse, name: str = "docs") -> omnitable.Table:
    t = wh.create_table(name, {"text": "string"})
    t.append(pa.table({"text": ROWS}), "b1", target_fragment_rows=2)  # 8 fragments
    t.register(F.clean)
    t.register(F.n_chars)
    return t


def _backfills(t: omnitable.Table) -> list[Any]:
    return [c for c in t.history() if c.op == "backfill"]


def _check_done(t: omnitable.Table, with_chars: bool = True) -> None:
    cols = ["clean", "n_chars"] if with_chars else ["clean"]
    got = t.read(columns=cols).to_pydict()
    assert got["clean"] == [r.strip().lower() for r in ROWS]
    if with_chars:
        assert got["n_chars"] == [len(r.strip()) for r in ROWS]


def test_creation_is_idempotent_and_leases_follow_steps(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    opts = RunOptions(checkpoint_fragments=2)
    plans = [t.backfill(["n_chars"]) for _ in range(2)]
    ctx = plans[0].ctx
    assert plan_id(ctx, plans[0], opts) == plan_id(ctx, plans[1], opts)
    barrier = threading.Barrier(2)
    ids: list[str] = []

    def create(plan: Any) -> None:
        barrier.wait()
        ids.append(join_queue(ctx, plan, opts, None)[1])

    threads = [threading.Thread(target=create, args=(p,)) for p in plans]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(ids)) == 1
    store, tid, pid = ctx.catalog.store, ctx.record.table_id, ids[0]
    items = q.items(store, tid, pid)
    assert [(i.step, i.chunk) for i in items] == [(s, c) for s in (1, 2) for c in range(4)]
    assert sorted(f for i in items if i.step == 1 for f in i.fragments) == sorted(
        f.fragment_id for f in plans[0].steps[0].fragments
    )

    leased: list[q.Item] = []
    lock = threading.Lock()

    def lease(n: int) -> None:
        while True:
            got = q.lease_next(store, tid, pid, {"worker": n}, 30)
            if not isinstance(got, q.Item):
                return
            with lock:
                leased.append(got)

    threads = [threading.Thread(target=lease, args=(n,)) for n in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted((i.step, i.chunk) for i in leased) == [(1, c) for c in range(4)]  # once each
    assert isinstance(q.lease_next(store, tid, pid, {}, 30), q.Wait)  # step 2 waits for step 1
    for item in leased[:3]:
        assert q.settle(store, item, q.DONE)
    live = q.lease_next(store, tid, pid, {"worker": "late"}, 0.01)
    assert isinstance(live, q.Wait)  # the 4th is still leased by a live worker
    assert not q.settle(store, leased[0], q.DONE)  # not leased any more: refused
    short = leased[3]
    assert q.settle(store, short, q.PENDING)
    again = q.lease_next(store, tid, pid, {"worker": "late"}, 0.01)
    assert isinstance(again, q.Item) and again.chunk == short.chunk and again.attempts == 2
    time.sleep(0.05)  # its lease expires: leased once more
    third = q.lease_next(store, tid, pid, {"worker": "third"}, 30)
    assert isinstance(third, q.Item) and third.chunk == short.chunk and third.attempts == 3
    assert not q.heartbeat(store, again, 30)  # the expired owner lost it
    assert q.settle(store, third, q.DONE)
    nxt = q.lease_next(store, tid, pid, {}, 30)
    assert isinstance(nxt, q.Item) and nxt.step == 2


@pytest.mark.spark
@ENGINES
def test_two_workers_commit_every_item_once(
    wh: omnitable.Warehouse, spark: Any, engine: str
) -> None:
    t = _table(wh)
    results: list[Any] = []

    def worker() -> None:
        plan = t.backfill(["n_chars"], queue=True)
        results.append(plan.run(_spark(spark, engine), checkpoint_fragments=4, engine=engine))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 2
    assert _routes(results) == {_route(engine)}
    versions = [v for r in results for v in r.versions]
    assert len(versions) == len(set(versions)) == 4  # 2 items per step, each committed once
    assert sorted(versions) == sorted(c.version for c in _backfills(t))
    _check_done(t)
    assert t.backfill(["n_chars"]).is_empty
    tid = t._ctx.record.table_id
    headers = [k for k in _meta_keys(t) if k.startswith(f"queue:{tid}:")]  # header and items
    assert len(headers) == 1  # the finished header only: the items are removed
    assert '"finished"' in (t._ctx.catalog.store.get_meta(headers[0]) or "")


def _spark(spark: Any, engine: str) -> Any:
    """The session a run on ``engine`` gets: the python engine's runs here log no failed
    record, so they must not make one."""
    return spark if engine == "spark" else _no_spark


def _no_spark() -> Any:
    raise AssertionError("the python engine started Spark")


def _route(engine: str) -> str:
    return "python-local" if engine == "python" else "python-cpu"


def _routes(results: list[Any]) -> set[str]:
    return {r for res in results for s in res.steps for r in s.routes.values()}


def _meta_keys(t: omnitable.Table) -> list[str]:
    from sqlalchemy import text

    with t._ctx.catalog.store.read() as conn:
        return [str(k) for (k,) in conn.execute(text("SELECT key FROM omnitable_meta"))]


@pytest.mark.spark
@ENGINES
def test_lease_expired_while_committing_commits_once(
    wh: omnitable.Warehouse,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
) -> None:
    t = _table(wh)
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"backfill.before_commit=pause:{tmp_path}")
    opts = RunOptions(checkpoint_fragments=4, engine=engine)  # 2 items
    stalled: dict[str, Any] = {}

    def first() -> None:  # stalls before its commit, its lease runs out (no heartbeats)
        plan = t.backfill(["clean"])
        stalled["result"] = run_queue(
            plan.ctx,
            plan,
            _spark(spark, engine),
            opts,
            None,
            QueueOptions(lease_s=1, heartbeat_s=3600),
        )

    th = threading.Thread(target=first)
    th.start()
    reached = tmp_path / "backfill.before_commit.reached"
    deadline = time.time() + 120
    while not reached.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert reached.exists()
    time.sleep(1.2)
    plan = t.backfill(["clean"])
    second = run_queue(plan.ctx, plan, _spark(spark, engine), opts, None, QueueOptions(lease_s=30))
    (tmp_path / "backfill.before_commit.go").touch()
    th.join(120)
    assert len(second.versions) == 2  # took the expired item, then the other one
    assert _routes([second]) == {_route(engine)}
    loser = stalled["result"]
    assert loser.versions == []
    assert any("another worker took it" in w for w in loser.warnings)
    assert len(_backfills(t)) == 2  # exactly one version holds each chunk's files
    _check_done(t, with_chars=False)


SCRIPT = textwrap.dedent("""
    import sys, omnitable
    wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
    spark = lambda: omnitable.spark_session(wh, master="local[1]", **{
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    wh.table("docs").backfill(["clean"], queue=True).run(
        spark, checkpoint_fragments=2, lease_s=2, engine=sys.argv[3])
    print("finished", flush=True)
""")


@pytest.mark.spark
@ENGINES
def test_killed_worker_item_is_leased_again(
    wh: omnitable.Warehouse,
    catalog_spec: tuple[str, str | None],
    spark: Any,
    tmp_path: Path,
    engine: str,
) -> None:
    t = _table(wh)
    uri, root = catalog_spec
    env = dict(os.environ, OMNITABLE_FAILPOINTS="backfill.before_commit=sleep:300",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, uri, root or "", engine],
                                env=env, stdout=err, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.time() + 240
        while "before_commit: sleeping" not in log.read_text() and time.time() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    ctx = t._ctx
    [header] = [k for k in _meta_keys(t) if k.startswith("queue:") and k.count(":") == 2]
    held = [i for i in q.items(ctx.catalog.store, ctx.record.table_id, header.split(":")[2])
            if i.state == q.LEASED]  # fmt: skip
    assert len(held) == 1 and held[0].owner["pid"] == proc.pid
    result = t.backfill(["clean"], queue=True).run(
        _spark(spark, engine), checkpoint_fragments=2, engine=engine
    )
    assert len(result.versions) == 4  # every item, the dead worker's one after its lease expired
    assert _routes([result]) == {_route(engine)}
    assert len(_backfills(t)) == 4
    _check_done(t, with_chars=False)


def test_arguments_are_validated(wh: omnitable.Warehouse, tmp_path: Path) -> None:
    from omnitable.cli.main import main
    from omnitable.exceptions import ValidationError

    t = _table(wh)
    with pytest.raises(ValidationError, match="queue must be True or False"):
        t.backfill(["clean"]).run(queue="yes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="lease_s applies only with queue=True"):
        t.backfill(["clean"]).run(lease_s=5)
    with pytest.raises(ValidationError, match="lease_s must be > 0"):
        QueueOptions(lease_s=0)
    base = ["backfill", "docs", "-f", "clean"]
    assert main([*base, "--workers", "0"]) == 2
    assert main([*base, "--workers", "2", "--queue"]) == 2
    assert main([*base, "--lease", "5"]) == 2
    assert main([*base, "--queue", "--lease", "0"]) == 2
    assert main([*base, "--conf", "spark.driver.memory"]) == 2  # no value
    assert main([*base, "--conf", "remote=sc://x"]) == 2  # not a Spark setting
    assert main([*base, "--conf", "spark.=1"]) == 2


def test_workers_get_the_commands_settings_and_lean_jvms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``--workers`` passes on to each worker (the workers themselves: the test below)."""
    import omnitable.cli.workers as cli_workers
    from omnitable.cli.main import main

    with omnitable.connect(str(tmp_path / "wh")) as wh:
        _table(wh)
    seen: list[list[str]] = []
    monkeypatch.setattr(cli_workers, "run_workers", lambda *a: seen.append(a[4]))
    base = ["-w", str(tmp_path / "wh"), "backfill", "docs", "-f", "clean", "--workers", "2"]
    base += ["--tuning", "off"]
    assert main([*base, "--conf", "spark.sql.shuffle.partitions=3"]) == 0
    lean = f"spark.driver.extraJavaOptions={cli_workers.WORKER_JAVA_OPTIONS}"
    assert _pairs(seen[0]) >= {("--tuning", "off"), ("--conf", lean),
                               ("--conf", "spark.sql.shuffle.partitions=3")}  # fmt: skip
    own = "spark.driver.extraJavaOptions=-XX:+UseG1GC"  # with ours, two collectors: refused
    assert main([*base, "--conf", own]) == 0
    assert ("--conf", own) in _pairs(seen[1]) and ("--conf", lean) not in _pairs(seen[1])
    empty = "spark.driver.extraJavaOptions="  # the JVM's own defaults
    assert main([*base, "--conf", empty]) == 0
    assert ("--conf", empty) in _pairs(seen[2]) and ("--conf", lean) not in _pairs(seen[2])


def test_worker_jvm_options_keep_a_collector_chosen_in_the_environment() -> None:
    from omnitable.cli.workers import DRIVER_JAVA_OPTIONS, WORKER_JAVA_OPTIONS, worker_conf

    assert worker_conf({}, env={}) == {DRIVER_JAVA_OPTIONS: WORKER_JAVA_OPTIONS}
    for var in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        got = worker_conf({"spark.x": "1"}, env={var: "-Xss4m -XX:+UseG1GC"})
        assert got == {DRIVER_JAVA_OPTIONS: "-XX:TieredStopAtLevel=1", "spark.x": "1"}
    other = worker_conf({}, env={"JAVA_TOOL_OPTIONS": "-XX:+UseGCOverheadLimit"})
    assert other == {DRIVER_JAVA_OPTIONS: WORKER_JAVA_OPTIONS}  # not a collector


def test_a_worker_that_found_nothing_left_prints_no_run() -> None:
    from omnitable.cli.workers import worker_runs

    outputs = ['{"run": {"run_id": "r1", "versions": [3]}}', '{"plan": "nothing", "ran": false}']
    assert worker_runs(outputs) == [{"run_id": "r1", "versions": [3]}]


def _pairs(args: list[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(args))


def _java_commands(marker: str, proc: subprocess.Popen[bytes]) -> dict[int, str]:
    """The command lines of the Spark driver JVMs naming ``marker`` while ``proc`` runs (not
    the launcher JVMs that build their commands, nor a JVM's child caught between its fork and
    its exec, which still shows the JVM's command line)."""
    seen: dict[int, tuple[int, str]] = {}
    while proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            program, args = argv[0].decode(errors="replace"), b" ".join(argv[1:])
            cmd = args.decode(errors="replace")
            # a driver JVM: spark-class's bash execs it; the launcher JVM before it only builds
            # its command (org.apache.spark.launcher.Main)
            if marker in cmd and program.endswith("java") and "launcher.Main" not in cmd:
                parent = int(stat.rsplit(")", 1)[1].split()[1])  # after the name: state, ppid
                seen[int(pid)] = (parent, f"{program} {cmd}")
        time.sleep(0.05)
    return {pid: cmd for pid, (parent, cmd) in seen.items() if parent not in seen}


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_worker_processes_run_lean_jvms_with_the_settings(tmp_path: Path) -> None:
    """``--workers 2``: two worker JVMs, each with the command's ``--conf`` and the lean JVM
    options; every item committed once."""
    root = tmp_path / "wh"
    marker = f"spark.omnitable.test.marker={uuid.uuid4().hex}"  # this run's JVMs, no other's
    with omnitable.connect(str(root)) as wh:
        t = _table(wh)
        cmd = [sys.executable, "-c", "import sys; from omnitable.cli.main import main; "
               "sys.exit(main(sys.argv[1:]))", "-w", str(root), "backfill", "docs", "-f",
               "clean", "--workers", "2", "--checkpoint", "2", "--conf",
               "spark.ui.enabled=false", "--conf", marker]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        err = tmp_path / "workers.err"
        with err.open("wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=out)
            jvms = _java_commands(marker, proc)
        assert proc.wait() == 0, err.read_text()[-3000:]
        # one JVM per worker; a worker that planned after the other had done every item (a
        # loaded machine) starts none
        assert len(jvms) in (1, 2), jvms
        for cmdline in jvms.values():  # the JVM's own options, before its main class
            options = cmdline.split("org.apache.spark.deploy.SparkSubmit")[0].split()
            assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(options), cmdline
            assert "spark.ui.enabled=false" in cmdline
        assert len(_backfills(t)) == 4  # 8 fragments, checkpoints of 2: each item once
        _check_done(t, with_chars=False)


def test_failed_item_stops_the_plan_and_a_rerun_starts_anew(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    opts = RunOptions(checkpoint_fragments=4)
    plan = t.backfill(["clean"])
    ctx, pid = plan.ctx, join_queue(plan.ctx, plan, opts, None)[1]
    store, tid = ctx.catalog.store, ctx.record.table_id
    item = q.lease_next(store, tid, pid, {"worker": 1}, 30)
    assert isinstance(item, q.Item)
    assert q.settle(store, item, q.FAILED, "ErrorRatioExceeded: too many")
    got = q.lease_next(store, tid, pid, {"worker": 2}, 30)
    assert isinstance(got, q.Failed) and "ErrorRatioExceeded: too many" in got.error
    assert join_queue(ctx, t.backfill(["clean"]), opts, None)[1] == pid  # same plan: replaced
    fresh = q.items(store, tid, pid)
    assert [(i.state, i.attempts) for i in fresh] == [(q.PENDING, 0)] * 2
    assert isinstance(q.lease_next(store, tid, pid, {"worker": 2}, 30), q.Item)


@pytest.mark.spark
def test_queue_worker_tunes_from_history_and_reports_events(
    wh: omnitable.Warehouse, spark: Any
) -> None:
    from omnitable.observability import ProgressEvent

    t = _table(wh)
    t.backfill(["clean"]).run(spark)  # a plain run: the history the queue worker tunes from
    t.append(pa.table({"text": ROWS}), "b2", target_fragment_rows=2)
    plan = t.backfill(["clean"], queue=True)
    assert "batch_rows=" in plan.explain(spark) and "(history)" in plan.explain(spark)
    events: list[ProgressEvent] = []
    result = plan.run(spark, checkpoint_fragments=2, progress=events.append)
    (step,) = result.steps
    assert {k: v["source"] for k, v in step.settings.items()} == dict.fromkeys(
        ("batch_rows", "fragments_per_task", "memory_mb"), "history"
    )
    assert step.routes == {"clean@1": "python-cpu"}
    recorded = wh.catalog.get_run(result.run_id)["metrics"]
    assert recorded["steps"][0]["settings"] == step.settings  # shown where plain runs show it
    assert recorded["cluster"]["parallelism"] == 2
    assert [e.fragments_done for e in events] == [2, 4, 6, 8]  # one event per item
    assert events[-1].run_rows_done == events[-1].run_rows_total == len(ROWS)
    assert events[-1].eta_s == 0.0 and events[-1].table == "docs"
    got = t.read(columns=["clean"], batches=["b2"]).column("clean").to_pylist()
    assert got == [r.strip().lower() for r in ROWS]
    t.append(pa.table({"text": ROWS}), "b3", target_fragment_rows=2)
    legacy: list[tuple[int, int, int, int]] = []
    t.backfill(["clean"], queue=True).run(
        spark, checkpoint_fragments=4, progress=lambda *a: legacy.append(a)
    )
    assert legacy == [(1, 1, 1, 2), (1, 1, 2, 2)]  # four arguments: items done of all
    with pytest.raises(omnitable.ValidationError, match="progress must be"):
        t.backfill(["n_chars"], queue=True).run(spark, progress=lambda a, b: None)


def _race(t: omnitable.Table, kind: str) -> None:
    """One concurrent write of ``kind`` to ``t`` (from another thread: the queue item is
    current in the worker's thread only)."""
    from omnitable import ROW_ID

    ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    if kind == "append":
        t.append(pa.table({"text": ROWS}), "b2", target_fragment_rows=2)
    elif kind == "add_columns":
        t.add_columns(pa.table({ROW_ID: ids, "extra": list(range(len(ids)))}))
    elif kind == "update":
        t.update(pa.table({ROW_ID: ids, "text": [f" New {i} " for i in range(len(ids))]}))
    elif kind == "delete":
        t.delete(ids=ids[:1])
    else:
        assert t.maintain(["compact"])[0].version is not None


@pytest.mark.spark
@ENGINES
@pytest.mark.parametrize("kind", ["append", "add_columns", "update", "delete", "compact"])
def test_item_racing_a_writer_commits_or_is_leased_again(
    wh: omnitable.Warehouse, spark: Any, kind: str, engine: str
) -> None:
    from omnitable._failpoints import hooked
    from omnitable.exceptions import CommitConflict

    t = _table(wh)

    def write() -> None:  # when the first item is computed, before its commit
        th = threading.Thread(target=_race, args=(t, kind))
        th.start()
        th.join()

    plan = t.backfill(["clean"], queue=True)
    with hooked("backfill.before_commit", write):
        if kind == "compact":  # the plan's fragments are gone: the item fails after 3 leases
            with pytest.raises(CommitConflict):
                plan.run(_spark(spark, engine), checkpoint_fragments=2, engine=engine)
            result = t.backfill(["clean"], queue=True).run(
                _spark(spark, engine), checkpoint_fragments=2, engine=engine
            )
        else:
            result = plan.run(_spark(spark, engine), checkpoint_fragments=2, engine=engine)
    backfills = _backfills(t)
    assert _routes([result]) == {_route(engine)}
    assert sorted(result.versions) == sorted(c.version for c in backfills)  # each item once
    given_back = [w for w in result.warnings if "conflicted" in w]
    assert len(given_back) == (1 if kind == "update" else 0)
    got = t.read(columns=["text", "clean"], batches=["b1"]).to_pydict()
    assert got["clean"] == [x.strip().lower() for x in got["text"]]  # from the head's inputs
    assert len(got["text"]) == (15 if kind == "delete" else 16)
    if kind == "update":
        assert got["clean"] == [f"new {i}" for i in range(16)]
    if kind == "append":  # planned before the append: b2 is left to the next plan
        assert [f.batch_name for s in t.backfill(["clean"]).steps for f in s.fragments] == [
            "b2"
        ] * 8
    if kind == "add_columns":
        assert t.read(columns=["extra"]).column("extra").to_pylist() == list(range(16))
