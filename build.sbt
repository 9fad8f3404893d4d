// OmniTable JVM query plane: one Spark extension jar (io.omnitable.spark.*) with the JDBC
// drivers it needs bundled in. Built by `scripts/sbt -batch assembly` (called by `./dev jar`);
// the jar lands where the Python package loads it from (python/omnitable/jars/).

import sbtassembly.AssemblyPlugin.autoImport.ShadeRule

val sparkVersion = "4.1.1"
val sqliteJdbcVersion = "3.53.4.0"
val postgresVersion = "42.7.14"
val scalaTestVersion = "3.2.19"

// The Python package and the jar share one version: read it from pyproject.toml.
def projectVersion(base: File): String = {
  val line = IO.readLines(base / "pyproject.toml").find(_.trim.startsWith("version"))
  line.flatMap(l => "\"([^\"]+)\"".r.findFirstMatchIn(l).map(_.group(1))).getOrElse("0.0.0")
}

// Options Spark's launcher passes to Java 17 (org.apache.spark.launcher.JavaModuleOptions).
val sparkJavaOptions = Seq(
  "-XX:+IgnoreUnrecognizedVMOptions",
  "--add-modules=jdk.incubator.vector",
  "--add-opens=java.base/java.lang=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
  "--add-opens=java.base/java.io=ALL-UNNAMED",
  "--add-opens=java.base/java.net=ALL-UNNAMED",
  "--add-opens=java.base/java.nio=ALL-UNNAMED",
  "--add-opens=java.base/java.util=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
  "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
  "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
  "-Djdk.reflect.useDirectMethodHandle=false",
  "-Dio.netty.tryReflectionSetAccessible=true"
)

lazy val root = (project in file("."))
  .settings(
    name := "omnitable-spark",
    organization := "io.omnitable",
    version := projectVersion(baseDirectory.value),
    scalaVersion := "2.13.17", // the Scala of Spark 4.1.1 (pyspark's jars/scala-library-2.13.17.jar)
    javacOptions ++= Seq("--release", "17"),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-unchecked",
      "-Xlint:-byname-implicit,_", "-Wconf:cat=lint-infer-any:s"),

    Compile / scalaSource := baseDirectory.value / "jvm" / "src" / "main" / "scala",
    Compile / resourceDirectory := baseDirectory.value / "jvm" / "src" / "main" / "resources",
    Test / scalaSource := baseDirectory.value / "jvm" / "src" / "test" / "scala",
    Test / resourceDirectory := baseDirectory.value / "jvm" / "src" / "test" / "resources",

    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-core" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-catalyst" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided,
      ("org.xerial" % "sqlite-jdbc" % sqliteJdbcVersion).exclude("org.slf4j", "slf4j-api"),
      ("org.postgresql" % "postgresql" % postgresVersion)
        .exclude("org.checkerframework", "checker-qual"),
      "org.scalatest" %% "scalatest" % scalaTestVersion % Test
    ),

    // The catalog schema and the commit statements are ONE file each in the Python package;
    // bundle them (not copies in the repo) at /omnitable/schema.sql and /omnitable/commit.sql,
    // next to the jar's version.
    Compile / resourceGenerators += Def.task {
      val out = (Compile / resourceManaged).value / "omnitable"
      val schema = out / "schema.sql"
      IO.copyFile(baseDirectory.value / "python" / "omnitable" / "catalog" / "schema.sql", schema)
      val commitSql = out / "commit.sql"
      IO.copyFile(baseDirectory.value / "python" / "omnitable" / "catalog" / "commit.sql", commitSql)
      val props = out / "version.properties"
      IO.write(props, s"version=${version.value}\nspark=$sparkVersion\n")
      Seq(schema, commitSql, props)
    }.taskValue,

    // Tests run real Spark in one forked JVM, suites one after another.
    Test / fork := true,
    Test / parallelExecution := false,
    Test / javaOptions ++= Seq("-Xmx3g", "-Xss4m", "-Dspark.ui.enabled=false") ++ sparkJavaOptions,
    Test / envVars ++= Map(
      "SPARK_LOCAL_IP" -> "127.0.0.1",
      "OMNITABLE_REPO_ROOT" -> baseDirectory.value.getAbsolutePath
    ),
    Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD"),

    // One jar, written where the Python package finds it.
    assembly / assemblyJarName := "omnitable-spark.jar",
    assembly / assemblyOutputPath :=
      baseDirectory.value / "python" / "omnitable" / "jars" / "omnitable-spark.jar",
    assembly / assemblyOption ~= (_.withIncludeScala(false)),
    assembly / test := {},
    // PostgreSQL's driver is pure Java: relocate it so it never clashes with a user's copy.
    // sqlite-jdbc is NOT relocated: its JNI library binds native methods and callbacks to the
    // class names org.sqlite.* (Java_org_sqlite_core_NativeDB_*), so renaming breaks it. We
    // instantiate both drivers directly (never through DriverManager), see catalog/JdbcConnector.
    assembly / assemblyShadeRules := Seq(
      ShadeRule.rename("org.postgresql.**" -> "io.omnitable.shaded.org.postgresql.@1").inAll
    ),
    assembly / assemblyMergeStrategy := {
      case PathList("META-INF", "services", _*) => MergeStrategy.concat
      case PathList("META-INF", "versions", _, "module-info.class") => MergeStrategy.discard
      case "module-info.class" => MergeStrategy.discard
      case PathList("META-INF", xs @ _*)
          if xs.lastOption.exists(n => n.endsWith(".SF") || n.endsWith(".DSA") || n.endsWith(".RSA")) =>
        MergeStrategy.discard
      case PathList("META-INF", "MANIFEST.MF") => MergeStrategy.discard
      case x =>
        val old = (assembly / assemblyMergeStrategy).value
        old(x)
    }
  )
