package io.omnitable.spark.catalog

/** Python's `repr` of strings and lists of strings, for messages and error rows that must read as Python's. */
object PyRepr {

  /** Python's `repr(s)` of a str: single quotes unless it holds `'` and no `"`, Python's escapes. */
  def str(s: String): String = {
    val quote = if (s.contains('\'') && !s.contains('"')) '"' else '\''
    val b = new StringBuilder().append(quote)
    s.codePoints().forEach { cp =>
      cp match {
        case '\\' => b.append("\\\\")
        case '\n' => b.append("\\n")
        case '\r' => b.append("\\r")
        case '\t' => b.append("\\t")
        case c if c == quote => b.append('\\').append(quote)
        case c if c < 0x20 || c == 0x7f => b.append(f"\\x$c%02x")
        case c => b.appendAll(Character.toChars(c))
      }
    }
    b.append(quote).toString
  }

  /** Python's `repr` of a list of strings. */
  def list(items: Seq[String]): String = items.map(str).mkString("[", ", ", "]")
}
