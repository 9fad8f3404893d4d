package io.omnitable.spark.catalog

import java.io.File
import java.net.{URI, URLDecoder}
import java.nio.charset.StandardCharsets
import java.util.Locale

import io.omnitable.spark.errors.OmniTableErrors

/** A password as written in a warehouse address: literal text, or `env:NAME` (read at connect). */
sealed trait Secret
object Secret {
  final case class Literal(value: String) extends Secret { override def toString: String = "***" }
  final case class FromEnv(name: String) extends Secret { override def toString: String = s"env:$name" }
}

/**
 * Where a warehouse's catalog lives, parsed from a warehouse string exactly as docs/catalog.md
 * ("Addressing a catalog") says. `display` is safe to log: it never holds a literal password.
 */
sealed trait CatalogAddress {
  def display: String
}

/** A SQLite catalog file; `.` as data root means this file's directory. */
final case class SqliteAddress(dbFile: File, display: String) extends CatalogAddress

/** A PostgreSQL catalog. `query` holds extra JDBC parameters (`sslmode=require`, ...) or "". */
final case class PostgresAddress(
    host: String,
    port: Int,
    database: String,
    user: Option[String],
    password: Option[Secret],
    query: String,
    display: String) extends CatalogAddress {

  /** Whether the address holds a password itself: a literal one, or a secret query parameter. */
  def hasLiteralPassword: Boolean =
    password.exists(_.isInstanceOf[Secret.Literal]) || CatalogAddress.hasSecretParameter(query)

  def jdbcUrl: String = {
    val h = if (host.contains(":") && !host.startsWith("[")) s"[$host]" else host
    s"jdbc:postgresql://$h:$port/$database" + (if (query.isEmpty) "" else s"?$query")
  }
}

object CatalogAddress {

  val SqliteFileName = "catalog.db"

  private val SchemeRe = "^([A-Za-z][A-Za-z0-9+.-]*)://.*$".r

  /** Query parameters of a PostgreSQL URL that carry a secret (pgjdbc and libpq names). */
  val SecretParameters: Set[String] = Set("password", "sslpassword")

  private def parameterName(param: String): String = {
    val name = param.takeWhile(_ != '=')
    (try decode(name)
    catch { case _: IllegalArgumentException => name }).toLowerCase(Locale.ROOT)
  }

  private[catalog] def hasSecretParameter(query: String): Boolean =
    query.nonEmpty && query.split('&').exists(p => SecretParameters.contains(parameterName(p)))

  /** Parses a warehouse string; relative paths are relative to this JVM's working directory. */
  def parse(warehouse: String): CatalogAddress = {
    val value = warehouse.trim
    if (value.isEmpty) throw OmniTableErrors.invalidWarehouse(warehouse, "the address is empty")
    value match {
      case SchemeRe(scheme) =>
        scheme.toLowerCase(Locale.ROOT) match {
          case s if s == "postgres" || s == "postgresql" || s.startsWith("postgresql+") => parsePostgres(value)
          case "sqlite" => parseSqlite(value)
          case "file" => directory(value, new File(new URI(value)))
          case other => throw OmniTableErrors.invalidWarehouse(
              redact(value),
              s"unsupported scheme '$other'; use a directory, sqlite:///path.db or postgresql://...")
        }
      case _ if value.startsWith("file:") => directory(value, new File(new URI(value)))
      case _ => directory(value, new File(value))
    }
  }

  private def directory(value: String, dir: File): SqliteAddress = {
    val abs = dir.getAbsoluteFile
    SqliteAddress(new File(abs, SqliteFileName), abs.getPath)
  }

  // sqlite:///relative/path.db and sqlite:////absolute/path.db (SQLAlchemy's convention).
  private def parseSqlite(value: String): SqliteAddress = {
    val prefix = value.indexOf(":///")
    if (prefix < 0) throw OmniTableErrors.invalidWarehouse(
      value,
      "a SQLite address is sqlite:///relative/path.db or sqlite:////absolute/path.db")
    val path = value.substring(prefix + 4).takeWhile(_ != '?')
    if (path.isEmpty || path == ":memory:") throw OmniTableErrors.invalidWarehouse(
      value,
      "the SQLite address names no database file")
    SqliteAddress(new File(path).getAbsoluteFile, value)
  }

  private def parsePostgres(value: String): PostgresAddress = {
    val uri = try new URI(value)
    catch {
      case e: java.net.URISyntaxException =>
        throw OmniTableErrors.invalidWarehouse(redact(value), s"not a valid URL (${e.getReason})")
    }
    val host = Option(uri.getHost).getOrElse(throw OmniTableErrors.invalidWarehouse(
      redact(value),
      "expected postgresql://user:password@host:port/database"))
    val port = if (uri.getPort < 0) 5432 else uri.getPort
    val database = Option(uri.getRawPath).map(_.stripPrefix("/")).filter(_.nonEmpty).map(decode)
      .getOrElse(throw OmniTableErrors.invalidWarehouse(redact(value), "the URL names no database"))
    val (user, password) = Option(uri.getRawUserInfo) match {
      case None => (None, None)
      case Some(info) =>
        val colon = info.indexOf(':')
        if (colon < 0) (Some(decode(info)), None)
        else {
          val pw = decode(info.substring(colon + 1))
          val secret = if (pw.startsWith("env:")) Secret.FromEnv(pw.stripPrefix("env:")) else Secret.Literal(pw)
          (Some(decode(info.substring(0, colon))), Some(secret))
        }
    }
    val query = Option(uri.getRawQuery).getOrElse("")
    PostgresAddress(host, port, database, user, password, query, redact(value))
  }

  private def decode(s: String): String = URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8)

  /**
   * The address with a literal password and the values of secret query parameters (`password`,
   * `sslpassword`) replaced by `***`; an `env:NAME` reference is kept.
   */
  def redact(value: String): String = {
    val hidden = redactUserInfo(value)
    val hostStart = math.max(hidden.lastIndexOf('@'), hidden.indexOf("://"))
    val q = hidden.indexOf('?', math.max(hostStart, 0))
    if (q < 0) hidden
    else {
      val params = hidden.substring(q + 1).split("&", -1).map { p =>
        if (SecretParameters.contains(parameterName(p))) p.takeWhile(_ != '=') + "=***" else p
      }
      hidden.substring(0, q) + "?" + params.mkString("&")
    }
  }

  private def redactUserInfo(value: String): String = {
    val at = value.lastIndexOf('@')
    val start = value.indexOf("://")
    if (at < 0 || start < 0 || at < start) return value
    val info = value.substring(start + 3, at)
    val colon = info.indexOf(':')
    if (colon < 0) value
    else {
      val pw = info.substring(colon + 1)
      if (pw.startsWith("env:") || pw.startsWith("env%3A") || pw.startsWith("env%3a")) value
      else value.substring(0, start + 3) + info.substring(0, colon) + ":***" + value.substring(at)
    }
  }
}
