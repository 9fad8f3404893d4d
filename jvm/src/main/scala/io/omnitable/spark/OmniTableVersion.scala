package io.omnitable.spark

import java.util.Properties

/** The version of this jar (the Python package's version, written into the jar by build.sbt). */
object OmniTableVersion {

  /** e.g. "0.1.0"; "unknown" only when the jar was built without its resources. */
  lazy val current: String = {
    val props = new Properties()
    val in = getClass.getResourceAsStream("/omnitable/version.properties")
    if (in != null) {
      try props.load(in)
      finally in.close()
    }
    props.getProperty("version", "unknown")
  }
}
