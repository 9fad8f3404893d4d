-- The statements of an append's commit, shared by the Python committer (catalog/commit.py,
-- catalog/catalog.py) and the JVM committer (jvm/.../catalog/CatalogWriter.scala, bundled in the
-- jar by build.sbt). One statement per `-- name: <name>` header, parameters as `:name`; the JVM
-- binds them by position, so keep each parameter's first occurrence in the order given in the
-- comment. `{vis}` / `{in}` are filled in by the caller (a visibility clause, an IN list).
-- docs/catalog.md, "Commits and concurrency", specifies what they do.

-- name: schema_version
SELECT value FROM omnitable_meta WHERE key = 'schema_version'

-- name: lock_table
-- (t) PostgreSQL only: serialize commits on one table.
SELECT table_id FROM tables WHERE table_id = :t FOR UPDATE

-- name: table_row
-- (t)
SELECT table_id, name, location FROM tables WHERE table_id = :t

-- name: next_row_id
-- (t)
SELECT next_row_id FROM tables WHERE table_id = :t

-- name: set_next_row_id
-- (n, t)
UPDATE tables SET next_row_id = :n WHERE table_id = :t

-- name: visible_columns
-- (t, visibility parameters)
SELECT name, column_id, added_version, state FROM columns c WHERE c.table_id = :t AND {vis}

-- name: live_batch_by_name
-- (t, name, visibility parameters)
SELECT b.batch_id, b.name, b.added_version FROM batches b WHERE b.table_id = :t AND b.name = :name AND {vis}

-- name: row_id_stats_since
-- (t, b, since) the _ai_unique_id_ statistics (column 0) of the files committed after `since`
SELECT fi.stats, cs.position FROM files fi JOIN column_sets cs ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id WHERE fi.table_id = :t AND fi.branch = :b AND fi.added_version > :since AND cs.column_id = 0

-- name: next_version
-- (t)
SELECT COALESCE(MAX(version), -1) + 1 FROM commits WHERE table_id = :t

-- name: last_commit_time
-- (t)
SELECT MAX(committed_at) FROM commits WHERE table_id = :t

-- name: insert_batch
-- (t, id, name, b, v, now, rows, frags, pos) pos: the batch's read position (the commit's version,
-- or the position of the batch row it copies)
INSERT INTO batches (table_id, batch_id, name, branch, added_version, removed_version, created_at, row_count, fragment_count, position) VALUES (:t, :id, :name, :b, :v, NULL, :now, :rows, :frags, :pos)

-- name: insert_fragment
-- (t, id, bid, seq, n, p, b, v, pos) pos: its batch's position
INSERT INTO fragments (table_id, fragment_id, batch_id, seq, row_count, path, branch, added_version, removed_version, position) VALUES (:t, :id, :bid, :seq, :n, :p, :b, :v, NULL, :pos)

-- name: existing_sets
-- (t, set ids)
SELECT DISTINCT set_id FROM column_sets WHERE table_id = :t AND {in}

-- name: insert_column_set
-- (t, s, c, p, fv)
INSERT INTO column_sets (table_id, set_id, column_id, position, feature_version) VALUES (:t, :s, :c, :p, :fv) ON CONFLICT (table_id, set_id, column_id) DO NOTHING

-- name: insert_file
-- (t, id, frag, g, p, n, s, b, v, r, set, st)
INSERT INTO files (table_id, file_id, fragment_id, group_name, path, row_count, size_bytes, branch, added_version, removed_version, run_id, set_id, stats) VALUES (:t, :id, :frag, :g, :p, :n, :s, :b, :v, NULL, :r, :set, :st)

-- name: insert_commit
-- (t, v, p, b, op, r, s, now, tok)
INSERT INTO commits (table_id, version, parent_version, branch, op, run_id, summary, committed_at, commit_token) VALUES (:t, :v, :p, :b, :op, :r, :s, :now, :tok)

-- name: move_ref
-- (v, t, b)
UPDATE refs SET version = :v WHERE table_id = :t AND name = :b

-- name: find_commit
-- (t, k)
SELECT version FROM commits WHERE table_id = :t AND commit_token = :k

-- name: fragments_of_batches
-- (t, visibility parameters, batch or fragment ids) the visible fragments of an append's replaced
-- batches ({in} on f.batch_id), or the visible fragments among some ids ({in} on f.fragment_id)
SELECT f.fragment_id FROM fragments f WHERE f.table_id = :t AND {vis} AND {in}

-- name: end_rows
-- (v, t, val, b) end a row of table {kind} by column {by}, as of version v on branch b
UPDATE {kind} SET removed_version = :v WHERE table_id = :t AND {by} = :val AND removed_version IS NULL AND branch = :b

