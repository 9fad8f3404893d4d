package io.omnitable.spark.conf

import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.funsuite.AnyFunSuite

class OmniTableConfSuite extends AnyFunSuite {

  import OmniTableConf._

  private def conf(
      options: Map[String, String] = Map.empty,
      session: Map[String, String] = Map.empty,
      table: Map[String, String] = Map.empty): OmniTableConf =
    new OmniTableConf(options, session.get, TableProperties("t", table))

  test("one chain: read option, then session conf, then table property, then default") {
    val table = Map("read.batch_size" -> "7")
    val session = Map("spark.omnitable.read.batch_size" -> "8")
    assert(conf().batchSize == 4096)
    assert(conf(table = table).batchSize == 7)
    assert(conf(session = session, table = table).batchSize == 8)
    assert(conf(Map("BATCH_SIZE" -> "9"), session, table).batchSize == 9)
    assert(conf(table = Map("read.on_corrupt" -> "skip_fragment")).skipCorruptFragments)
  }

  test("only read settings have a table property; session-wide ones ignore table properties") {
    assert(BATCH_SIZE.tableKey.contains("read.batch_size"))
    assert(ON_CORRUPT.tableKey.contains("read.on_corrupt"))
    assert(WAREHOUSE.tableKey.isEmpty && FUSE_SCANS.tableKey.isEmpty && LATE_MATERIALIZATION.tableKey.isEmpty)
    val props =
      Map("optimizer.fuse_scans" -> "false", "warehouse" -> "/elsewhere", "spark.omnitable.read.batch_size" -> "3")
    val c = conf(table = props)
    assert(c.fuseScans && c.getOption(WAREHOUSE).isEmpty && c.batchSize == 4096)
  }

  test("an invalid table property fails naming the table, the key and how to override it") {
    val e = intercept[OmniTableAnalysisException](conf(table = Map("read.batch_size" -> "many")).batchSize)
    assert(e.omniErrorClass == "OMNITABLE_INVALID_OPTION")
    assert(e.getMessage.contains("Cannot use table property read.batch_size='many' of table 't'"))
    assert(e.getMessage.contains("read option 'batch_size' or session setting 'spark.omnitable.read.batch_size'"))
    // a valid value from higher up the chain is used without looking at the table property
    assert(conf(Map("batch_size" -> "5"), table = Map("read.batch_size" -> "many")).batchSize == 5)
  }

  test("an invalid read option or session setting names its key") {
    val option = intercept[OmniTableAnalysisException](conf(Map("on_corrupt" -> "ignore")).skipCorruptFragments)
    assert(option.getMessage.contains("Cannot use option on_corrupt='ignore'"))
    val session =
      intercept[OmniTableAnalysisException](conf(session = Map(CORRUPT_RETRIES.sessionKey -> "-1")).corruptRetries)
    assert(session.getMessage.contains(s"Cannot use option ${CORRUPT_RETRIES.sessionKey}='-1'"))
  }
}
