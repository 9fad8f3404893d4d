package io.omnitable.spark.source

import io.omnitable.spark.catalog.{
  CatalogReader,
  CatalogWriter,
  DdlWriter,
  Failpoints,
  NewColumn,
  SnapshotSpec,
  SystemColumns,
  TableNames
}
import io.omnitable.spark.errors.{DdlErrors, OmniTableErrors}
import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, TableAlreadyExistsException}
import org.apache.spark.sql.connector.catalog.{
  Column,
  Identifier,
  StagedTable,
  SupportsWrite,
  TableCapability,
  TableChange
}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, WriteBuilder}

/**
 * CREATE TABLE (and the create of a CTAS) and ALTER TABLE … ADD COLUMNS of the omnitable
 * catalog, committed by the JVM as Python's `Warehouse.create_table` and `Table.add_columns`
 * commit them (docs/spark.md, "Creating and altering tables from Spark").
 */
private[source] final class TableDdl(reader: CatalogReader, failpoints: Failpoints) {

  private def ddlWriter = new DdlWriter(new CatalogWriter(reader.address, failpoints = failpoints))

  /** Creates the table; NoSuchNamespaceException / TableAlreadyExistsException as Spark expects. */
  def create(ident: Identifier, columns: Seq[Column], partitions: Seq[Transform], properties: Map[String, String])
      : Unit = {
    val namespace = ident.namespace() match {
      case Array() => TableNames.DefaultNamespace
      case Array(ns) if TableNames.validName(ns) => ns
      case _ => throw new NoSuchNamespaceException(ident.namespace())
    }
    Names.checkTable(ident.name())
    val address = TableNames.address(namespace, ident.name())
    val (newColumns, json) = TableDefinition(address, columns, partitions, properties)
    ddlWriter.createTable(namespace, ident.name(), newColumns, json) match {
      case DdlWriter.Created(_) =>
      case DdlWriter.NamespaceMissing => throw new NoSuchNamespaceException(Array(namespace))
      case DdlWriter.TableExists => throw new TableAlreadyExistsException(ident)
    }
  }

  /**
   * `ALTER TABLE … ADD COLUMNS`: Python's `add_columns` without data, one commit; the new columns
   * (nullable, NULL for existing rows) form one new group, named as Python names it by default
   * (after the first new column). Every other change is refused, naming the Python API.
   */
  def alter(address: TableAddress, changes: Seq[TableChange]): Unit = {
    val table = address.tableAddress
    val adds = changes.map {
      case a: TableChange.AddColumn => a
      case other => throw unsupportedChange(table, other)
    }
    val snap = reader.loadTable(table, SnapshotSpec.Head)
    val existing = snap.columns.map(_.name).toSet
    val what = s"add columns to table '$table'"
    val columns = adds.map { a =>
      val name = checkAdd(table, a)
      if (name == SystemColumns.AppendName) {
        throw DdlErrors.invalidDefinition(s"Cannot add column ${SystemColumns.AppendName}: it is a system column")
      }
      Names.checkColumn(name)
      if (existing.contains(name)) {
        throw DdlErrors.columnExists(
          s"Cannot add column '$name' to table '$table': it already exists (recompute existing columns " +
            "with a feature backfill)")
      }
      NewColumn(name, DdlTypes.ddl(a.dataType(), name, what), nullable = true, group = "")
    }
    val dupes = columns.groupBy(_.name).collect { case (n, cs) if cs.size > 1 => n }
    if (dupes.nonEmpty) throw DdlErrors.invalidDefinition(s"Cannot $what: column '${dupes.head}' is listed twice")
    val group = TableDdl.defaultGroup(snap.columns.map(_.groupName).toSet, columns.head.name)
    Names.checkGroup(group)
    failpoints.hit("add_columns.before_commit")
    ddlWriter.addColumns(snap.table.tableId, table, snap.snapshot.version, columns.map(_.copy(group = group)), group)
  }

  /** The new column's name; clauses ADD COLUMNS cannot honour are refused. */
  private def checkAdd(table: String, a: TableChange.AddColumn): String = {
    val name = a.fieldNames().mkString(".")
    def no(clause: String, instead: String) =
      throw DdlErrors.unsupported(s"add column '$name' to table '$table' with $clause", instead)
    if (a.fieldNames().length != 1)
      no("a nested field name", "add a top-level column (nested fields are part of its type)")
    if (!a.isNullable) {
      no("NOT NULL", "the rows the table already has read NULL in a new column; add it nullable")
    }
    if (a.defaultValue() != null) no("a DEFAULT value", "existing rows read NULL in a new column (no defaults)")
    if (a.comment() != null) no("a COMMENT", "OmniTable stores no column comments; drop the COMMENT")
    if (a.position() != null) no("FIRST / AFTER", "new columns come after the existing ones; drop the clause")
    a.fieldNames().head
  }

  private def unsupportedChange(table: String, change: TableChange): Exception = {
    val (what: String, instead: String) = change match {
      case _: TableChange.DeleteColumn =>
        (
          "drop a column",
          "retire it with the Python API: omnitable.connect(...).table(...).retire('<column>') (data kept, " +
            "restorable with restore)")
      case _: TableChange.RenameColumn =>
        ("rename a column", "use the Python API: table(...).rename_column('<old>', '<new>')")
      case _: TableChange.SetProperty | _: TableChange.RemoveProperty =>
        (
          "change table properties",
          "properties are set when the table is created (TBLPROPERTIES of CREATE TABLE, or " +
            "create_table(properties=...) in Python)")
      case _: TableChange.UpdateColumnType =>
        (
          "change a column's type",
          "add a new column (ALTER TABLE … ADD COLUMNS) and fill it with the Python API (update, or a " +
            "feature backfill)")
      case other =>
        (
          s"apply ${other.getClass.getSimpleName}",
          "ALTER TABLE takes ADD COLUMNS only; other schema changes are the Python API's (retire, restore, " +
            "rename_column)")
    }
    DdlErrors.unsupported(s"$what of table '$table'", instead)
  }
}

