"""The store's job kinds, and the one mapping between its job type and status
strings (the `memory_jobs` columns) and engram.common.v1's JobType and
JobStatus, so that GetQueueStats, GetStoreDiagnostics and (relayed) the
pipeline's GetStatus name them the same way.

Nothing here imports another store module, so every module that queues or
checks a job names its kind from here (services/store/jobs.py holds what the
queue does with each kind)."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from engram.common.v1 import job_pb2


class JobKind(enum.StrEnum):
    """A job's kind. The value is the `memory_jobs.job_type` string stored in
    the database (a member is that str, so SQL parameters and comparisons with
    a row's column take it as it is)."""

    EMBED = "embed"
    EXTRACT = "extract"
    DOCUMENT_INGEST = "document_ingest"
    SUMMARIZE_SESSION = "summarize_session"
    NEAR_DUPLICATE = "near_duplicate"
    CONSOLIDATE_SESSION = "consolidate_session"


TYPE_NAMES = {
    job_pb2.JOB_TYPE_EMBED: JobKind.EMBED,
    job_pb2.JOB_TYPE_EXTRACT: JobKind.EXTRACT,
    job_pb2.JOB_TYPE_DOCUMENT_INGEST: JobKind.DOCUMENT_INGEST,
    job_pb2.JOB_TYPE_SUMMARIZE_SESSION: JobKind.SUMMARIZE_SESSION,
    job_pb2.JOB_TYPE_NEAR_DUPLICATE: JobKind.NEAR_DUPLICATE,
    job_pb2.JOB_TYPE_CONSOLIDATE_SESSION: JobKind.CONSOLIDATE_SESSION,
}
# keyed by the stored string (a row's job_type; a JobKind is one)
TYPE_VALUES: dict[str, job_pb2.JobType.ValueType] = {
    name: value for value, name in TYPE_NAMES.items()
}
STATUS_VALUES = {
    "pending": job_pb2.JOB_STATUS_PENDING,
    "leased": job_pb2.JOB_STATUS_LEASED,
    "completed": job_pb2.JOB_STATUS_COMPLETED,
    "dead": job_pb2.JOB_STATUS_DEAD,
}


def job_counts(counts: Mapping[tuple[str, str], int]) -> list[job_pb2.JobCount]:
    """Counts keyed by (job type, status) strings, as JobCount messages in a
    stable order."""
    return [
        job_pb2.JobCount(
            job_type=TYPE_VALUES.get(job_type, job_pb2.JOB_TYPE_UNSPECIFIED),
            status=STATUS_VALUES.get(status, job_pb2.JOB_STATUS_UNSPECIFIED),
            count=count,
        )
        for (job_type, status), count in sorted(counts.items())
    ]
