"""Deleting rows: drop bad samples with deletion vectors, check them gone, time-travel back.

Run: .venv/bin/python examples/dataops.py [WAREHOUSE_DIR]
(Spark readers — ``Table.to_spark()``, ``spark.read.format("omnitable")``, SQL — honour the
same deletes; see docs/dataops.md.)
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    docs = wh.create_table("docs", {"url": "string", "text": "string", "label": "string"})
    texts = ["buy now!!!", "a fine essay", "lorem ipsum", "a story", "CLICK HERE", "notes"]
    texts += ["poem", "recipe"]
    docs.append(
        pa.table(
            {
                "url": [f"https://site{i}.example" for i in range(8)],
                "text": texts,
                "label": ["spam", "ok", "spam", "ok", "spam", None, "ok", "ok"],
            }
        ),
        append_name="crawl/2026-11",
        target_fragment_rows=4,
    )
    before = docs.version

    # 1. delete by a filter: one commit of per-fragment deletion vectors, no file rewritten
    result = docs.delete(pc.field("label") == "spam", why="spam filter v2")
    print(f"deleted {result.rows} rows in {result.fragments} fragments -> version {result.version}")

    # 2. delete by row id (e.g. ids a dedup job found)
    ids = docs.read(["_ai_unique_id_", "text"], where=pc.field("text") == "notes")
    docs.delete(ids=ids["_ai_unique_id_"].to_pylist(), why="near-duplicate")

    # 3. the rows are gone from reads, counts and plans ...
    print(docs.read(["url", "label"]).to_pandas())
    print("rows now:", docs.count(), "| batches:", docs.batches())
    assert docs.count() == 4

    # 4. ... and still there in the versions before the delete (time travel)
    assert docs.count(version=before) == 8
    assert docs.read(["label"], version=before)["label"].to_pylist().count("spam") == 3

    # 5. a delete that matches nothing commits nothing
    assert docs.delete(pc.field("label") == "spam").version is None
    for h in docs.history(3):
        print(h.version, h.op, h.summary)
    wh.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-dataops-"))
