"""Shared vocabulary: the leaf layer every other layer may import (docs/architecture.md).

System column names and name rules (:mod:`.names`), the logical type mapping (:mod:`.types`),
column statistics (:mod:`.stats`) and descriptors of written files (:mod:`.descriptors`). It
imports nothing from OmniTable but :mod:`omnitable.exceptions`.
"""
