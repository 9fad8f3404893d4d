package io.omnitable.spark.catalog

import java.sql.SQLException

import io.omnitable.spark.TestWarehouses
import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.funsuite.AnyFunSuite

/** Kept read connections ([[ReadConnections]]) on the fixture's PostgreSQL catalog. */
class ReadConnectionsSuite extends AnyFunSuite {

  /** The fixture's PostgreSQL warehouse, with a parameter of its own so no other suite shares its connections. */
  private lazy val warehouse: String = {
    val pg = Option(TestWarehouses.manifest.get("postgres"))
    if (pg.isEmpty) {
      if (sys.env.get("OMNITABLE_REQUIRE_POSTGRES").contains("1")) fail("OMNITABLE_TEST_POSTGRES_URL is not set")
      cancel("PostgreSQL tests need OMNITABLE_TEST_POSTGRES_URL (see scripts/start-postgres.sh)")
    }
    val base = pg.get.get("warehouse").asText()
    base + (if (base.contains("?")) "&" else "?") + s"connectTimeout=${17 + (System.nanoTime() % 1000)}"
  }

  private def fresh(): CatalogReader = {
    val r = new CatalogReader(warehouse)
    ReadConnections.closeIdle(0L)
    r
  }

  private def backend(r: CatalogReader): Int =
    r.withConnection("the backend")(c => Jdbc.query(c, "SELECT pg_backend_pid()")(_.getInt(1)).head)

  private def terminate(r: CatalogReader, pid: Int): Unit = {
    val admin = JdbcConnector.openForWrite(r.address)
    try {
      val st = admin.prepareStatement("SELECT pg_terminate_backend(?)")
      st.setInt(1, pid)
      st.executeQuery().close()
      admin.commit()
    } finally admin.close()
  }

  test("reads in a row reuse one PostgreSQL connection, each in its own transaction") {
    val r = fresh()
    val first = backend(r)
    assert(ReadConnections.idleCount(r.address, r.env) == 1)
    assert(backend(r) == first)
    assert(r.listTables().contains("refs"))
    assert(backend(r) == first)
    // a commit made after the connection was kept is seen: the next read starts a new snapshot
    val ns = s"pool_${System.nanoTime()}"
    assert(r.createNamespace(ns, Map.empty))
    try {
      val (pid, seen) = r.withConnection("namespaces") { c =>
        (
          Jdbc.query(c, "SELECT pg_backend_pid()")(_.getInt(1)).head,
          Jdbc.query(c, "SELECT name FROM namespaces")(_.getString(1)))
      }
      assert(pid == first && seen.contains(ns))
    } finally assert(r.dropNamespace(ns) == CatalogReader.Dropped)
  }

  test("a kept connection the server closed is replaced, not reported") {
    val r = fresh()
    val first = backend(r)
    terminate(r, first)
    assert(r.listTables().contains("refs"))
    val second = backend(r)
    assert(second != first)
  }

  test("a read that failed gives back a connection that reads again") {
    val r = fresh()
    val first = backend(r)
    val e = intercept[OmniTableAnalysisException] {
      r.withConnection("a broken query")(c => Jdbc.query(c, "SELECT no_such_column FROM refs")(_.getInt(1)))
    }
    assert(e.getMessage.contains("no_such_column"))
    assert(backend(r) == first, "the aborted transaction was rolled back and the connection kept")
    assert(r.listTables().contains("refs"))
  }

  test("at most MaxIdlePerKey connections are kept; others are closed") {
    val r = fresh()
    val leases = (1 to ReadConnections.MaxIdlePerKey + 2).map(_ => ReadConnections.borrow(r.address, r.env))
    leases.foreach(_.release())
    assert(ReadConnections.idleCount(r.address, r.env) == ReadConnections.MaxIdlePerKey)
    assert(leases.count(_.connection.isClosed) == 2)
    ReadConnections.closeIdle(0L)
    assert(ReadConnections.idleCount(r.address, r.env) == 0)
    assert(leases.forall(_.connection.isClosed))
  }

  test("a connection whose transaction cannot end is closed, not kept") {
    val r = fresh()
    val lease = ReadConnections.borrow(r.address, r.env)
    val pid = Jdbc.query(Jdbc.Conn(lease.connection, r.queries), "SELECT pg_backend_pid()")(_.getInt(1)).head
    terminate(r, pid)
    intercept[SQLException](lease.connection.createStatement().executeQuery("SELECT 1"))
    lease.release()
    assert(lease.connection.isClosed)
    assert(ReadConnections.idleCount(r.address, r.env) == 0)
  }

  test("connections are kept per credentials: another password opens its own, a missing one still fails") {
    val r = fresh()
    backend(r)
    val wrongName = new CatalogReader(warehouse, _ => None)
    assert(intercept[OmniTableAnalysisException](wrongName.listTables()).getMessage.contains("environment variable"))
    val wrongPassword: JdbcConnector.Env = name =>
      if (name == JdbcConnector.EnvPrefixesVariable) r.env(name) else r.env(name).map(_ => "not-the-password")
    val wrong = new CatalogReader(warehouse, wrongPassword)
    val e = intercept[OmniTableAnalysisException](wrong.listTables())
    assert(e.getMessage.contains("password authentication failed"), e.getMessage)
    assert(ReadConnections.idleCount(r.address, r.env) == 1)
    assert(ReadConnections.idleCount(wrong.address, wrong.env) == 0)
  }

  test("SQLite connections are not kept") {
    val r = new CatalogReader(TestWarehouses.warehouse)
    val lease = ReadConnections.borrow(r.address, r.env)
    lease.release()
    assert(lease.connection.isClosed && !lease.reused)
    assert(ReadConnections.idleCount(r.address, r.env) == 0)
  }
}
