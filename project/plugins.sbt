// Plugins come from Maven Central only (see project/repositories and scripts/sbt).
addSbtPlugin("com.eed3si9n" % "sbt-assembly" % "2.3.1")
addSbtPlugin("org.scalameta" % "sbt-scalafmt" % "2.6.2")
