package io.omnitable.spark.source

import scala.jdk.CollectionConverters._
import scala.util.{Success, Try}
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{
  CatalogReader,
  CatalogWriter,
  DdlWriter,
  Failpoints,
  NewColumn,
  NewTable,
  SnapshotSpec,
  SystemColumns,
  TableNames,
  TableSnapshot
}
import io.omnitable.spark.errors.{DdlErrors, OmniTableErrors}
import io.omnitable.spark.read.plan.ReadColumn
import io.omnitable.spark.write.{OmniTableWriteBuilder, StagedCreate}
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
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
import org.apache.spark.sql.types.StructType

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
    val table = define(ident, columns, partitions, properties)
    TableDdl.check(
      ident,
      table.namespace,
      ddlWriter.createTable(table.namespace, table.name, table.columns, table.propertiesJson))
  }

  /**
   * The create of a CTAS, staged: checked as [[create]] checks it (namespace, name free,
   * definition), nothing written. Its write creates the table with its first batch in one
   * transaction ([[DdlWriter.createWithAppend]]).
   */
  def stage(ident: Identifier, columns: Seq[Column], partitions: Seq[Transform], properties: Map[String, String])
      : StagedOmniTable = {
    val table = define(ident, columns, partitions, properties)
    if (reader.namespaceProperties(table.namespace).isEmpty) throw new NoSuchNamespaceException(Array(table.namespace))
    if (reader.tableExists(table.address)) throw new TableAlreadyExistsException(ident)
    val writer = new CatalogWriter(reader.address, failpoints = failpoints)
    new StagedOmniTable(
      reader,
      reader.createdSnapshot(table),
      StagedCreate(table, TableDdl.check(ident, table.namespace, _)),
      writer)
  }

  private def define(
      ident: Identifier,
      columns: Seq[Column],
      partitions: Seq[Transform],
      properties: Map[String, String]): NewTable = {
    val namespace = ident.namespace() match {
      case Array() => TableNames.DefaultNamespace
      case Array(ns) if TableNames.validName(ns) => ns
      case _ => throw new NoSuchNamespaceException(ident.namespace())
    }
    Names.checkTable(ident.name())
    val (newColumns, json) =
      TableDefinition(TableNames.address(namespace, ident.name()), columns, partitions, properties)
    NewTable(namespace, ident.name(), NewTable.newId(), newColumns, json)
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

  /** A create's outcome as Spark expects it: NoSuchNamespaceException / TableAlreadyExistsException. */
  def check(ident: Identifier, namespace: String, outcome: DdlWriter.CreateOutcome): Unit = outcome match {
    case DdlWriter.Created(_) =>
    case DdlWriter.NamespaceMissing => throw new NoSuchNamespaceException(Array(namespace))
    case DdlWriter.TableExists => throw new TableAlreadyExistsException(ident)
  }

  /**
   * The new columns of a mergeSchema append: `names` of `input`, nullable, checked as ADD COLUMNS
   * checks them, in `group` or, as ALTER names it, a new group named after the first.
   */
  def mergeColumns(snap: TableSnapshot, input: StructType, names: Seq[String], group: Option[String])
      : Seq[NewColumn] = {
    val what = s"add columns to table '${snap.table.name}' (mergeSchema)"
    val columns = names.map { n =>
      Names.checkColumn(n)
      NewColumn(n, DdlTypes.ddl(input(n).dataType, n, what), nullable = true, group = "")
    }
    val g = group.getOrElse(defaultGroup(snap.columns.map(_.groupName).toSet, names.head))
    Names.checkGroup(g)
    columns.map(_.copy(group = g))
  }

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
 * The table a CTAS writes ([[OmniTableCatalog.stageCreate]]), not in the catalog yet: `snap` is
 * its snapshot right after the create. The write's commit creates it with the first batch in one
 * transaction ([[DdlWriter.createWithAppend]]), so committing the stage changes nothing more.
 * Aborting deletes the table's data directory (its id is new: no other table uses it; the
 * write's own abort already deleted the files it wrote), unless the catalog holds the table with
 * that id or cannot tell (a commit of unknown outcome may have created it).
 */
private[source] final class StagedOmniTable(
    reader: CatalogReader,
    snap: TableSnapshot,
    create: StagedCreate,
    writer: CatalogWriter)
    extends StagedTable
    with SupportsWrite {
  override def name(): String = snap.table.name
  override lazy val schema: StructType = ReadColumn.schema(ReadColumn.tableColumns(snap))
  override def properties(): java.util.Map[String, String] =
    Map("provider" -> "omnitable", "location" -> snap.tableUri).asJava
  override def capabilities(): java.util.Set[TableCapability] =
    java.util.EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA)
  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder =
    new OmniTableWriteBuilder(snap, writer, Map.empty, info, Some(create))
  override def commitStagedChanges(): Unit = ()
  override def abortStagedChanges(): Unit = {
    val address = snap.table.name
    val created = Try(
      reader.tableExists(address) && reader.loadTable(address, SnapshotSpec.Head).table.tableId == snap.table.tableId)
    if (created == Success(false)) {
      val dir = new Path(snap.tableUri)
      try dir.getFileSystem(SparkSession.active.sessionState.newHadoopConf()).delete(dir, true)
      catch { case NonFatal(_) => } // nothing references the files
    }
  }
}