-- name: insert_removals
-- (k, b, v, t, b, visibility parameters, values, k, b) ending, on branch b as of version v, rows of
-- table {kind} it inherits (owned by another branch; removals.py `end_rows`): {row_id} is the
-- row's id in `removals` (e.g. x.vector_id), {in} selects the rows by value
INSERT INTO removals (table_id, kind, row_id, row_version, branch, version) SELECT x.table_id, :k, {row_id}, x.added_version, :b, :v FROM {kind} x WHERE x.table_id = :t AND x.branch <> :b AND {vis} AND {in} AND NOT EXISTS (SELECT 1 FROM removals y WHERE y.table_id = x.table_id AND y.kind = :k AND y.row_id = {row_id} AND y.row_version = x.added_version AND y.branch = :b)

-- name: head_deletion_vectors
-- (t, visibility parameters, fragment ids) the visible deletion vector of each named fragment
-- (commit.py `_check_deletions`: a delete replaces exactly the vector it saw)
SELECT d.fragment_id, d.vector_id FROM deletion_vectors d WHERE d.table_id = :t AND {vis} AND {in}

-- name: insert_deletion_vector
-- (t, id, f, b, n, vec, br, v) a fragment's new cumulative deletion vector (commit.py `_apply_deletions`)
INSERT INTO deletion_vectors (table_id, vector_id, fragment_id, batch_id, deleted_count, vector, branch, added_version, removed_version) VALUES (:t, :id, :f, :b, :n, :vec, :br, :v, NULL)

-- name: column_providers
-- (t, visibility parameters, fragment ids) the visible files of the named fragments and the
-- columns they carry; the newest file providing a column provides it (commit.py `_head_providers`)
SELECT fi.fragment_id, cs.column_id, fi.file_id, fi.added_version FROM files fi JOIN column_sets cs ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id WHERE fi.table_id = :t AND {vis} AND {in}

-- name: delete_table_rows
-- (t) dropping a table: its rows of table {kind}; run for every table of schema.sql that has a
-- table_id column (`tables` last), in one transaction (Warehouse.drop_table, DROP TABLE)
DELETE FROM {kind} WHERE table_id = :t

-- name: start_run
-- (r, t, k, p, now, host, pid, now2) a run starts: ingest (Python and JVM appends) or backfill
INSERT INTO runs (run_id, table_id, kind, status, plan, metrics, message, started_at, finished_at, host, pid, heartbeat_at) VALUES (:r, :t, :k, 'running', :p, NULL, NULL, :now, NULL, :host, :pid, :now2)

-- name: finish_run
-- (s, m, msg, now, r) a run ends: succeeded, failed or aborted
UPDATE runs SET status = :s, metrics = :m, message = :msg, finished_at = :now WHERE run_id = :r

-- name: heartbeat_run
-- (now, r) a running run's driver is alive
UPDATE runs SET heartbeat_at = :now WHERE run_id = :r AND status = 'running'

-- name: cell_writes_since
-- (t, b, base, base, b, base, fragment ids) the (fragment, column name) cells of the given
-- fragments whose files were added or removed on branch b after version base (commit.py
-- `_check_cell_conflicts`: a concurrent write of a cell an update or backfill also writes)
SELECT fi.fragment_id, c.name FROM files fi JOIN column_sets cs ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id JOIN columns c ON c.table_id = cs.table_id AND c.column_id = cs.column_id WHERE fi.table_id = :t AND ((fi.branch = :b AND (fi.added_version > :base OR (fi.removed_version IS NOT NULL AND fi.removed_version > :base))) OR EXISTS (SELECT 1 FROM removals x WHERE x.table_id = fi.table_id AND x.kind = 'files' AND x.row_id = fi.file_id AND x.row_version = fi.added_version AND x.branch = :b AND x.version > :base)) AND {in}

-- name: insert_lineage
-- (t, f, c, feat, fv, inp, r, e, n) the lineage of one derived column in one new file
INSERT INTO lineage (table_id, file_id, column_id, feature, feature_version, inputs, run_id, engine, error_count) VALUES (:t, :f, :c, :feat, :fv, :inp, :r, :e, :n)

-- name: visible_fragments
-- (t, visibility parameters, fragment ids) which of the given fragments are visible
SELECT f.fragment_id FROM fragments f WHERE f.table_id = :t AND {vis} AND {in}

-- name: file_feature_versions
-- (t, visibility parameters, fragment ids) the visible files of the given fragments, with the
-- feature version of each column they carry (an update keeps the version of the file it rewrites)
SELECT fi.fragment_id, cs.column_id, cs.feature_version, fi.added_version, fi.file_id FROM files fi JOIN column_sets cs ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id WHERE fi.table_id = :t AND {vis} AND {in}

-- name: key_rows_changed_since
-- (t, b, since, since) whether rows of table {kind} (fragments, deletion_vectors) of branch b
-- were added or ended after version `since` (commit.py `_check_keys`: an upsert's keys were
-- checked against the rows as of `since`)
SELECT 1 FROM {kind} WHERE table_id = :t AND branch = :b AND (added_version > :since OR removed_version > :since) LIMIT 1

-- name: key_rows_removed_since
-- (t, b, k, since) whether branch b ended rows of table k it inherits after version `since`
-- (`removals`; commit.py `_check_keys`)
SELECT 1 FROM removals WHERE table_id = :t AND branch = :b AND kind = :k AND version > :since LIMIT 1
