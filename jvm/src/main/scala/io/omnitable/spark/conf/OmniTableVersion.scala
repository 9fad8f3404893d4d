package io.omnitable.spark.conf

import java.util.Properties

import io.omnitable.spark.errors.OmniTableErrors

/** The version of this jar (the Python package's version, written into the jar by build.sbt). */
object OmniTableVersion {

  private lazy val props: Properties = {
    val p = new Properties()
    val in = getClass.getResourceAsStream("/omnitable/version.properties")
    if (in != null) {
      try p.load(in)
      finally in.close()
    }
    p
  }

  /** e.g. "0.1.0"; "unknown" only when the jar was built without its resources. */
  lazy val current: String = props.getProperty("version", "unknown")

  /** The Spark version the jar was compiled against (build.sbt's `sparkVersion`), e.g. "4.1.1". */
  lazy val sparkBuiltAgainst: String = props.getProperty("spark", org.apache.spark.SPARK_VERSION)
}

/**
 * The jar uses Spark internals (private APIs, reflection, the plan nodes' constructors), which
 * change between Spark feature releases: it runs only on the Spark line (major.minor) it was
 * built for. The extension, the catalog, the data source and the internal shims call
 * [[SparkVersionCheck.verified]] when they load, so another Spark fails at once with a message
 * naming the supported versions instead of late with a `NoSuchMethodError`.
 */
object SparkVersionCheck {

  private def line(version: String): Option[String] =
    """^(\d+)\.(\d+)(?:[.\-+].*)?$""".r.findFirstMatchIn(version.trim).map(m => s"${m.group(1)}.${m.group(2)}")

  /** The supported Spark versions, e.g. "4.1.x". */
  lazy val supported: String = line(OmniTableVersion.sparkBuiltAgainst).getOrElse("?") + ".x"

  /** Throws `OMNITABLE_UNSUPPORTED_SPARK_VERSION` unless `running` is of the supported line. */
  def check(running: String): Unit =
    if (line(running).map(_ + ".x") != Some(supported)) {
      throw OmniTableErrors.unsupportedSparkVersion(running, supported, OmniTableVersion.sparkBuiltAgainst)
    }

  /** Checks the running Spark once per JVM (a failed check fails every later use again). */
  lazy val verified: Unit = check(org.apache.spark.SPARK_VERSION)
}
