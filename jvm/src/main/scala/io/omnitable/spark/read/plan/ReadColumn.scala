package io.omnitable.spark.read.plan

import io.omnitable.spark.catalog.{ColumnEntry, SystemColumns, TableSnapshot}
import io.omnitable.spark.read.exec.FilterColumn
import org.apache.spark.sql.types._

/** One column of a scan's output, and where its values come from. */
sealed trait ReadColumn extends Serializable {
  def field: StructField
}

object ReadColumn {

  /** A stored column (including `_ai_unique_id_`), read from the file that provides it. */
  final case class Stored(columnId: Int, physicalName: String, field: StructField) extends ReadColumn

  /** `_ai_append_name_`: the fragment's batch name. */
  case object AppendName extends ReadColumn {
    val field: StructField = StructField(SystemColumns.AppendName, StringType, nullable = false)
  }

  /** Metadata column `_ai_fragment_`: the fragment id. */
  case object FragmentId extends ReadColumn {
    val field: StructField = StructField(SystemColumns.Fragment, StringType, nullable = false)
  }

  /** Metadata column `_ai_row_offset_`: the row's position in its fragment. */
  case object RowOffset extends ReadColumn {
    val field: StructField = StructField(SystemColumns.RowOffset, LongType, nullable = false)
  }

  private def stored(c: ColumnEntry, nullable: Boolean): Stored =
    Stored(c.columnId, c.physicalName, StructField(c.name, c.dataType, nullable))

  /** The table's columns, in schema order: system columns, then user columns by position. */
  def tableColumns(snap: TableSnapshot): Seq[ReadColumn] =
    Seq(stored(snap.rowIdColumn, nullable = false), AppendName) ++
      snap.userColumns.map(c => stored(c, c.nullable))

  val metadataColumns: Seq[ReadColumn] = Seq(FragmentId, RowOffset)

  def schema(columns: Seq[ReadColumn]): StructType = StructType(columns.map(_.field))

  /** The filterable view of every column (data, batch name, fragment id) by name. */
  def filterColumns(snap: TableSnapshot): Map[String, FilterColumn] = {
    val data = (snap.rowIdColumn +: snap.userColumns).map { c =>
      c.name -> FilterColumn(c.name, FilterColumn.Data, c.columnId, c.physicalName, c.dataType)
    }
    (data ++ Seq(
      SystemColumns.AppendName -> FilterColumn(SystemColumns.AppendName, FilterColumn.BatchName, -1, "", StringType),
      SystemColumns.Fragment -> FilterColumn(SystemColumns.Fragment, FilterColumn.FragmentId, -1, "", StringType)
    )).toMap
  }
}
