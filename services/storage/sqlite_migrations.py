"""Versioned schema migrations, each applied once in its own transaction and
recorded in `schema_migrations` with its name and a checksum of its SQL (the
sqlite-utils pattern).

A shipped migration is never edited: the store refuses to start on a database
whose recorded checksum differs from the code's, and
tests/store/migrations.snapshot (checked by tests/store/test_store_migrations.py)
pins every shipped migration's name and checksum. A schema change is a new
migration appended at the end (of pg_migrations.py's chain too), with its line
appended to the snapshot and services/storage/schema.py's SCHEMA_VERSION raised to match."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from services.common.clock import now_text
from services.storage.connection import Connection
from services.storage.schema import check_chain
from services.storage.sqlite import complete_statement

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "memories_history_jobs",
        """
        CREATE TABLE memories (
            id                 TEXT PRIMARY KEY,
            namespace          TEXT NOT NULL,
            content            TEXT NOT NULL,
            normalized_content TEXT NOT NULL,
            content_hash       TEXT NOT NULL,
            type               TEXT NOT NULL,
            importance         REAL NOT NULL,
            tags               TEXT NOT NULL DEFAULT '[]',
            pinned             INTEGER NOT NULL DEFAULT 0,
            who                TEXT NOT NULL DEFAULT '',
            why                TEXT NOT NULL DEFAULT '',
            source_type        TEXT NOT NULL DEFAULT '',
            source_id          TEXT NOT NULL DEFAULT '',
            version            INTEGER NOT NULL DEFAULT 1,
            is_deleted         INTEGER NOT NULL DEFAULT 0,
            deleted_at         TEXT,
            created_at         TEXT NOT NULL,
            updated_at         TEXT NOT NULL,
            event_time         TEXT NOT NULL,
            access_count       INTEGER NOT NULL DEFAULT 0,
            last_accessed      TEXT,
            valid_from         TEXT,
            valid_until        TEXT,
            extraction_status  TEXT NOT NULL DEFAULT 'pending',
            extraction_model   TEXT,
            embedding_model    TEXT,
            source_memory_id   TEXT
        );
        -- Dedup is per namespace and only against live memories.
        CREATE UNIQUE INDEX memories_live_hash
            ON memories(namespace, content_hash) WHERE is_deleted = 0;
        CREATE INDEX memories_listing
            ON memories(namespace, is_deleted, created_at DESC, id DESC);
        CREATE INDEX memories_deleted_at ON memories(is_deleted, deleted_at);

        -- External-content FTS over live memories only: the triggers fire on
        -- content and deletion-state changes, never on access tracking.
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            content, content='memories', content_rowid='rowid', tokenize='porter unicode61'
        );
        CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.is_deleted = 0 BEGIN
            INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content);
        END;
        CREATE TRIGGER memories_ad AFTER DELETE ON memories WHEN old.is_deleted = 0 BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content)
                VALUES ('delete', old.rowid, old.content);
        END;
        CREATE TRIGGER memories_au_content AFTER UPDATE OF content ON memories
            WHEN old.is_deleted = 0 AND new.is_deleted = 0 AND old.content IS NOT new.content
        BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content)
                VALUES ('delete', old.rowid, old.content);
            INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content);
        END;
        CREATE TRIGGER memories_au_tombstone AFTER UPDATE OF is_deleted ON memories
            WHEN old.is_deleted = 0 AND new.is_deleted = 1
        BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content)
                VALUES ('delete', old.rowid, old.content);
        END;
        CREATE TRIGGER memories_au_recover AFTER UPDATE OF is_deleted ON memories
            WHEN old.is_deleted = 1 AND new.is_deleted = 0
        BEGIN
            INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content);
        END;

        CREATE TABLE memory_history (
            seq         INTEGER PRIMARY KEY AUTOINCREMENT,
            id          TEXT NOT NULL UNIQUE,
            memory_id   TEXT NOT NULL,
            namespace   TEXT NOT NULL,
            event       TEXT NOT NULL,
            old_content TEXT,
            new_content TEXT,
            changed_by  TEXT NOT NULL,
            reason      TEXT NOT NULL,
            metadata    TEXT NOT NULL DEFAULT '{}',
            created_at  TEXT NOT NULL
        );
        CREATE INDEX memory_history_memory ON memory_history(namespace, memory_id, seq);
        CREATE INDEX memory_history_age ON memory_history(created_at);

        CREATE TABLE memory_jobs (
            id           TEXT PRIMARY KEY,
            namespace    TEXT NOT NULL,
            memory_id    TEXT,
            document_id  TEXT,
            job_type     TEXT NOT NULL,
            status       TEXT NOT NULL DEFAULT 'pending',
            payload      TEXT,
            result       TEXT,
            error        TEXT,
            attempts     INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL DEFAULT 3,
            lease_token  TEXT,
            leased_at    TEXT,
            available_at TEXT NOT NULL,
            completed_at TEXT,
            failed_at    TEXT,
            created_at   TEXT NOT NULL,
            updated_at   TEXT NOT NULL
        );
        -- Enqueue dedup: at most one open job of a type per memory.
        CREATE UNIQUE INDEX memory_jobs_open
            ON memory_jobs(memory_id, job_type)
            WHERE status IN ('pending', 'leased') AND memory_id IS NOT NULL;
        CREATE INDEX memory_jobs_queue ON memory_jobs(job_type, status, available_at, created_at);
        """,
    ),
    (
        "embeddings_and_vector_index",
        """
        -- Vectors keyed by content and model, so identical content is embedded
        -- once and a model change never mixes with old vectors. A rowid table:
        -- a 1.5 KB vector fits its page; WITHOUT ROWID would spill to overflow.
        CREATE TABLE embeddings (
            id           INTEGER PRIMARY KEY,
            content_hash TEXT NOT NULL,
            model        TEXT NOT NULL,
            dimensions   INTEGER NOT NULL,
            vector       BLOB NOT NULL,
            created_at   TEXT NOT NULL,
            UNIQUE (content_hash, model)
        );

        -- The one model (and its dimensions) whose vectors the index holds.
        CREATE TABLE vector_index (
            id         INTEGER PRIMARY KEY CHECK (id = 1),
            model      TEXT NOT NULL,
            dimensions INTEGER,
            updated_at TEXT NOT NULL
        );

        -- The search index: one row per live, embedded memory, holding the
        -- sign-bit quantisation of its vector (sqlite-vec vec_quantize_binary)
        -- for the fast first pass; exact float32 vectors are in `embeddings`.
        CREATE TABLE memory_vectors (
            memory_rowid INTEGER PRIMARY KEY,
            namespace    TEXT NOT NULL,
            bits         BLOB NOT NULL
        );
        CREATE INDEX memory_vectors_namespace ON memory_vectors(namespace);
        -- A memory leaves the vector index the moment it is tombstoned,
        -- purged, or its content changes (its vector no longer describes it).
        CREATE TRIGGER memory_vectors_tombstone AFTER UPDATE OF is_deleted ON memories
            WHEN new.is_deleted = 1
        BEGIN
            DELETE FROM memory_vectors WHERE memory_rowid = old.rowid;
        END;
        CREATE TRIGGER memory_vectors_content AFTER UPDATE OF content_hash ON memories
            WHEN old.content_hash IS NOT new.content_hash
        BEGIN
            DELETE FROM memory_vectors WHERE memory_rowid = old.rowid;
        END;
        CREATE TRIGGER memory_vectors_purge AFTER DELETE ON memories BEGIN
            DELETE FROM memory_vectors WHERE memory_rowid = old.rowid;
        END;
        CREATE INDEX memory_jobs_leased ON memory_jobs(status, leased_at);
        -- Insertion order within a namespace (rowid is the index's last column),
        -- for recall's neighbour lookups.
        CREATE INDEX memories_namespace_order ON memories(namespace, is_deleted);
        """,
    ),
    (
        "graph_documents_links",
        """
        -- seed 000 "Knowledge Graph": entities matched by canonical name within
        -- a namespace (the graph never crosses namespaces).
        CREATE TABLE entities (
            id             TEXT PRIMARY KEY,
            namespace      TEXT NOT NULL,
            name           TEXT NOT NULL,
            canonical_name TEXT NOT NULL,
            entity_type    TEXT NOT NULL DEFAULT 'unknown',
            mentions       INTEGER NOT NULL DEFAULT 0,
            created_at     TEXT NOT NULL,
            updated_at     TEXT NOT NULL,
            UNIQUE (namespace, canonical_name)
        );
        CREATE INDEX entities_mentions ON entities(namespace, mentions DESC);
        CREATE TABLE relations (
            id               TEXT PRIMARY KEY,
            namespace        TEXT NOT NULL,
            source_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            target_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            relation_type    TEXT NOT NULL,
            strength         REAL NOT NULL DEFAULT 1.0,
            mentions         INTEGER NOT NULL DEFAULT 1,
            confidence       REAL NOT NULL,
            created_at       TEXT NOT NULL,
            updated_at       TEXT NOT NULL,
            UNIQUE (source_entity_id, target_entity_id, relation_type)
        );
        CREATE INDEX relations_target ON relations(target_entity_id);
        CREATE TABLE memory_entity_mentions (
            memory_id    TEXT NOT NULL,
            entity_id    TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            namespace    TEXT NOT NULL,
            mention_text TEXT NOT NULL,
            confidence   REAL NOT NULL,
            created_at   TEXT NOT NULL,
            PRIMARY KEY (memory_id, entity_id)
        );
        CREATE INDEX memory_entity_mentions_entity ON memory_entity_mentions(entity_id);

        -- Links between memories: a derived fact and its source
        -- (`derived_from`), an UPDATE's new version and what it replaced
        -- (`supersedes`).
        CREATE TABLE memory_links (
            id             TEXT PRIMARY KEY,
            namespace      TEXT NOT NULL,
            from_memory_id TEXT NOT NULL,
            to_memory_id   TEXT NOT NULL,
            link_type      TEXT NOT NULL,
            job_id         TEXT,
            created_at     TEXT NOT NULL,
            UNIQUE (from_memory_id, to_memory_id, link_type)
        );
        CREATE INDEX memory_links_to ON memory_links(to_memory_id);

        -- seed 000 "Document Ingest".
        CREATE TABLE documents (
            id           TEXT PRIMARY KEY,
            namespace    TEXT NOT NULL,
            source_type  TEXT NOT NULL,
            source_url   TEXT,
            raw_content  TEXT,
            title        TEXT,
            status       TEXT NOT NULL DEFAULT 'queued',
            error        TEXT,
            chunk_count  INTEGER NOT NULL DEFAULT 0,
            tags         TEXT NOT NULL DEFAULT '[]',
            created_at   TEXT NOT NULL,
            updated_at   TEXT NOT NULL,
            completed_at TEXT
        );
        CREATE INDEX documents_namespace ON documents(namespace, created_at DESC);
        CREATE TABLE document_memories (
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            memory_id   TEXT NOT NULL,
            chunk_index INTEGER NOT NULL,
            PRIMARY KEY (document_id, chunk_index)
        );
        CREATE INDEX document_memories_memory ON document_memories(memory_id);
        CREATE UNIQUE INDEX memory_jobs_open_document
            ON memory_jobs(document_id, job_type)
            WHERE status IN ('pending', 'leased') AND document_id IS NOT NULL;
        """,
    ),
    (
        "maintenance_audit",
        """
        -- One row per repair or retention step the maintenance service asked
        -- the store to run, with what it changed (services/store/admin.py).
        CREATE TABLE maintenance_audit (
            id         TEXT PRIMARY KEY,
            action     TEXT NOT NULL,
            result     TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL
        );
        CREATE INDEX maintenance_audit_age ON maintenance_audit(created_at);
        """,
    ),
    (
        "vector_index_change_log",
        """
        -- Which memory_vectors rows changed, in commit order, so a reader (the
        -- search service's in-memory first pass, services/search/vector_cache.py)
        -- can stay coherent by re-reading only those rows. Every insert,
        -- replace, update and delete is logged, including the tombstone,
        -- content and purge triggers' deletes and a model change's clearing.
        -- The log keeps the last 100,000 changes (pruned every 1,000); a reader
        -- that fell further behind reloads in full.
        CREATE TABLE memory_vector_changes (
            seq          INTEGER PRIMARY KEY AUTOINCREMENT,
            memory_rowid INTEGER NOT NULL
        );
        CREATE TRIGGER memory_vectors_log_insert AFTER INSERT ON memory_vectors BEGIN
            INSERT INTO memory_vector_changes(memory_rowid) VALUES (new.memory_rowid);
        END;
        CREATE TRIGGER memory_vectors_log_update AFTER UPDATE ON memory_vectors BEGIN
            INSERT INTO memory_vector_changes(memory_rowid) VALUES (old.memory_rowid);
            INSERT INTO memory_vector_changes(memory_rowid) VALUES (new.memory_rowid);
        END;
        CREATE TRIGGER memory_vectors_log_delete AFTER DELETE ON memory_vectors BEGIN
            INSERT INTO memory_vector_changes(memory_rowid) VALUES (old.memory_rowid);
        END;
        CREATE TRIGGER memory_vector_changes_prune AFTER INSERT ON memory_vector_changes
            WHEN new.seq % 1000 = 0
        BEGIN
            DELETE FROM memory_vector_changes WHERE seq <= new.seq - 100000;
        END;
        """,
    ),
    (
        "job_lease_holder",
        """
        -- Who took a job's current (or last) lease: the worker's stable name and
        -- the process instance. A restarted worker releases the leases its
        -- previous instance held (JobQueueService.ReleasePriorInstanceLeases)
        -- instead of waiting for the stale-lease reaper. NULL: an anonymous lease.
        ALTER TABLE memory_jobs ADD COLUMN lease_worker TEXT;
        ALTER TABLE memory_jobs ADD COLUMN lease_instance TEXT;
        CREATE INDEX memory_jobs_lease_worker ON memory_jobs(lease_worker)
            WHERE status = 'leased';
        """,
    ),
    (
        "embeddings_by_namespace",
        """
        -- Vectors keyed by namespace too: a vector shared between namespaces let
        -- one tenant learn whether another holds a text (its memory was indexed
        -- at once, without an embed job) and overwrite the vector another
        -- tenant's memory is ranked by. Each namespace that has a memory with
        -- a stored vector's content (live or tombstoned) keeps its own copy;
        -- a vector no memory uses any more is dropped.
        CREATE TABLE embeddings_by_namespace (
            id           INTEGER PRIMARY KEY,
            namespace    TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            model        TEXT NOT NULL,
            dimensions   INTEGER NOT NULL,
            vector       BLOB NOT NULL,
            created_at   TEXT NOT NULL,
            UNIQUE (namespace, content_hash, model)
        );
        INSERT INTO embeddings_by_namespace
            (namespace, content_hash, model, dimensions, vector, created_at)
        SELECT m.namespace, e.content_hash, e.model, e.dimensions, e.vector, e.created_at
        FROM (SELECT DISTINCT namespace, content_hash FROM memories) m
        JOIN embeddings e ON e.content_hash = m.content_hash
        ORDER BY m.namespace, e.content_hash, e.model;
        DROP TABLE embeddings;
        ALTER TABLE embeddings_by_namespace RENAME TO embeddings;
        """,
    ),
    (
        "suite_identity",
        """
        -- one random id per database: services started by `engram up` check that the
        -- store they reach holds it (services/common/suite.py)
        CREATE TABLE suite (id TEXT NOT NULL);
        INSERT INTO suite(id) VALUES (lower(hex(randomblob(16))));
        """,
    ),
    (
        "memories_namespace_order_for_early_databases",
        """
        -- Migration 2 was edited after it shipped: its first text had no
        -- memories_namespace_order index, and a database that ran that text
        -- was never given it. Create it where it is missing (a no-op
        -- everywhere else). The other edit to migration 2, the shape of the
        -- first `embeddings` table, is moot: migration 7 rebuilt that table.
        CREATE INDEX IF NOT EXISTS memories_namespace_order ON memories(namespace, is_deleted);
        """,
    ),
    (
        "document_progress",
        """
        -- How many chunks a document's text was cut into (0 until chunking is
        -- done), next to chunk_count, so a watcher sees progress as n of m.
        ALTER TABLE documents ADD COLUMN expected_chunk_count INTEGER NOT NULL DEFAULT 0;
        -- A document's attempt number and last error are its ingest job's
        -- (services/storage/store/document_sql.py reads them by document id).
        CREATE INDEX memory_jobs_document ON memory_jobs(document_id, created_at)
            WHERE document_id IS NOT NULL;
        """,
    ),
    (
        "timestamps_to_nanoseconds",
        """
        -- Stored times get nine fraction digits (services/common/clock.py), so
        -- every google.protobuf.Timestamp round-trips exactly; they had six,
        -- and nanos were truncated. Every time column is rewritten to the new
        -- fixed width so that text order stays time order across old and new
        -- rows: first the unpadded years an early release wrote
        -- (`1-01-01T...`) get their zeros, then `...ffffffZ` (27 characters)
        -- becomes `...ffffff000Z` (30).
        UPDATE memories SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at,
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at,
            event_time = substr('000', 1, 5 - instr(event_time, '-')) || event_time,
            deleted_at = substr('000', 1, 5 - instr(deleted_at, '-')) || deleted_at,
            last_accessed = substr('000', 1, 5 - instr(last_accessed, '-')) || last_accessed,
            valid_from = substr('000', 1, 5 - instr(valid_from, '-')) || valid_from,
            valid_until = substr('000', 1, 5 - instr(valid_until, '-')) || valid_until
        WHERE instr(created_at, '-') BETWEEN 2 AND 4
           OR instr(updated_at, '-') BETWEEN 2 AND 4
           OR instr(event_time, '-') BETWEEN 2 AND 4
           OR instr(deleted_at, '-') BETWEEN 2 AND 4
           OR instr(last_accessed, '-') BETWEEN 2 AND 4
           OR instr(valid_from, '-') BETWEEN 2 AND 4
           OR instr(valid_until, '-') BETWEEN 2 AND 4;
        UPDATE memories SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END,
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END,
            event_time = CASE WHEN length(event_time) = 27 THEN substr(event_time, 1, 26) || '000Z' ELSE event_time END,
            deleted_at = CASE WHEN length(deleted_at) = 27 THEN substr(deleted_at, 1, 26) || '000Z' ELSE deleted_at END,
            last_accessed = CASE WHEN length(last_accessed) = 27 THEN substr(last_accessed, 1, 26) || '000Z' ELSE last_accessed END,
            valid_from = CASE WHEN length(valid_from) = 27 THEN substr(valid_from, 1, 26) || '000Z' ELSE valid_from END,
            valid_until = CASE WHEN length(valid_until) = 27 THEN substr(valid_until, 1, 26) || '000Z' ELSE valid_until END
        WHERE length(created_at) = 27
           OR length(updated_at) = 27
           OR length(event_time) = 27
           OR length(deleted_at) = 27
           OR length(last_accessed) = 27
           OR length(valid_from) = 27
           OR length(valid_until) = 27;
        UPDATE memory_history SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4;
        UPDATE memory_history SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END
        WHERE length(created_at) = 27;
        UPDATE memory_jobs SET
            available_at = substr('000', 1, 5 - instr(available_at, '-')) || available_at,
            leased_at = substr('000', 1, 5 - instr(leased_at, '-')) || leased_at,
            completed_at = substr('000', 1, 5 - instr(completed_at, '-')) || completed_at,
            failed_at = substr('000', 1, 5 - instr(failed_at, '-')) || failed_at,
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at,
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at
        WHERE instr(available_at, '-') BETWEEN 2 AND 4
           OR instr(leased_at, '-') BETWEEN 2 AND 4
           OR instr(completed_at, '-') BETWEEN 2 AND 4
           OR instr(failed_at, '-') BETWEEN 2 AND 4
           OR instr(created_at, '-') BETWEEN 2 AND 4
           OR instr(updated_at, '-') BETWEEN 2 AND 4;
        UPDATE memory_jobs SET
            available_at = CASE WHEN length(available_at) = 27 THEN substr(available_at, 1, 26) || '000Z' ELSE available_at END,
            leased_at = CASE WHEN length(leased_at) = 27 THEN substr(leased_at, 1, 26) || '000Z' ELSE leased_at END,
            completed_at = CASE WHEN length(completed_at) = 27 THEN substr(completed_at, 1, 26) || '000Z' ELSE completed_at END,
            failed_at = CASE WHEN length(failed_at) = 27 THEN substr(failed_at, 1, 26) || '000Z' ELSE failed_at END,
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END,
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END
        WHERE length(available_at) = 27
           OR length(leased_at) = 27
           OR length(completed_at) = 27
           OR length(failed_at) = 27
           OR length(created_at) = 27
           OR length(updated_at) = 27;
        UPDATE embeddings SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4;
        UPDATE embeddings SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END
        WHERE length(created_at) = 27;
        UPDATE vector_index SET
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at
        WHERE instr(updated_at, '-') BETWEEN 2 AND 4;
        UPDATE vector_index SET
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END
        WHERE length(updated_at) = 27;
        UPDATE entities SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at,
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4
           OR instr(updated_at, '-') BETWEEN 2 AND 4;
        UPDATE entities SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END,
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END
        WHERE length(created_at) = 27
           OR length(updated_at) = 27;
        UPDATE relations SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at,
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4
           OR instr(updated_at, '-') BETWEEN 2 AND 4;
        UPDATE relations SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END,
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END
        WHERE length(created_at) = 27
           OR length(updated_at) = 27;
        UPDATE memory_entity_mentions SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4;
        UPDATE memory_entity_mentions SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END
        WHERE length(created_at) = 27;
        UPDATE memory_links SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4;
        UPDATE memory_links SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END
        WHERE length(created_at) = 27;
        UPDATE documents SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at,
            updated_at = substr('000', 1, 5 - instr(updated_at, '-')) || updated_at,
            completed_at = substr('000', 1, 5 - instr(completed_at, '-')) || completed_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4
           OR instr(updated_at, '-') BETWEEN 2 AND 4
           OR instr(completed_at, '-') BETWEEN 2 AND 4;
        UPDATE documents SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END,
            updated_at = CASE WHEN length(updated_at) = 27 THEN substr(updated_at, 1, 26) || '000Z' ELSE updated_at END,
            completed_at = CASE WHEN length(completed_at) = 27 THEN substr(completed_at, 1, 26) || '000Z' ELSE completed_at END
        WHERE length(created_at) = 27
           OR length(updated_at) = 27
           OR length(completed_at) = 27;
        UPDATE maintenance_audit SET
            created_at = substr('000', 1, 5 - instr(created_at, '-')) || created_at
        WHERE instr(created_at, '-') BETWEEN 2 AND 4;
        UPDATE maintenance_audit SET
            created_at = CASE WHEN length(created_at) = 27 THEN substr(created_at, 1, 26) || '000Z' ELSE created_at END
        WHERE length(created_at) = 27;
        UPDATE schema_migrations SET
            applied_at = substr('000', 1, 5 - instr(applied_at, '-')) || applied_at
        WHERE instr(applied_at, '-') BETWEEN 2 AND 4;
        UPDATE schema_migrations SET
            applied_at = CASE WHEN length(applied_at) = 27 THEN substr(applied_at, 1, 26) || '000Z' ELSE applied_at END
        WHERE length(applied_at) = 27;
        """,
    ),
    (
        "sessions_and_expiry",
        """
        -- Issue 16: a memory may belong to a conversation session and may
        -- expire (short-term memory). NULL means neither: every existing
        -- memory stays long-term and sessionless.
        ALTER TABLE memories ADD COLUMN session_id TEXT;
        ALTER TABLE memories ADD COLUMN expire_at TEXT;
        -- A session's memories newest first (ListMemories and Recall with a
        -- session filter, AppendTurn's session reads); sessionless rows stay out.
        CREATE INDEX memories_session
            ON memories(namespace, session_id, is_deleted, created_at DESC, id DESC)
            WHERE session_id IS NOT NULL;
        -- The retention sweep's expired memories, earliest first; long-term
        -- rows stay out.
        CREATE INDEX memories_expiry ON memories(expire_at) WHERE expire_at IS NOT NULL;
        """,
    ),
    (
        "pinned_memories_index",
        """
        -- AssembleContext's PINNED section (services/storage/search/context_queries.py)
        -- reads a namespace's live pinned memories, most important first, on
        -- every call: without this a 100k-memory namespace is scanned (~55 ms).
        CREATE INDEX memories_pinned ON memories(namespace, importance DESC, updated_at DESC)
            WHERE pinned = 1 AND is_deleted = 0;
        """,
    ),
    (
        "bi_temporal_validity",
        """
        -- Issue 17: every memory has a valid time (valid_from, valid_until:
        -- when it was true in the world) besides its transaction time
        -- (created_at, updated_at, deleted_at). valid_from defaults to the
        -- event time; valid_until stays NULL until a newer version supersedes
        -- the memory, and invalidated_at records when that was written (the
        -- transaction time of the close, for point-in-time reads).
        ALTER TABLE memories ADD COLUMN invalidated_at TEXT;
        UPDATE memories SET valid_from = event_time WHERE valid_from IS NULL;
        -- Dedup is against open memories only: a superseded value (moved to
        -- Lisbon, then Berlin) may become true again as a new memory.
        DROP INDEX memories_live_hash;
        CREATE UNIQUE INDEX memories_live_hash
            ON memories(namespace, content_hash) WHERE is_deleted = 0 AND valid_until IS NULL;
        -- Superseded memories by content (few): whether a stored vector is
        -- still held by one (they stay searchable with as_of).
        CREATE INDEX memories_closed_hash
            ON memories(namespace, content_hash) WHERE valid_until IS NOT NULL;
        """,
    ),
    (
        "memory_categories_and_class",
        """
        -- Issue 18 (seed 004 §5-6): the extraction model's categories (a JSON
        -- list, filtered like tags) and temporal class ('permanent',
        -- 'long_term', 'short_term'; '' when not classified) of pipeline
        -- memories. A short-term memory's end is the existing valid_until.
        ALTER TABLE memories ADD COLUMN categories TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE memories ADD COLUMN temporal_class TEXT NOT NULL DEFAULT '';
        """,
    ),
    (
        "dedup_open_until_superseded",
        """
        -- Issue 17 with issue 18: a memory may carry a valid_until without
        -- being superseded (a short-term fact's known end), so what leaves
        -- the dedup index is being superseded (invalidated_at set), not
        -- having an end: such a fact still deduplicates.
        DROP INDEX memories_live_hash;
        CREATE UNIQUE INDEX memories_live_hash
            ON memories(namespace, content_hash) WHERE is_deleted = 0 AND invalidated_at IS NULL;
        DROP INDEX memories_closed_hash;
        CREATE INDEX memories_closed_hash
            ON memories(namespace, content_hash) WHERE invalidated_at IS NOT NULL;
        """,
    ),
    (
        "typed_links_and_entity_aliases",
        """
        -- Issue 17, seed 003 "edges": every link between memories carries a
        -- weight, a confidence, a validity interval and the memories that are
        -- its evidence (a JSON list of ids). Backfill: weight and confidence
        -- 1.0 (supersedes and derived_from were written by a rule, not
        -- guessed); valid from when the link's newer end became valid (the
        -- from memory's valid_from), the link's own write time when that
        -- memory is gone; a derived fact's evidence is its source, a pipeline
        -- UPDATE's is the memory it was extracted from, a ModifyMemories
        -- supersede has none (the caller said so).
        ALTER TABLE memory_links ADD COLUMN weight REAL NOT NULL DEFAULT 1.0;
        ALTER TABLE memory_links ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0;
        ALTER TABLE memory_links ADD COLUMN valid_from TEXT;
        ALTER TABLE memory_links ADD COLUMN valid_until TEXT;
        ALTER TABLE memory_links ADD COLUMN evidence TEXT NOT NULL DEFAULT '[]';
        UPDATE memory_links SET valid_from = coalesce(
            (SELECT coalesce(m.valid_from, m.event_time) FROM memories m
             WHERE m.id = memory_links.from_memory_id),
            created_at);
        UPDATE memory_links SET evidence = json_array(to_memory_id)
            WHERE link_type = 'derived_from';
        UPDATE memory_links SET evidence = coalesce(
            (SELECT json_array(m.source_memory_id) FROM memories m
             WHERE m.id = memory_links.from_memory_id AND m.source_memory_id IS NOT NULL
               AND m.source_memory_id <> ''),
            '[]')
            WHERE link_type = 'supersedes';
        -- No new index on memory_links: a memory's links are found by the
        -- unique (from_memory_id, ...) index and memory_links_to, one
        -- direction at a time (services/storage/store/explain_sql.py links_query);
        -- every index more is paid on the hot path's temporal links.

        -- Seed 003 "entities": an entity has a type from a closed set and
        -- aliases; a name resolves to the entity whose canonical name or
        -- alias it is, within the namespace (an alias names one entity).
        -- Entities written before types were extracted are 'thing'.
        UPDATE entities SET entity_type = 'thing' WHERE entity_type = 'unknown';
        CREATE INDEX entities_type ON entities(namespace, entity_type, mentions DESC);
        CREATE TABLE entity_aliases (
            namespace       TEXT NOT NULL,
            canonical_alias TEXT NOT NULL,
            entity_id       TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            alias           TEXT NOT NULL,
            created_at      TEXT NOT NULL,
            PRIMARY KEY (namespace, canonical_alias)
        );
        CREATE INDEX entity_aliases_entity ON entity_aliases(entity_id);
        """,
    ),
    (
        "session_consolidations",
        """
        -- Issue 17 / seed 003 `sessions_consolidations`: a session's
        -- lifecycle for consolidation, per namespace (a session id is scoped
        -- to its namespace). Registered when the first memory of the session
        -- is written; ended (and its consolidate_session job queued, in the
        -- same transaction) when a new session starts in the namespace or it
        -- idles past sessions.consolidate_after_idle_ms; consolidated_at is
        -- set by the job's completion. A memory arriving for a consolidated
        -- session reopens it (ended_at, job_id cleared; consolidated_through
        -- kept, so the next job reads only what came later).
        CREATE TABLE session_consolidations (
            namespace            TEXT NOT NULL,
            session_id           TEXT NOT NULL,
            first_seen_at        TEXT NOT NULL,
            last_seen_at         TEXT NOT NULL,
            ended_at             TEXT,
            end_reason           TEXT,
            job_id               TEXT,
            consolidated_at      TEXT,
            consolidated_through TEXT,
            PRIMARY KEY (namespace, session_id)
        );
        CREATE INDEX session_consolidations_open
            ON session_consolidations(namespace, last_seen_at) WHERE ended_at IS NULL;
        CREATE INDEX session_consolidations_idle
            ON session_consolidations(last_seen_at) WHERE ended_at IS NULL;
        """,
    ),
    (
        "memory_decay",
        """
        -- Issue 17, seed 003 "Ebbinghaus decay": the stored part of a memory's
        -- confidence (as of its last access; reinforcement raises it) and its
        -- own decay rate (NULL: memory.decay_rate_default; 0: protected). The
        -- decayed confidence is computed at read (services/common/forgetting.py).
        ALTER TABLE memories ADD COLUMN confidence REAL NOT NULL DEFAULT 1.0;
        ALTER TABLE memories ADD COLUMN decay_rate REAL;
        """,
    ),
    (
        "recall_time_range_indexes",
        """
        -- Issue 17, Recall's temporal route (services/storage/search/queries.py):
        -- the memories of the range a question names are an index range of
        -- event times, not a scan of the namespace (at 100k memories the scan
        -- tripled Recall's p95); the facts valid during a past range but no
        -- longer are a range of closed validity ends, and only rows that have
        -- an end pay for that index.
        CREATE INDEX memories_event_time ON memories(namespace, event_time);
        CREATE INDEX memories_valid_until
            ON memories(namespace, valid_until) WHERE valid_until IS NOT NULL;
        """,
    ),
    (
        "keyword_term_statistics",
        """
        -- Nothing on SQLite: FTS5 keeps its own term statistics (the Postgres
        -- step of this name keeps per-namespace ones in tables of its own).
        """,
    ),
    (
        "keyword_statistics_set_based_triggers",
        """
        -- Nothing on SQLite: the Postgres step of this name rewrites the triggers
        -- of keyword_term_statistics, which has nothing here either.
        """,
    ),
    (
        "embedding_parts",
        """
        -- Issue 19: a content's sentence vectors beside its whole vector, in
        -- the same row (so every delete or replace of the vector takes them
        -- too): L2-normalised little-endian float16, one vector after another,
        -- each of the row's dimensions; NULL for a single sentence. Recall
        -- rescores its candidates by the best of the whole and the parts.
        ALTER TABLE embeddings ADD COLUMN parts BLOB;
        """,
    ),
)
check_chain("SQLite", len(MIGRATIONS))  # services/storage/schema.py's SCHEMA_VERSION


class MigrationMismatch(Exception):
    """The database records a migration this code does not ship as recorded:
    its SQL was edited after it ran here, its name differs (reordered), or it
    is unknown (a newer Engram migrated this file). Starting would run on a
    schema the code does not describe, so the store refuses."""


def checksum(sql: str, statements: Callable[[str], list[str]] | None = None) -> str:
    """SHA-256 of a migration's statements with comment lines dropped and
    whitespace collapsed: rewording a comment or re-indenting keeps the
    checksum; any change to what SQLite executes changes it. `statements`
    splits the script (SQLite's splitter by default; Postgres passes its own)."""
    split = _statements if statements is None else statements
    canonical = "\n".join(" ".join(statement.split()) for statement in split(sql))
    return hashlib.sha256(canonical.encode()).hexdigest()


def apply_migrations(
    conn: Connection, migrations: Sequence[tuple[str, str]] = MIGRATIONS
) -> list[str]:
    """Check every recorded migration against the code, then apply the pending
    ones in order; return the names applied. `migrations` is a prefix of
    MIGRATIONS only in tests that build an older schema.

    Raises MigrationMismatch, naming the migration, when a recorded one's name
    or checksum differs from the code's, or the database records more
    migrations than the code knows."""
    conn.execute(SCHEMA_MIGRATIONS_TABLE)
    _record_legacy_checksums(conn)
    recorded = {
        version: (name, digest)
        for version, name, digest in conn.execute(
            "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
        )
    }
    _verify(recorded)
    applied: list[str] = []
    for version, name, sql in pending(migrations, recorded):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(RECORD_MIGRATION.replace("%s", "?"), record(version, name, checksum(sql)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


def _record_legacy_checksums(conn: Connection) -> None:
    """Upgrade a database from before checksums, without a migration (the
    table that records migrations cannot depend on one): add the column, then
    give each recorded row without a checksum the checksum of the code's
    migration of the same version and name, trusting that it ran that SQL
    from then on. A row whose name differs keeps no checksum and is refused
    by _verify.

    Migration 2 (embeddings_and_vector_index) was edited twice after it first
    shipped, so an early database may have run an older text: an `embeddings`
    table WITHOUT ROWID (replaced by migration 7 on every database, whatever
    its shape) and no `memories_namespace_order` index (added where missing by
    migration 8, memories_namespace_order_for_early_databases). Both are
    covered by later migrations, so its row is trusted like the others."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(schema_migrations)")}
    if "checksum" not in columns:
        conn.execute("ALTER TABLE schema_migrations ADD COLUMN checksum TEXT")
    legacy = conn.execute(
        "SELECT version, name FROM schema_migrations WHERE checksum IS NULL"
    ).fetchall()
    if not legacy:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for version, name in legacy:
            digest = _legacy_checksum(version, name)
            if digest is not None:
                conn.execute(
                    "UPDATE schema_migrations SET checksum = ? WHERE version = ?",
                    (digest, version),
                )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _legacy_checksum(version: int, name: str) -> str | None:
    """The checksum a row recorded before checksums is given: the code's, when
    the code ships a migration of that version and name; else None (refused)."""
    if 1 <= version <= len(MIGRATIONS) and MIGRATIONS[version - 1][0] == name:
        return checksum(MIGRATIONS[version - 1][1])
    return None


def check_recorded_migrations(conn: Connection) -> int:
    """What apply_migrations checks before it migrates, without writing anything:
    for a file the store has not opened yet (`engram restore`). Raises
    MigrationMismatch as apply_migrations would, or when the file records no
    migrations at all (not an Engram database). Returns how many it records;
    pending ones are applied by the store when it starts on the file."""
    table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if table is None:
        raise MigrationMismatch("it records no migrations (no schema_migrations table)")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(schema_migrations)")}
    digest_column = "checksum" if "checksum" in columns else "NULL"
    recorded = {
        version: (name, digest if digest is not None else _legacy_checksum(version, name))
        for version, name, digest in conn.execute(
            f"SELECT version, name, {digest_column} FROM schema_migrations ORDER BY version"
        )
    }
    if not recorded:
        raise MigrationMismatch("it records no migrations (schema_migrations is empty)")
    _verify(recorded)
    return len(recorded)


def _verify(recorded: dict[int, tuple[str, str | None]]) -> None:
    verify_recorded(recorded, MIGRATIONS)


# ---- the runner's rules, shared with services/storage/pg_migrations.py ----------------

# Both backends record migrations in the same table (this DDL is valid on each).
SCHEMA_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL,"
    " checksum TEXT)"
)
# With %s placeholders (psycopg's); the SQLite runner swaps in `?`.
RECORD_MIGRATION = (
    "INSERT INTO schema_migrations(version, name, applied_at, checksum) VALUES (%s, %s, %s, %s)"
)


def record(version: int, name: str, digest: str) -> tuple[int, str, str, str]:
    """The schema_migrations row of a migration applied now."""
    return (version, name, now_text(), digest)


def pending(
    migrations: Sequence[tuple[str, str]], recorded: dict[int, tuple[str, str | None]]
) -> list[tuple[int, str, str]]:
    """(version, name, sql) of each migration not yet recorded, in order."""
    return [
        (version, name, sql)
        for version, (name, sql) in enumerate(migrations, start=1)
        if version not in recorded
    ]


def verify_recorded(
    recorded: dict[int, tuple[str, str | None]],
    migrations: Sequence[tuple[str, str]],
    digest_of: Callable[[str], str] = checksum,
) -> None:
    """The refuse-on-mismatch rule: every recorded migration must be the one
    `migrations` ships at its version, under its name and with its checksum.
    Raises MigrationMismatch naming the first that is not."""
    for version, (name, digest) in sorted(recorded.items()):
        if version > len(migrations):
            raise MigrationMismatch(
                f"the database records migration {version} ({name}), which this version of"
                f" Engram does not ship (it knows {len(migrations)}): it was migrated by a"
                " newer Engram"
            )
        expected_name, sql = migrations[version - 1]
        if name != expected_name:
            raise MigrationMismatch(
                f"migration {version} is recorded as {name!r} but this version of Engram"
                f" ships {expected_name!r} at that position"
            )
        if digest != digest_of(sql):
            raise MigrationMismatch(
                f"migration {version} ({name}) was applied with different SQL (checksum"
                f" {digest}) from what this version of Engram ships ({digest_of(sql)}):"
                " a shipped migration was edited; restore it and append a new migration"
            )


def _statements(script: str) -> list[str]:
    """Split a script into complete statements (triggers contain inner semicolons)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        current += line
        if complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        raise ValueError(f"incomplete SQL statement in migration: {current.strip()[:80]}")
    return statements