private[source] object TableDdl {

  /** python/omnitable/ingest/columns.py `_default_group`: after the first column's name, made unique. */
  def defaultGroup(used: Set[String], first: String): String = {
    val base = Some(first.replaceAll("[^A-Za-z0-9_.-]", "_").take(56)).filter(_.nonEmpty).getOrElse("cols")
    (Iterator.single(base) ++ Iterator.from(2).map(i => s"$base-$i")).find(n => !used.contains(n)).get
  }

  def refuseReplace(ident: Identifier): Exception = DdlErrors.unsupported(
    s"replace table $ident",
    "REPLACE TABLE and CREATE OR REPLACE TABLE are not atomic here; to replace a batch use INSERT OVERWRITE " +
      "(or mode(\"overwrite\")), to start over DROP TABLE then CREATE TABLE"
  )

  def refuseRef(ident: Identifier): Exception = OmniTableErrors.readOnly(s"alter the branch or tag $ident")
}

/**
 * A table a CTAS writes ([[OmniTableCatalog.stageCreate]]): already created; the write is its
 * table's append. Committing changes nothing more; aborting drops the table.
 */
private[source] final class StagedOmniTable(table: OmniTableTable, drop: () => Unit)
    extends StagedTable
    with SupportsWrite {
  override def name(): String = table.name()
  override def columns(): Array[Column] = table.columns()
  override def schema(): org.apache.spark.sql.types.StructType = table.schema
  override def properties(): java.util.Map[String, String] = table.properties()
  override def capabilities(): java.util.Set[TableCapability] = table.capabilities()
  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder = table.newWriteBuilder(info)
  override def commitStagedChanges(): Unit = ()
  override def abortStagedChanges(): Unit = drop()
}
