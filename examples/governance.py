"""Compaction and folding: a batch appended in many small pieces, with deletes and an update,
rewritten into one fragment without changing a value (docs/governance.md).

Run: .venv/bin/python examples/governance.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    docs = wh.create_table("docs", {"url": "string", "text": "string"})
    urls = [f"https://site{i}.example" for i in range(40)]
    docs.append(pa.table({"url": urls, "text": [f"page {i}" for i in range(40)]}),
                append_name="crawl/2026-11", target_fragment_rows=4)  # fmt: skip
    docs.delete(pc.field("url") == urls[3])
    first = docs.read(columns=["_ai_unique_id_"]).column(0)[0].as_py()
    docs.update(pa.table({"_ai_unique_id_": [first], "text": ["fixed"]}))
    before = docs.read()
    print(f"before: {docs.batches()[0].fragments} fragments")

    # 1. look first: what would each job do?
    for result in docs.maintain(["compact", "fold"], dry_run=True):
        print(result.plan.describe())

    # 2. compact: one commit replaces the batch's 10 fragments with one, deleted row dropped
    (result,) = docs.maintain(["compact"])
    print(f"{result.outcome} -> version {result.version}: {dict(result.summary)}")
    assert docs.read().equals(before) and docs.batches()[0].fragments == 1

    # 3. nothing left to fold: no deletion vector, no overlay file
    (fold,) = docs.maintain(["fold"])
    print(f"fold: {fold.outcome}")
    wh.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-gov-"))
