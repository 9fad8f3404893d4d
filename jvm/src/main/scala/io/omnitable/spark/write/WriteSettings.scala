package io.omnitable.spark.write

import java.util.Locale

import io.omnitable.spark.errors.{OmniTableErrors, WriteErrors}

/**
 * How an append from Spark is named and laid out, each through one precedence chain: write
 * option → session setting `spark.omnitable.write.<name>` → table property `write.<name>` →
 * default (the Python settings of the same names, python/omnitable/settings.py).
 */
private[write] final case class WriteSettings(
    appendName: String,
    targetFragmentRows: Long,
    rowGroupSize: Long,
    compression: String)

private[write] object WriteSettings {

  /** Write option naming the batch (DataFrameWriter / DataFrameWriterV2 `.option`). */
  val AppendNameOption = "append_name"

  /** Session setting naming the batch of INSERT INTO (no write options in SQL). */
  val AppendNameConf = "spark.omnitable.write.appendName"

  /** The settings of a write; `named = false` (an update: no new batch) leaves the append name empty. */
  def resolve(
      table: String,
      options: Map[String, String],
      session: String => Option[String],
      properties: Map[String, String],
      named: Boolean = true): WriteSettings = {
    val opts = options.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }
    def get(name: String): Option[String] =
      opts.get(name).orElse(session(s"spark.omnitable.write.$name")).orElse(properties.get(s"write.$name"))
        .map(_.trim).filter(_.nonEmpty)
    def positive(name: String, default: Long): Long = get(name).map { v =>
      v.toLongOption.filter(_ > 0).getOrElse(throw OmniTableErrors.invalidOption(
        name,
        v,
        "expected a positive integer"))
    }.getOrElse(default)
    val name =
      if (!named) ""
      else opts.get(AppendNameOption).orElse(session(AppendNameConf))
        .getOrElse(throw WriteErrors.missingAppendName(table, AppendNameOption, AppendNameConf))
    if (named && (name.trim.isEmpty || name.length > 256 || name.exists(ch => ch < 0x20 || ch == 0x7f))) {
      throw WriteErrors.invalidAppendName(table, name)
    }
    WriteSettings(
      name,
      positive("target_fragment_rows", 1048576L),
      positive("row_group_size", 131072L),
      get("compression").map(_.toLowerCase(Locale.ROOT)).getOrElse("zstd")
    )
  }
}
