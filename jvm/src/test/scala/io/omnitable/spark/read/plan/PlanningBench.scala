package io.omnitable.spark.read.plan

import io.omnitable.spark.catalog.{CatalogReader, HandMadeCatalog, SnapshotSpec, SyntheticTables, TableSnapshot}
import io.omnitable.spark.conf.{OmniTableConf, TableProperties}
import org.apache.spark.sql.types.StructType

/**
 * Measures Spark planning against synthetic catalogs (no data files, no Spark session): the
 * time, SQL statements and rows read to load a table and build the scan of 4 columns, for one
 * batch and for the whole table. Not a test (no assertions, no timing in CI):
 * {{{
 * scripts/sbt -batch "Test/runMain io.omnitable.spark.read.plan.PlanningBench 1000x10x200 10000x10x200"
 * }}}
 * Each argument is FRAGMENTSxGROUPSxCOLUMNS (20 fragments per batch); each figure is the median of 3 runs.
 */
object PlanningBench {

  final case class Figure(millis: Double, statements: Long, rows: Long, fragments: String, partitions: Int)

  def main(args: Array[String]): Unit = {
    val shapes = (if (args.isEmpty) Seq("1000x10x200", "10000x10x200") else args.toSeq).map { a =>
      a.split("x").map(_.toInt).toSeq match {
        case Seq(f, g, c) => SyntheticTables.Shape(f, g, c)
        case _ => throw new IllegalArgumentException(s"Cannot read shape '$a': expected FRAGMENTSxGROUPSxCOLUMNS")
      }
    }
    shapes.foreach { shape =>
      val hand = new HandMadeCatalog
      val started = System.nanoTime()
      SyntheticTables.uniform(hand, shape)
      val built = (System.nanoTime() - started) / 1e9
      println(f"$shape: ${shape.files}%d files, ${shape.setRows}%d column_sets rows (written in $built%.1f s)")
      val reader = new CatalogReader(hand.dir.getPath)
      val columns = Seq("c1", "c2", "c3", "c4")
      val middle = Some(Seq(SyntheticTables.batchName(shape.batches / 2)))
      val snap = reader.loadTable("hand", SnapshotSpec.Head)
      val load = median(reader, { reader.loadTable("hand", SnapshotSpec.Head); scan(reader, snap, Some(Nil), Nil) })
      println(
        f"  load the table (+ an empty scan): ${load.millis}%.1f ms, ${load.statements} statements, ${load.rows} rows")
      Seq("one batch" -> middle, "full scan" -> None).foreach { case (what, batches) =>
        val f = measure(reader, batches, columns)
        println(
          f"  $what, 4 columns: ${f.millis}%.1f ms, ${f.statements} statements, ${f.rows} rows, " +
            s"fragments=${f.fragments}, partitions=${f.partitions}")
      }
      hand.close()
    }
  }

  /** Median of 3 (after one warm-up) of: load the table, build the scan. */
  def measure(reader: CatalogReader, batches: Option[Seq[String]], columns: Seq[String]): Figure =
    median(reader, plan(reader, batches, columns))

  /** Median of 3 (after one warm-up) of `body`'s time, statements and rows read. */
  def median(reader: CatalogReader, body: => OmniTableScan): Figure = {
    body
    val runs = (1 to 3).map { _ =>
      reader.queries.reset()
      val t0 = System.nanoTime()
      val scan = body
      Figure(
        (System.nanoTime() - t0) / 1e6,
        reader.queries.statements,
        reader.queries.rows,
        s"${scan.plan.counts.kept}/${scan.plan.counts.total}",
        scan.plan.partitions.size
      )
    }
    runs.sortBy(_.millis).apply(1)
  }

  /** What the data source does for `spark.read.format("omnitable").option("batches", ...)`, then `select(columns)`. */
  def plan(reader: CatalogReader, batches: Option[Seq[String]], columns: Seq[String]): OmniTableScan =
    scan(reader, reader.loadTable("hand", SnapshotSpec.Head, batches), batches, columns)

  /** The scan of `columns` of `snap` (of `batches`, if given), built as Spark builds it. */
  def scan(
      reader: CatalogReader,
      snap: TableSnapshot,
      batches: Option[Seq[String]],
      columns: Seq[String]): OmniTableScan = {
    val conf = new OmniTableConf(Map.empty, _ => None, TableProperties.Empty)
    val builder = new OmniTableScanBuilder(TableHandle(reader, snap, batches, None, Map.empty), conf)
    val schema = ReadColumn.schema(ReadColumn.tableColumns(snap))
    builder.pruneColumns(StructType(columns.map(c => schema(c))))
    builder.build().asInstanceOf[OmniTableScan]
  }
}
