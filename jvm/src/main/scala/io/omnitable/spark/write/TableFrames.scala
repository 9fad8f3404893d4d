package io.omnitable.spark.write

import org.apache.spark.sql.DataFrame

/**
 * Reads a table of one warehouse as a DataFrame with the `omnitable` source's read options
 * (`branch`, `versionAsOf`, `fragments`, `split_fragments`, …) through a reader its caller already
 * trusts: a catalog's own. No `warehouse` read option is involved, whose `env:NAME` password the
 * session's static configuration would have to name (docs/spark.md, "Credentials"), so a job a
 * catalog's procedure starts reads wherever that catalog reads, however the catalog was configured.
 */
trait TableFrames {

  /** The rows of `table` the read `options` select (every source option but `warehouse`). */
  def read(table: String, options: Map[String, String]): DataFrame
}
