-- OmniTable catalog schema: the SQL contract between the Python control plane (the writer)
-- and the JVM query plane (a reader, which writes only `namespaces` rows: CREATE / DROP
-- NAMESPACE). Both sides load THIS file; see docs/catalog.md.
--
-- Portable subset of SQL accepted by SQLite 3.35+ and PostgreSQL 13+: TEXT, BIGINT, INTEGER,
-- DOUBLE PRECISION, no auto-increment (ids are allocated by the writer), timestamps as ISO-8601
-- UTC text ('2026-11-29T11:24:37.123456Z'), JSON documents as TEXT.
-- Statements are separated by lines holding a single ';'.
--
-- omnitable-schema-version: 7

CREATE TABLE IF NOT EXISTS omnitable_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
)
;
-- Namespaces (one level) holding tables. `default` always exists (created with the catalog,
-- never dropped); a table named without a namespace is in it. `properties` is a JSON object
-- (Spark's COMMENT, LOCATION and WITH DBPROPERTIES, free metadata).
CREATE TABLE IF NOT EXISTS namespaces (
    name            TEXT PRIMARY KEY,
    properties      TEXT NOT NULL,
    created_at      TEXT NOT NULL
)
;
-- One row per logical wide table, named `name` in namespace `namespace` (a row of namespaces).
-- `location` is the table's data directory relative to the
-- warehouse root (or an absolute URI); it is unique per table id (`<name>-<table_id>` in
-- `default`, `<namespace>.<name>-<table_id>` elsewhere), so a dropped table's purge never
-- touches a re-created table of the same name. `next_row_id` is the first `_ai_unique_id_` not yet
-- reserved; reservations are never handed out twice (gaps are allowed).
CREATE TABLE IF NOT EXISTS tables (
    table_id        TEXT PRIMARY KEY,
    namespace       TEXT NOT NULL,
    name            TEXT NOT NULL,
    location        TEXT NOT NULL,
    next_row_id     BIGINT NOT NULL,
    next_column_id  INTEGER NOT NULL,
    properties      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (namespace, name)
)
;
-- Logical columns. `column_id` is never reused within a table; files reference columns by id,
-- so a dropped-and-recreated name never picks up the old data. `physical_name` is the field
-- name inside Parquet column files. `data_type` is a Spark SQL DDL type string
-- (bigint, string, array<double>, struct<a:int,b:string>, decimal(10,2), timestamp, ...).
-- `state`: active | retired (hidden from reads, schema and planning, data kept, restorable;
-- older catalogs may hold deprecated | dropped rows, which readers treat like retired).
-- `group_name`: the column group new files of this column are written to. `feature`: the
-- registered feature producing it (NULL for raw columns). Rows are versioned: a rename, retire
-- or restore removes the column's current row (removed_version) and adds its next one under the
-- same column_id, so a column has one row per change and time travel sees each name and state
-- in its versions. Visibility in a snapshot follows the same (branch, added_version,
-- removed_version) rule as files; a snapshot sees at most one row per column_id. `_ai_unique_id_` is column 0 (group `base`); `_ai_append_name_` is virtual (the
-- fragment's batch name) and has no row here.
CREATE TABLE IF NOT EXISTS columns (
    table_id        TEXT NOT NULL,
    column_id       INTEGER NOT NULL,
    name            TEXT NOT NULL,
    physical_name   TEXT NOT NULL,
    data_type       TEXT NOT NULL,
    nullable        INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    state           TEXT NOT NULL,
    group_name      TEXT NOT NULL,
    feature         TEXT,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    PRIMARY KEY (table_id, column_id, added_version)
)
;
-- Commits: one per table version. Versions are allocated per table, across branches, in
-- increasing order. `parent_version` is the version the commit was applied on (NULL for the
-- table's creation). `summary` is a JSON object (rows, files, bytes, ...). `committed_at` never
-- decreases with the version within a table. `commit_token` is unique per commit attempt: a
-- writer whose connection dropped during COMMIT looks it up to learn whether the commit landed.
CREATE TABLE IF NOT EXISTS commits (
    table_id        TEXT NOT NULL,
    version         BIGINT NOT NULL,
    parent_version  BIGINT,
    branch          TEXT NOT NULL,
    op              TEXT NOT NULL,
    run_id          TEXT,
    summary         TEXT NOT NULL,
    committed_at    TEXT NOT NULL,
    commit_token    TEXT,
    PRIMARY KEY (table_id, version)
)
;
CREATE INDEX IF NOT EXISTS commits_by_token ON commits (table_id, commit_token)
;
-- Every commit reads the table's latest committed_at (it never decreases with the version).
CREATE INDEX IF NOT EXISTS commits_by_time ON commits (table_id, committed_at)
;
-- Named refs. kind = branch | tag. A branch's `version` is its head; `parent_branch` and
-- `fork_version` say where it forked (NULL for main). A tag pins `version` on `parent_branch`.
-- Branches and tags share one namespace per table. `max_age_s`: a tag's retention in seconds
-- from `created_at` (NULL: kept until deleted); cleanup never expires what a live tag pins.
-- A deleted branch's rows (commits, versioned rows, removals) move to the branch name
-- `~deleted~<name>~<version>`, which no ref names, so a new branch of the same name starts empty.
CREATE TABLE IF NOT EXISTS refs (
    table_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL,
    version         BIGINT NOT NULL,
    parent_branch   TEXT,
    fork_version    BIGINT,
    created_at      TEXT NOT NULL,
    max_age_s       BIGINT,
    PRIMARY KEY (table_id, name)
)
;
-- Removals of inherited rows. A commit on branch `branch` that removes a versioned row of
-- another branch (one it sees through its fork) cannot set that row's removed_version, which
-- would hide it on the other branch too: it records the removal here instead. `kind` is the
-- row's table (batches | fragments | files | deletion_vectors | columns), `row_id` its id
-- (batch_id, fragment_id, file_id, vector_id; for columns the column_id as text) and
-- `row_version` its added_version. A row is hidden in a snapshot when one of its removals has a
-- (branch, version) inside one of the snapshot's segments (docs/catalog.md, "Resolving a
-- snapshot"); a main-line snapshot never has any (every row it sees is main's own).
CREATE TABLE IF NOT EXISTS removals (
    table_id        TEXT NOT NULL,
    kind            TEXT NOT NULL,
    row_id          TEXT NOT NULL,
    row_version     BIGINT NOT NULL,
    branch          TEXT NOT NULL,
    version         BIGINT NOT NULL,
    PRIMARY KEY (table_id, kind, row_id, row_version, branch)
)
;
CREATE INDEX IF NOT EXISTS removals_by_branch ON removals (table_id, branch, version)
;
-- Batches (one per `_ai_append_name_` in a snapshot). A replaced batch gets a removed_version
-- and a new batch_id. Visibility rules are the same as for files (see below). `row_count` and
-- `fragment_count` are the batch's rows and fragments: a batch's fragments are added with it and
-- removed with it, so they hold in every snapshot that sees the batch (a commit that changed a
-- batch's fragments would replace the batch row, as `mode="replace"` does). `position` is the
-- batch's read position: the version of the append (or replace) that gave the batch its place.
-- Readers list batches, and return rows, ordered by (position, name). A copy of a batch row (a
-- rollback, a revert, a branch merge or rebase, a compaction) keeps the position of the row it
-- copies, so the batch keeps its place; a replace gets its own version (the batch moves last).
CREATE TABLE IF NOT EXISTS batches (
    table_id        TEXT NOT NULL,
    batch_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    created_at      TEXT NOT NULL,
    row_count       BIGINT NOT NULL DEFAULT 0,
    fragment_count  BIGINT NOT NULL DEFAULT 0,
    position        BIGINT NOT NULL,
    PRIMARY KEY (table_id, batch_id)
)
;
-- A read of some batches finds them by name (docs/catalog.md, "What a snapshot loads").
CREATE INDEX IF NOT EXISTS batches_by_name ON batches (table_id, name)
;
-- Fragments: immutable, ordered slices of one batch's rows. A row's address is
-- (fragment_id, offset). `path` is the fragment's directory relative to the table location.
-- `seq` orders the fragments of a batch: readers return rows ordered by (position, batch_id,
-- seq, offset). `position` is a copy of the batch's `position` (fragments are added with their
-- batch and never move, and a copied fragment keeps it like its copied batch): the read order
-- comes from the fragments alone, without a join to `batches` (docs/catalog.md, "Read order").
CREATE TABLE IF NOT EXISTS fragments (
    table_id        TEXT NOT NULL,
    fragment_id     TEXT NOT NULL,
    batch_id        TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    row_count       BIGINT NOT NULL,
    path            TEXT NOT NULL,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    position        BIGINT NOT NULL,
    PRIMARY KEY (table_id, fragment_id)
)
;
CREATE INDEX IF NOT EXISTS fragments_by_batch ON fragments (table_id, batch_id)
;
-- Column files. Each holds exactly its fragment's rows in fragment order (alignment invariant)
-- and the columns of its column set (`set_id`, see column_sets). `path` is relative to the table
-- location. A file is visible in a snapshot when its (branch, added_version) is in the
-- snapshot's ancestry and its removed_version is not (see docs/catalog.md, "Resolving a
-- snapshot"). `stats` holds the statistics planning uses, one entry per column of the set in
-- the set's `position` order: a JSON array of `[null_count, min, max]` (min/max as text in the
-- column's canonical encoding, see docs/catalog.md; null when not kept), or NULL when the file
-- kept none. One row per file, however many columns it carries.
CREATE TABLE IF NOT EXISTS files (
    table_id        TEXT NOT NULL,
    file_id         TEXT NOT NULL,
    fragment_id     TEXT NOT NULL,
    group_name      TEXT NOT NULL,
    path            TEXT NOT NULL,
    row_count       BIGINT NOT NULL,
    size_bytes      BIGINT NOT NULL,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    run_id          TEXT,
    set_id          TEXT NOT NULL,
    stats           TEXT,
    PRIMARY KEY (table_id, file_id)
)
;
CREATE INDEX IF NOT EXISTS files_by_fragment ON files (table_id, fragment_id)
;
CREATE INDEX IF NOT EXISTS files_by_version ON files (table_id, added_version)
;
-- A full scan lists the files of its columns' sets from this index alone (every column it
-- selects is in the key, so no table row is read): at 15 M files the files of 2 sets are 4 % of
-- the rows but spread over every page of the table. set_id leads, so statements that keep it out
-- of index choice (`fi.set_id || ''`: plans of some fragments, which look files up by
-- fragment) cannot walk this index by table_id instead.
CREATE INDEX IF NOT EXISTS files_by_set ON files (set_id, table_id, branch, added_version, removed_version, fragment_id, file_id, group_name, path, row_count, size_bytes)
;
-- Column sets: which logical columns a file carries and, for derived columns, the producing
-- feature version. A set is stored once and shared by every file with the same list (a table
-- has a few sets per column group and feature version, not one per file), so the catalog grows
-- by one `files` row per file instead of one row per file and column. Sets are immutable and
-- identified by their content: `set_id` is the first 16 hex digits of the SHA-256 of the
-- set's `column_id:feature_version` pairs in ascending column id, joined by ';' (an empty
-- feature version for raw columns), so concurrent writers of the same set insert the same rows.
-- `position` is the column's index in the set (0, 1, ... in ascending column id), which is its
-- index in a file's `stats`.
CREATE TABLE IF NOT EXISTS column_sets (
    table_id        TEXT NOT NULL,
    set_id          TEXT NOT NULL,
    column_id       INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    feature_version TEXT,
    PRIMARY KEY (table_id, set_id, column_id)
)
;
-- A read of some columns finds the sets (then the files) carrying them.
CREATE INDEX IF NOT EXISTS column_sets_by_column ON column_sets (table_id, column_id)
;
-- Deletion vectors: the deleted rows of one fragment, by offset (merge-on-read deletes, see
-- docs/dataops.md). A vector is cumulative: a snapshot sees at most one vector per fragment, and
-- a delete that hits a fragment already holding one removes that vector (removed_version) and
-- adds the union. Visibility follows the same (branch, added_version, removed_version) rule as
-- files, so time travel to a version before a delete sees its rows. `batch_id` is the
-- fragment's batch (fragments never move). `deleted_count` is the number of set bits, never 0.
-- `vector` is the base64 (RFC 4648, padded) of the zlib (RFC 1950) compression of a bitmap of
-- the fragment's row_count bits: row offset i is bit (i % 8), least significant first, of byte
-- (i / 8); a set bit is a deleted row; the bits past row_count are 0.
CREATE TABLE IF NOT EXISTS deletion_vectors (
    table_id        TEXT NOT NULL,
    vector_id       TEXT NOT NULL,
    fragment_id     TEXT NOT NULL,
    batch_id        TEXT NOT NULL,
    deleted_count   BIGINT NOT NULL,
    vector          TEXT NOT NULL,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    PRIMARY KEY (table_id, vector_id)
)
;
CREATE INDEX IF NOT EXISTS deletion_vectors_by_fragment ON deletion_vectors (table_id, fragment_id)
;
-- Live row counts per batch subtract the deleted rows of the batch's visible vectors.
CREATE INDEX IF NOT EXISTS deletion_vectors_by_batch ON deletion_vectors (table_id, batch_id)
;
-- Registered features: one row per registration of a feature version. `definition` is a JSON
-- document (inputs, outputs, kind, import reference or SQL, preferences); `fingerprint` hashes
-- the code. `registered_version` is the table version whose commit (re-)registered it, on
-- `branch`: a row is visible in a snapshot when (branch, registered_version) lies inside one of
-- its segments, and the current version of a feature there is its visible row with the highest
-- `registered_version` (catalog order, not wall clock). Making an older version current again
-- (a rollback, a revert, a merge) adds a row for it; rows are never updated.
CREATE TABLE IF NOT EXISTS features (
    table_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    version         TEXT NOT NULL,
    kind            TEXT NOT NULL,
    definition      TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    registered_at   TEXT NOT NULL,
    registered_version BIGINT NOT NULL,
    branch          TEXT NOT NULL,
    PRIMARY KEY (table_id, name, version, registered_version)
)
;
-- Runs: one execution (ingest, backfill, governance) with plan, status, timings and metrics.
-- status = running | succeeded | failed | aborted. `host` and `pid` name the driver process;
-- it refreshes `heartbeat_at` while it runs, so a `running` row whose driver is gone (pid dead on
-- that host, or no heartbeat for a while) is reported as `abandoned`.
CREATE TABLE IF NOT EXISTS runs (
    run_id          TEXT PRIMARY KEY,
    table_id        TEXT NOT NULL,
    kind            TEXT NOT NULL,
    status          TEXT NOT NULL,
    plan            TEXT,
    metrics         TEXT,
    message         TEXT,
    started_at      TEXT NOT NULL,
    finished_at     TEXT,
    host            TEXT,
    pid             BIGINT,
    heartbeat_at    TEXT
)
;
-- Lineage of derived column files: which feature version produced a column in a file, from
-- which input files (JSON list of {column, file_id, version}), in which run, on which engine,
-- and how many of the file's records failed the feature (NULL outputs with an error record in
-- the table's error table, see docs/errors.md).
CREATE TABLE IF NOT EXISTS lineage (
    table_id        TEXT NOT NULL,
    file_id         TEXT NOT NULL,
    column_id       INTEGER NOT NULL,
    feature         TEXT NOT NULL,
    feature_version TEXT NOT NULL,
    inputs          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    engine          TEXT NOT NULL,
    error_count     BIGINT NOT NULL,
    PRIMARY KEY (table_id, file_id, column_id)
)
;
-- Where each table's record-level error table lives (a Delta table), see docs/errors.md.
CREATE TABLE IF NOT EXISTS error_tables (
    table_id        TEXT PRIMARY KEY,
    location        TEXT NOT NULL,
    created_at      TEXT NOT NULL
)
;
