"""The one mapping between the store's job type and status strings (the
`memory_jobs` columns) and engram.common.v1's JobType and JobStatus, so that
GetQueueStats, GetStoreDiagnostics and (relayed) the pipeline's GetStatus name
them the same way."""

from __future__ import annotations

from collections.abc import Mapping

from engram.common.v1 import job_pb2

TYPE_NAMES = {
    job_pb2.JOB_TYPE_EMBED: "embed",
    job_pb2.JOB_TYPE_EXTRACT: "extract",
    job_pb2.JOB_TYPE_DOCUMENT_INGEST: "document_ingest",
    job_pb2.JOB_TYPE_SUMMARIZE_SESSION: "summarize_session",
    job_pb2.JOB_TYPE_NEAR_DUPLICATE: "near_duplicate",
    job_pb2.JOB_TYPE_CONSOLIDATE_SESSION: "consolidate_session",
}
TYPE_VALUES = {name: value for value, name in TYPE_NAMES.items()}
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
