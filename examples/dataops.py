"""Deleting rows: drop bad samples with deletion vectors, check them gone, time-travel back;
then a keyed table: merge late-arriving samples by URL with upserts and find rows by key.

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
    upserts(wh)
    wh.close()


def upserts(wh: omnitable.Warehouse) -> None:
    """A keyed table: new URLs are inserted, known ones merged in place (docs/dataops.md)."""
    pages = wh.create_table(
        "pages", {"url": "string", "label": "string", "sources": "array<string>"}, key="url"
    )
    first = pa.table({"url": ["a.example", "b.example"], "label": ["ok", "spam"],
                      "sources": [["crawl-1"], ["crawl-1"]]})  # fmt: skip
    pages.upsert(first)

    # 6. late data: b.example is relabelled, c.example is new (last_write_wins, the default)
    late = pa.table({"url": ["b.example", "c.example"], "label": ["ok", "ok"]})
    result = pages.upsert(late, why="relabel after review")
    print(f"inserted {result.inserted}, merged {result.merged} -> version {result.version}")

    # 7. another crawl saw a.example too: append its source instead of replacing the list
    more = pa.table({"url": ["a.example"], "sources": [["crawl-2"]]})
    pages.upsert(more, policy="append_list")

    # 8. point lookups go through the key index, never a scan
    found = pages.lookup(["a.example", "b.example", "nowhere.example"], ["url", "label", "sources"])
    print(found.to_pylist())
    assert found.column("sources")[0].as_py() == ["crawl-1", "crawl-2"]
    assert found.column("label").to_pylist() == ["ok", "ok"]
    assert pages.count() == 3


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-dataops-"))
