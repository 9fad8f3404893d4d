package io.omnitable.spark

import org.apache.spark.sql.SparkSession
import org.scalatest.{BeforeAndAfterAll, Suite}

/** One local[2] SparkSession per suite, bound to loopback, with the OmniTable extension loaded. */
trait SharedSparkSession extends BeforeAndAfterAll { self: Suite =>

  /** Extra session settings of a suite (e.g. the omnitable catalog's warehouse). */
  protected def sparkConf: Map[String, String] = Map.empty

  @transient private var _spark: SparkSession = _

  protected def spark: SparkSession = _spark

  /** Runs `body` with the session settings `kv` (restored afterwards). */
  protected def withConf[T](kv: (String, String)*)(body: => T): T = {
    val before = kv.map { case (k, _) => k -> spark.conf.getOption(k) }
    kv.foreach { case (k, v) => spark.conf.set(k, v) }
    try body
    finally before.foreach {
        case (k, Some(v)) => spark.conf.set(k, v)
        case (k, None) => spark.conf.unset(k)
      }
  }

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    val builder = SparkSession.builder()
      .master("local[2]")
      .appName(getClass.getSimpleName)
      .config("spark.driver.host", "127.0.0.1")
      .config("spark.driver.bindAddress", "127.0.0.1")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.extensions", classOf[OmniTableSparkSessionExtensions].getName)
    sparkConf.foreach { case (k, v) => builder.config(k, v) }
    _spark = builder.getOrCreate()
  }

  override protected def afterAll(): Unit =
    try {
      if (_spark != null) _spark.stop()
      SparkSession.clearActiveSession()
      SparkSession.clearDefaultSession()
    } finally super.afterAll()
}
