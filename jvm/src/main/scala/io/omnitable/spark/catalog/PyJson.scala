package io.omnitable.spark.catalog

/**
 * JSON text exactly as Python's `json.dumps(value, sort_keys=True)` writes it (", " and ": "
 * separators, non-ASCII escaped as `\uXXXX`), so catalog rows the JVM writes (table properties,
 * commit summaries) are byte-for-byte those Python writes. Values: String, Long, Int, Boolean,
 * null (or None), Some(value), Seq of values, Map[String, value].
 */
object PyJson {

  def dumps(value: Any): String = {
    val sb = new StringBuilder
    write(sb, value)
    sb.toString
  }

  private def write(sb: StringBuilder, value: Any): Unit = value match {
    case null | None => sb.append("null")
    case Some(x) => write(sb, x)
    case s: String => string(sb, s)
    case b: Boolean => sb.append(if (b) "true" else "false")
    case n: Int => sb.append(n)
    case n: Long => sb.append(n)
    case m: Map[_, _] =>
      val entries = m.toSeq.map { case (k, v) => k.toString -> v }.sortBy(_._1)
      sb.append('{')
      entries.zipWithIndex.foreach { case ((k, v), i) =>
        if (i > 0) sb.append(", ")
        string(sb, k)
        sb.append(": ")
        write(sb, v)
      }
      sb.append('}')
    case s: Seq[_] =>
      sb.append('[')
      s.zipWithIndex.foreach { case (v, i) =>
        if (i > 0) sb.append(", ")
        write(sb, v)
      }
      sb.append(']')
    case other => throw new IllegalArgumentException(s"PyJson cannot write ${other.getClass.getName}")
  }

  private def string(sb: StringBuilder, s: String): Unit = {
    sb.append('"')
    s.foreach {
      case '"' => sb.append("\\\"")
      case '\\' => sb.append("\\\\")
      case '\n' => sb.append("\\n")
      case '\r' => sb.append("\\r")
      case '\t' => sb.append("\\t")
      case '\b' => sb.append("\\b")
      case '\f' => sb.append("\\f")
      case c if c < 0x20 || c > 0x7e => sb.append(f"\\u${c.toInt}%04x")
      case c => sb.append(c)
    }
    sb.append('"')
  }
}
