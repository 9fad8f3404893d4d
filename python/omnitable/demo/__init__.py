"""The built-in demo (``omnitable demo``): application code that uses only OmniTable's public
API (``import omnitable``), like a user's program.

* :mod:`~omnitable.demo.pipeline` — :func:`run_demo`: the ``code`` table (the Python standard
  library) and the ``docs`` table (Debian package documentation), ingested, extended with
  ``add_columns``, read back with filters and time travel, and summarized;
* :mod:`~omnitable.demo.backfill` — the Spark part: features on ``docs``, backfills, the status
  grid and a Spark SQL query;
* :mod:`~omnitable.demo.features` — the demo's features, registered by import path
  (``omnitable.demo.features:clean_text`` …).
"""

from omnitable.demo.pipeline import DemoResult, TableSummary, run_demo

__all__ = ["DemoResult", "TableSummary", "run_demo"]
