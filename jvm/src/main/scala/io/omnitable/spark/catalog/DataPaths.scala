package io.omnitable.spark.catalog

import java.io.File

/**
 * Turns the catalog's root and relative paths into absolute URIs that any executor can open
 * (`file:` for local paths, the root's own scheme otherwise). Never returns a driver-relative path.
 */
object DataPaths {

  private val SchemeRe = "^[A-Za-z][A-Za-z0-9+.-]*:.*".r

  def hasScheme(s: String): Boolean = SchemeRe.matches(s) && !s.matches("^[A-Za-z]:[\\\\/].*")

  /**
   * The data root as a URI. `.` (or another relative path) is relative to the directory of
   * the SQLite catalog file; PostgreSQL catalogs must store an absolute path or a URI.
   */
  def rootUri(stored: String, address: CatalogAddress, warehouse: String): String = {
    val value = stored.trim
    if (hasScheme(value)) value.stripSuffix("/")
    else {
      val file = new File(value)
      val abs = if (file.isAbsolute) file
      else address match {
        case SqliteAddress(db, _) => new File(db.getAbsoluteFile.getParentFile, value)
        case _ => throw io.omnitable.spark.errors.OmniTableErrors.corruptCatalog(
            warehouse,
            s"its data root '$value' is a relative path; a PostgreSQL catalog needs an absolute root")
      }
      localUri(abs)
    }
  }

  /** `file:/a/b` for a local directory or file (normalized, no trailing slash). */
  def localUri(file: File): String =
    file.toPath.toAbsolutePath.normalize().toUri.toString.stripSuffix("/")

  /** `base` + "/" + `relative`, unless `relative` is itself absolute (a URI or a local path). */
  def join(base: String, relative: String): String =
    if (hasScheme(relative)) relative.stripSuffix("/")
    else if (relative.startsWith("/")) localUri(new File(relative))
    else base.stripSuffix("/") + "/" + relative.stripPrefix("./").stripSuffix("/")
}
