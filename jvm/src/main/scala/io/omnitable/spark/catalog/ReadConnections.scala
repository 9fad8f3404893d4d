package io.omnitable.spark.catalog

import java.sql.{Connection, SQLException}
import java.util.concurrent.{Executors, ScheduledExecutorService, ThreadFactory, TimeUnit}

import scala.collection.mutable
import scala.util.control.NonFatal

/**
 * Idle read-only PostgreSQL connections kept for reuse, per server, database and credentials.
 * Opening one costs a TCP connection, usually a TLS handshake and a SCRAM authentication: 20-40 ms
 * of the driver's time, more than the statements of a one-batch plan (docs/spark.md, "Catalog
 * connections"). A connection comes back only after its read transaction was rolled back without error;
 * a connection idle for [[IdleSeconds]] is closed, and a reused one is checked (`isValid`, one
 * round trip) before it is lent again, so a server restart costs a new connection, not an error.
 * SQLite connections are not kept: opening one is a file open.
 */
private[catalog] object ReadConnections {

  /** Idle connections kept per key (a driver planning in parallel opens more; the extra close). */
  val MaxIdlePerKey = 4

  /** An idle connection older than this is closed. */
  val IdleSeconds = 60L

  private val ValidTimeoutSeconds = 5

  /** A connection lent to one reader, for one read transaction. */
  final class Lease private[ReadConnections] (val connection: Connection, val reused: Boolean, key: Option[Key]) {
    private var done = false

    /** Ends the read transaction; the connection is kept if that succeeded, closed otherwise. */
    def release(): Unit = if (!done) {
      done = true
      val clean = try {
        connection.rollback()
        !connection.isClosed
      } catch { case NonFatal(_) => false }
      key match {
        case Some(k) if clean => keep(k, connection)
        case _ => closeQuietly(connection)
      }
    }
  }

  private final case class Key(url: String, user: Option[String], password: Option[String])
  private final case class Idle(connection: Connection, since: Long)

  private val idle = mutable.HashMap.empty[Key, List[Idle]]
  private lazy val sweeper: ScheduledExecutorService = {
    val s = Executors.newSingleThreadScheduledExecutor(new ThreadFactory {
      def newThread(r: Runnable): Thread = {
        val t = new Thread(r, "omnitable-catalog-connections")
        t.setDaemon(true)
        t
      }
    })
    s.scheduleWithFixedDelay(() => closeIdle(IdleSeconds * 1000L), IdleSeconds, IdleSeconds / 2, TimeUnit.SECONDS)
    sys.addShutdownHook(closeIdle(0L))
    s
  }

  /**
   * A read-only connection to `address` in a fresh read transaction: a kept one (checked) or a
   * new one. The caller calls `release` once, whatever happened.
   */
  def borrow(address: CatalogAddress, env: JdbcConnector.Env): Lease = address match {
    case a: PostgresAddress =>
      val k = key(a, env)
      takeValid(k) match {
        case Some(c) => new Lease(c, reused = true, Some(k))
        case None => new Lease(JdbcConnector.open(address, env), reused = false, Some(k))
      }
    case _ => new Lease(JdbcConnector.open(address, env), reused = false, None)
  }

  private def key(a: PostgresAddress, env: JdbcConnector.Env): Key = {
    val props = JdbcConnector.postgresProperties(a, env, write = false)
    Key(a.jdbcUrl, Option(props.getProperty("user")), Option(props.getProperty("password")))
  }

  /** How many idle connections to `address` (with the credentials `env` gives) are kept now. */
  def idleCount(address: CatalogAddress, env: JdbcConnector.Env): Int = address match {
    case a: PostgresAddress => synchronized(idle.get(key(a, env)).fold(0)(_.size))
    case _ => 0
  }

  /** Closes every idle connection idle for at least `olderThanMillis` (0: all). */
  def closeIdle(olderThanMillis: Long): Unit = {
    val now = System.currentTimeMillis()
    val expired = synchronized {
      val out = mutable.ArrayBuffer.empty[Connection]
      idle.keys.toList.foreach { k =>
        val (old, young) = idle(k).partition(i => now - i.since >= olderThanMillis)
        out ++= old.map(_.connection)
        if (young.isEmpty) idle.remove(k) else idle(k) = young
      }
      out.toList
    }
    expired.foreach(closeQuietly)
  }

  /** The most recently kept connection of `key` that still answers, closing those that do not. */
  @annotation.tailrec
  private def takeValid(key: Key): Option[Connection] = take(key) match {
    case None => None
    case Some(c) =>
      val valid = try c.isValid(ValidTimeoutSeconds)
      catch { case _: SQLException => false }
      if (valid) Some(c)
      else {
        closeQuietly(c)
        takeValid(key)
      }
  }

  private def take(key: Key): Option[Connection] = synchronized {
    idle.get(key) match {
      case Some(first :: rest) =>
        if (rest.isEmpty) idle.remove(key) else idle(key) = rest
        Some(first.connection)
      case _ => None
    }
  }

  private def keep(key: Key, c: Connection): Unit = {
    sweeper // started by the first connection kept
    val kept = synchronized {
      val list = idle.getOrElse(key, Nil)
      if (list.size >= MaxIdlePerKey) false
      else {
        idle(key) = Idle(c, System.currentTimeMillis()) :: list
        true
      }
    }
    if (!kept) closeQuietly(c)
  }

  private def closeQuietly(c: Connection): Unit =
    try c.close()
    catch { case NonFatal(_) => }
}
