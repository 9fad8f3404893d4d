"""Branches, tags, merges and write-audit-publish on a training table (docs/branches.md).

Run: .venv/bin/python examples/branches.py [WAREHOUSE_DIR]
(Back-fills run on a branch with ``plan.run(spark, branch="audit")``; SQL checks of
``Table.publish`` run on Spark. This example needs neither.)
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    docs = wh.create_table(
        "docs",
        {"text": "string", "label": "string", "score": "double"},
        groups={"scores": ["score"]},
    )
    docs.append(
        pa.table(
            {
                "text": ["a fine essay", "buy now!!!", "a story", "CLICK HERE", "notes", "poem"],
                "label": ["ok", "ok", "ok", "ok", None, "ok"],
                "score": [0.9, 0.2, 0.8, 0.1, 0.5, 0.7],
            }
        ),
        "crawl/2026-11",
        target_fragment_rows=3,
    )
    docs.create_tag("train-v1")  # pin what the first training run reads
    ids = docs.read(["_ai_unique_id_"])["_ai_unique_id_"].to_pylist()

    # 1. an experiment on a branch: relabel spam; main does not see it
    relabel = docs.create_branch("relabel")
    relabel.update(pa.table({"_ai_unique_id_": [ids[1], ids[3]], "label": ["spam", "spam"]}))
    print("branch labels:", relabel.read(["label"])["label"].to_pylist())
    print("main labels:  ", docs.read(["label"])["label"].to_pylist())

    # 2. meanwhile main re-scores (another column of the same rows) and gets new rows
    docs.update(pa.table({"_ai_unique_id_": [ids[0]], "score": [0.95]}))
    docs.append(pa.table({"text": ["late"], "label": ["ok"], "score": [0.6]}), "crawl/2026-12")

    # 3. merge at column grain: label cells from the branch, score and new rows from main
    result = docs.merge("relabel")
    print(f"merged: version {result.version}, {result.cells} cell(s) adopted, no data copied")
    print("merged rows:", docs.read(["text", "label", "score"]).to_pylist())

    # 4. a true conflict: the same cell changed on both sides
    fix = docs.create_branch("fix")
    fix.update(pa.table({"_ai_unique_id_": [ids[4]], "label": ["ok"]}))
    docs.update(pa.table({"_ai_unique_id_": [ids[4]], "label": ["unsure"]}))
    try:
        docs.merge("fix")
    except omnitable.MergeConflict as exc:
        print(
            "conflict:", [(c.kind, c.column, c.source[-20:], c.target[-20:]) for c in exc.details]
        )
    docs.merge("fix", strategy="theirs")  # take the branch's label
    print("after theirs:", docs.read(["label"], where=pc.field("text") == "notes").to_pylist())

    # 5. write-audit-publish: write on a branch, check it, merge only if the checks pass
    audit = docs.create_branch("audit")
    audit.delete(pc.field("score") < 0.15)

    def no_spam(branch: omnitable.Table) -> bool:
        return branch.read(["label"], where=pc.field("label") == "spam").num_rows == 0

    def keeps_most_rows(branch: omnitable.Table) -> bool:
        return branch.count() >= 0.7 * docs.count()

    try:
        docs.publish("audit", [no_spam, keeps_most_rows])
    except omnitable.AuditFailed as exc:
        print(f"audit failed: {exc.check} {exc.reason}; main unchanged ({docs.count()} rows)")
    audit.delete(pc.field("label") == "spam")  # fix the branch, then publish again
    result = docs.publish("audit", [no_spam, keeps_most_rows])
    print(f"published: version {result.version}, fast-forward: {result.fast_forward}")

    # 6. the tag still reads exactly what the first training run read
    print("train-v1 rows:", docs.read(["text"], tag="train-v1").num_rows, "now:", docs.count())
    print("branches:", [b.name for b in docs.branches()], "tags:", [t.name for t in docs.tags()])
    docs.delete_branch("relabel")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-branches-"))
