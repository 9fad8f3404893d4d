"""Quick start: a logical wide table in a local warehouse, no Spark needed.

Run: .venv/bin/python examples/quickstart.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    web = wh.create_table(
        "web",
        {"url": "string", "text": "string", "lang": "string", "fetched": "timestamp"},
        groups={"payload": ["text"]},  # wide text in its own column group
    )
    web.append(
        pd.DataFrame(
            {
                "url": ["https://a.example", "https://b.example"],
                "text": ["Hello world", "Bonjour le monde"],
                "lang": ["en", "fr"],
                "fetched": pd.to_datetime(["2026-10-01", "2026-10-02"], utc=True),
            }
        ),
        append_name="cc/2026-10/v1",
    )
    web.append(
        pa.table({"url": ["https://c.example"], "text": ["Hallo Welt"], "lang": ["de"]}),
        append_name="cc/2026-11/v1",
    )

    # attach a derived column to existing rows: writes only the new column's files
    rows = web.read(columns=["_ai_unique_id_", "text"])
    web.add_columns(
        pa.table(
            {
                "_ai_unique_id_": rows.column("_ai_unique_id_"),
                "n_chars": pc.utf8_length(rows.column("text")),
            }
        )
    )

    print(web.read(columns=["_ai_append_name_", "url", "lang", "n_chars"]).to_pandas())
    print(web.read(columns=["url"], where=pc.field("n_chars") > 10).to_pandas())
    print("batches:", [(b.name, b.rows) for b in web.batches()])
    print("version", web.version, "history:", [(h.version, h.op) for h in web.history()])
    print("version 1 had", web.read(version=1).num_rows, "rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-"))
