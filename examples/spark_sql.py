"""OmniTable from Spark SQL: namespaces, INSERT INTO / OVERWRITE, metadata tables, procedures.

Creates a table in a namespace with the Python API (tables are created there), then works on it
from SQL only: appends committed by the JVM, a batch replaced, the table's history and files as
metadata tables, a tag made with CALL and read back, and DROP TABLE.
Run: .venv/bin/python examples/spark_sql.py [WAREHOUSE_DIR]
(on Spark Connect: omnitable.spark_session(wh, remote="local[2]") instead, the rest unchanged)
"""

from __future__ import annotations

import sys
import tempfile

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    wh.create_namespace("crawl")
    wh.create_table("crawl.web", {"url": "string", "lang": "string", "score": "double"})
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    spark = omnitable.spark_session(wh, master="local[2]", **settings)
    spark.sparkContext.setLogLevel("ERROR")
    sql = spark.sql
    try:
        print([r.namespace for r in sql("SHOW NAMESPACES IN omnitable").collect()])

        # Each INSERT is one named batch (the write option append_name, or this setting).
        sql("SET spark.omnitable.write.appendName = cc/2026-11")
        sql("INSERT INTO omnitable.crawl.web VALUES ('https://a.example', 'en', 0.5)")
        sql("SET spark.omnitable.write.appendName = cc/2026-12")
        sql(
            "INSERT INTO omnitable.crawl.web (url, lang, score) "
            "SELECT concat('https://b.example/', id), 'fr', id / 10 FROM range(5)"
        )
        sql("CALL omnitable.system.create_tag(table => 'crawl.web', tag => 'before-fix')")

        # INSERT OVERWRITE replaces the named batch only; cc/2026-11 stays.
        sql("INSERT OVERWRITE omnitable.crawl.web SELECT 'https://b.example/0', 'fr', 1.0")
        sql("SELECT _ai_append_name_, url, score FROM omnitable.crawl.web ORDER BY url").show()

        sql("SELECT version, op, committed_at FROM omnitable.crawl.web.history").show()
        sql("SELECT name, rows, fragments FROM omnitable.crawl.web.batches").show()
        sql("SELECT group_name, count(*) AS files FROM omnitable.crawl.web.files GROUP BY 1").show()

        rows = sql("SELECT count(*) FROM omnitable.crawl.web VERSION AS OF 'before-fix'").first()
        print("rows at tag before-fix:", rows[0])  # 6: both batches as first written

        # The Python API sees what SQL wrote.
        web = wh.table("crawl.web")
        print(
            "Python: batches", [b.name for b in web.batches()], "tags", [t.name for t in web.tags()]
        )
        sql("DROP TABLE omnitable.crawl.web")
        print("tables left in crawl:", wh.tables(namespace="crawl"))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-sql-"))
