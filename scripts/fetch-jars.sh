#!/usr/bin/env bash
# Download the third-party Spark jars OmniTable uses at run time (Delta Lake, for error tables and
# materialized views) from Maven Central into python/omnitable/jars/, checking pinned SHA-1 sums.
# Idempotent; `./dev setup` runs it. omnitable.spark_session() puts these jars on spark.jars, so
# sessions start without resolving packages over the network.
#
#   scripts/fetch-jars.sh --test   also fetch the jars only the tests use into tests/jars/
#                                  (the Iceberg Spark runtime: Spark reads the Iceberg exports)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/python/omnitable/jars"
MAVEN_CENTRAL="https://repo1.maven.org/maven2"

# path under Maven Central                                                  sha1
JARS=(
  "io/delta/delta-spark_4.1_2.13/4.1.0/delta-spark_4.1_2.13-4.1.0.jar       1693040fc5e8b2322023a1438433c320419eceff"
  "io/delta/delta-storage/4.1.0/delta-storage-4.1.0.jar                     40de0d0627e077e32826a0d151fb221cf169aa0e"
)

# jars the tests put on their Spark session's spark.jars (tests/conftest.py); never shipped
TEST_DEST="$ROOT/tests/jars"
TEST_JARS=(
  "org/apache/iceberg/iceberg-spark-runtime-4.1_2.13/1.12.0/iceberg-spark-runtime-4.1_2.13-1.12.0.jar 9e395e373a9a99643bf413ca1f74fa0c034887b4"
)

fetch() {  # fetch DEST "path sha1"...
  local dest="$1" entry path sha file tmp actual; shift
  mkdir -p "$dest"
  for entry in "$@"; do
    read -r path sha <<<"$entry"
    file="$dest/$(basename "$path")"
    if [[ -f "$file" ]] && [[ "$(sha1sum "$file" | awk '{print $1}')" == "$sha" ]]; then
      continue
    fi
    echo "Downloading $MAVEN_CENTRAL/$path" >&2
    tmp="$(mktemp "$dest/.download.XXXXXX")"
    curl -fsSL --retry 3 -o "$tmp" "$MAVEN_CENTRAL/$path" || { rm -f "$tmp"; echo "Cannot download $path" >&2; exit 1; }
    actual="$(sha1sum "$tmp" | awk '{print $1}')"
    if [[ "$actual" != "$sha" ]]; then
      rm -f "$tmp"
      echo "Cannot use $path: SHA-1 $actual does not match the pinned $sha" >&2
      exit 1
    fi
    mv "$tmp" "$file"
  done
}

case "${1:-}" in
  "") fetch "$DEST" "${JARS[@]}" ;;
  --test) fetch "$DEST" "${JARS[@]}"; fetch "$TEST_DEST" "${TEST_JARS[@]}" ;;
  *) echo "Unknown option '$1'. Usage: scripts/fetch-jars.sh [--test]" >&2; exit 2 ;;
esac
