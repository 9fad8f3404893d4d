package io.omnitable.spark.catalog

import java.sql.{Connection, SQLException}
import java.util.Properties

import io.omnitable.spark.errors.OmniTableErrors

/**
 * Opens JDBC connections to a catalog (read-only, and write transactions for the committer). Drivers are instantiated directly rather than
 * looked up through `DriverManager`, which cannot see drivers that Spark loaded from
 * `spark.jars` (a child class loader), and which would be fooled by relocated (shaded) drivers.
 */
object JdbcConnector {

  /** Environment lookup; a function so tests can substitute it. */
  type Env = String => Option[String]
  val systemEnv: Env = name => Option(System.getenv(name))

  /** Variable holding the comma list of prefixes an `env:NAME` password may name (as in Python). */
  val EnvPrefixesVariable = "OMNITABLE_ENV_PREFIXES"
  val DefaultEnvPrefixes: Seq[String] = Seq("OMNITABLE_", "PG")

  /** Prefixes an `env:NAME` password's variable must start with: `OMNITABLE_ENV_PREFIXES` or the default. */
  def allowedEnvPrefixes(env: Env): Seq[String] =
    env(EnvPrefixesVariable).map(_.split(',').map(_.trim).filter(_.nonEmpty).toSeq).getOrElse(DefaultEnvPrefixes)

  /** The value of the `env:NAME` password `name`, if its name is allowed and it is set. */
  def envPassword(display: String, name: String, env: Env): String = {
    val prefixes = allowedEnvPrefixes(env)
    if (!prefixes.exists(p => name.startsWith(p))) {
      throw OmniTableErrors.envVariableNotAllowed(display, name, prefixes, EnvPrefixesVariable)
    }
    env(name).getOrElse(throw OmniTableErrors.missingEnvVariable(display, name))
  }

  /**
   * A connection in a read-only transaction with a consistent view of the catalog (SQLite WAL
   * read transaction / PostgreSQL REPEATABLE READ), so a snapshot is never resolved across a
   * concurrent commit. The caller closes it.
   */
  def open(address: CatalogAddress, env: Env = systemEnv): Connection = address match {
    case a: SqliteAddress => openSqlite(a)
    case a: PostgresAddress => openPostgres(a, env)
  }

  /**
   * A connection for one write transaction: the JVM committer ([[CatalogWriter]]) and namespace
   * rows (docs/catalog.md, "Namespaces"). SQLite takes the database write lock when the
   * transaction begins (`BEGIN IMMEDIATE`, as the Python writers do); PostgreSQL runs READ
   * COMMITTED and serializes per table with `SELECT … FOR UPDATE` (the caller). The caller commits
   * or rolls back and closes it.
   */
  def openForWrite(address: CatalogAddress, env: Env = systemEnv): Connection = address match {
    case a: SqliteAddress => openSqlite(a, write = true)
    case a: PostgresAddress => openPostgres(a, env, write = true)
  }

  private def openSqlite(a: SqliteAddress, write: Boolean = false): Connection = {
    if (!a.dbFile.isFile) {
      val what = if (a.dbFile.getParentFile != null && !a.dbFile.getParentFile.exists()) "the directory does not exist"
      else s"there is no catalog file ${a.dbFile.getPath}"
      throw OmniTableErrors.notACatalog(a.display, what)
    }
    val props = new Properties()
    props.setProperty("busy_timeout", "30000")
    if (write) props.setProperty("transaction_mode", "IMMEDIATE")
    else props.setProperty("open_mode", "1") // SQLITE_OPEN_READONLY: readers never write (RefWriter opens its own)
    val conn = connectWith(a.display) {
      new org.sqlite.JDBC().connect("jdbc:sqlite:" + a.dbFile.getPath, props)
    }
    try {
      conn.setAutoCommit(false)
      conn
    } catch {
      case e: SQLException => conn.close(); throw OmniTableErrors.cannotConnect(a.display, e)
    }
  }

  /** The driver properties of a connection to `a`: user, password (an `env:NAME` one read now), application, mode. */
  def postgresProperties(a: PostgresAddress, env: Env, write: Boolean): Properties = {
    val props = new Properties()
    a.user.foreach(props.setProperty("user", _))
    a.password.foreach {
      case Secret.Literal(pw) => props.setProperty("password", pw)
      case Secret.FromEnv(name) => props.setProperty("password", envPassword(a.display, name, env))
    }
    props.setProperty("ApplicationName", "omnitable-spark")
    if (!write) props.setProperty("readOnly", "true")
    props
  }

  private def openPostgres(a: PostgresAddress, env: Env, write: Boolean = false): Connection = {
    val props = postgresProperties(a, env, write)
    val conn = connectWith(a.display)(new org.postgresql.Driver().connect(a.jdbcUrl, props))
    try {
      conn.setAutoCommit(false)
      if (write) conn.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED)
      else {
        conn.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ)
        conn.setReadOnly(true)
      }
      conn
    } catch {
      case e: SQLException => conn.close(); throw OmniTableErrors.cannotConnect(a.display, e)
    }
  }

  private def connectWith(display: String)(connect: => Connection): Connection = {
    val conn = try connect
    catch {
      case e: SQLException => throw OmniTableErrors.cannotConnect(display, e)
    }
    if (conn == null) throw OmniTableErrors.cannotConnect(display, new SQLException("driver rejected the URL"))
    conn
  }
}
