#!/usr/bin/env bash
# The search service's role (compose profile `postgres`): it may log in and read, nothing
# else. Run once by the postgres image's entrypoint, on an empty data directory, as
# POSTGRES_USER (the store's role `engram`, which owns the database). The store grants it
# SELECT on its tables when it migrates (services/storage/pg.py grant_reader), so the
# grants have one home. tests/deploy/test_compose_postgres.py runs this script against a
# real server.
set -euo pipefail
if [ -z "${ENGRAM_POSTGRES_READER_PASSWORD:-}" ]; then
    echo "ENGRAM_POSTGRES_READER_PASSWORD is not set: the search role needs a password" >&2
    exit 1
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader="${ENGRAM_READER_ROLE:-engram_reader}" \
    -v password="$ENGRAM_POSTGRES_READER_PASSWORD" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS;
SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'reader') \gexec
SQL
