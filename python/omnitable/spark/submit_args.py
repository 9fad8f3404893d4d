"""``python -m omnitable.spark.submit_args [WAREHOUSE]``: the spark-submit flags for OmniTable.

Prints ``--jars <extension jar> --conf spark.sql.extensions=… --conf spark.sql.catalog.omnitable=…``
(one shell word per item) so batch jobs get the same wiring as :func:`omnitable.spark_session`.
"""

from __future__ import annotations

import sys

from omnitable.spark.session import (
    CATALOG_CLASS,
    CATALOG_NAME,
    EXTENSIONS_CLASS,
    jar_path,
    warehouse_string,
)


def submit_args(warehouse: str | None = None) -> list[str]:
    wh = warehouse_string(warehouse)
    return [
        "--jars",
        str(jar_path()),
        "--conf",
        f"spark.sql.extensions={EXTENSIONS_CLASS}",
        "--conf",
        f"spark.sql.catalog.{CATALOG_NAME}={CATALOG_CLASS}",
        "--conf",
        f"spark.sql.catalog.{CATALOG_NAME}.warehouse={wh}",
        "--conf",
        f"spark.omnitable.warehouse={wh}",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
    ]


if __name__ == "__main__":
    print(" ".join(submit_args(sys.argv[1] if len(sys.argv) > 1 else None)))
