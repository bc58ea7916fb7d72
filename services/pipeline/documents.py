"""Document ingest on the pipeline's side (seed 000 "Document Ingest"): fetching
a URL within the size cap (from allowed addresses only, services/pipeline/
fetch_guard.py), reducing HTML to text with its title, and chunking
into overlapping windows. Plus the in-process hub through which the document
worker tells WatchDocument about every status it records.

No database here (the pipeline never opens it) and no grpc: the worker and the
servicer carry results to and from the store.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import httpx

from services.common.fetch_policy import AddressRefused, FetchPolicy
from services.common.providers.errors import retryable_status
from services.pipeline.fetch_guard import GuardedTransport

FETCH_TIMEOUT_S = 30.0
USER_AGENT = "engram-document-ingest/1"
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
_SKIPPED_TAGS = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK_TAGS = {
    "p", "div", "br", "li", "ul", "ol", "tr", "td", "th", "table", "section", "article",
    "header", "footer", "nav", "aside", "main", "h1", "h2", "h3", "h4", "h5", "h6",
    "pre", "blockquote", "hr", "dt", "dd", "figure", "figcaption",
}  # fmt: skip


# getaddrinfo's "this name does not exist" (EAI_NODATA is not on every platform);
# EAI_AGAIN, a resolver that could not answer, is transient.
_NO_SUCH_NAME = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)
# Requests that would fail the same way every time.
_PERMANENT_HTTPX_ERRORS = (httpx.UnsupportedProtocol, httpx.InvalidURL)


class FetchError(Exception):
    """The URL could not be turned into text (status, size, type, connection).

    `permanent`: no retry can help (a 4xx answer, a host name that does not
    exist, over the size cap, not text), so the document fails at once; else
    (5xx, timeout, refused connection) the attempt is retried with backoff."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


def permanent_status(status: int) -> bool:
    """An error status no retry can help (the providers' one rule)."""
    return status >= 400 and not retryable_status(status)


def permanent_transport_error(exc: BaseException) -> bool:
    """An httpx error that a retry cannot fix: an unsupported scheme, an invalid
    URL, or a host name that does not resolve (httpx reports that as a
    ConnectError, like a refused connection: the socket.gaierror behind it
    tells them apart)."""
    if isinstance(exc, _PERMANENT_HTTPX_ERRORS):
        return True
    cause: BaseException | None = exc
    seen = 0
    while cause is not None and seen < 10:
        if isinstance(cause, socket.gaierror):
            return cause.errno in _NO_SUCH_NAME
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False


@dataclass(frozen=True)
class Fetched:
    text: str
    title: str


def chunk_text(text: str, size: int, overlap: int) -> list[str]:
    """The text cut into windows of at most `size` characters on word
    boundaries, each sharing up to `overlap` characters (whole words) with the
    previous one; a text no longer than one window is a single chunk."""
    return [text[start:end] for start, end in chunk_spans(text, size, overlap)]


def chunk_spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk. A window is cut back to the last whitespace
    in it, so no chunk ends inside a word; only a word longer than the window
    is cut hard. The next chunk starts at the first word that begins within
    the last `overlap` characters of the previous chunk (or at the next word
    when none does), so no chunk starts inside a word either. Between two
    chunks there is at most whitespace: together they cover the whole text."""
    if overlap >= size:
        raise ValueError("the chunk overlap must be smaller than the chunk size")
    if len(text) <= size:
        return [(0, len(text))]
    spans = []
    start = 0
    while True:
        if start + size >= len(text):
            spans.append((start, len(text)))
            return spans
        end = _last_word_end(text, start, start + size)
        if end is None:  # one word longer than the window: cut it hard
            end = start + size
            spans.append((start, end))
            start = end - overlap
            continue
        spans.append((start, end))
        following = _first_word_start(text, max(end - overlap, start + 1), end)
        if following is None:
            following = _first_word_start(text, end, len(text))
            if following is None:  # only whitespace is left
                return spans
        start = following


def _last_word_end(text: str, start: int, limit: int) -> int | None:
    """The largest `end` in (start, limit] where a word ends (text[end] is the
    whitespace after it), or None when text[start:limit + 1] holds no word end."""
    for end in range(limit, start, -1):
        if text[end].isspace() and not text[end - 1].isspace():
            return end
    return None


def _first_word_start(text: str, low: int, high: int) -> int | None:
    """The smallest position in [low, high) where a word starts."""
    for position in range(low, high):
        if not text[position].isspace() and (position == 0 or text[position - 1].isspace()):
            return position
    return None


class _HtmlText(HTMLParser):
    """Visible text (block elements become line breaks) and the <title>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS:
            self._skipping = max(self._skipping - 1, 0)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> Fetched:
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    title = " ".join("".join(parser.title_parts).split())
    return Fetched("".join(parser.parts), title)


def _looks_like_html(content_type: str, body: str) -> bool:
    if "html" in content_type:
        return True
    head = body.lstrip()[:64].lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


_REDIRECTS = (301, 302, 303, 307, 308)


async def fetch_url(
    client: httpx.AsyncClient, url: str, max_bytes: int, max_redirects: int = 5
) -> Fetched:
    """GET the URL, reading at most `max_bytes` (the cap is enforced while
    streaming, not after: a huge body is never held in memory). Redirects are
    followed here, at most `max_redirects`, each to an http(s) URL; the client's
    transport (services/pipeline/fetch_guard.py) checks the address of every
    connect, so a hop to a refused address fails like a first request would."""
    current = url
    try:
        for hop in range(max_redirects + 1):
            async with client.stream("GET", current, follow_redirects=False) as response:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location is not None:
                    if hop == max_redirects:
                        raise FetchError(
                            f"fetching {url}: more than {max_redirects} redirects "
                            "(documents.max_redirects)",
                            permanent=True,
                        )
                    current = _redirect_target(url, current, location)
                    continue
                return await _read(response, current, max_bytes)
    except AddressRefused as exc:
        shown = url if current == url else f"{url} (redirected to {current})"
        raise FetchError(f"fetching {shown} refused: {exc}", permanent=True) from None
    except httpx.HTTPError as exc:
        raise FetchError(
            f"fetching {current} failed: {exc!r}", permanent=permanent_transport_error(exc)
        ) from exc
    raise AssertionError("unreachable: the last hop returns or raises")


def _redirect_target(url: str, current: str, location: str) -> str:
    """The absolute URL a redirect names; only http and https are followed."""
    try:
        target = httpx.URL(current).join(location)
    except httpx.InvalidURL as exc:
        raise FetchError(
            f"fetching {url}: a redirect to an invalid URL: {exc}", permanent=True
        ) from None
    if target.scheme not in ("http", "https") or not target.host:
        raise FetchError(
            f"fetching {url}: a redirect to {location[:200]}, which is not an http or https URL",
            permanent=True,
        )
    return str(target)


async def _read(response: httpx.Response, url: str, max_bytes: int) -> Fetched:
    status = response.status_code
    if status >= 400:
        body = (await response.aread())[:200].decode("utf-8", "replace")
        raise FetchError(
            f"fetching {url} failed: HTTP {status}: {body}",
            permanent=permanent_status(status),
        )
    content_type = response.headers.get("content-type", "").lower()
    if content_type and not content_type.startswith(_TEXT_TYPES):
        raise FetchError(f"fetching {url}: unsupported content type {content_type}", permanent=True)
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(_too_large(url, max_bytes), permanent=True)
    received = bytearray()
    async for piece in response.aiter_bytes():
        received.extend(piece)
        if len(received) > max_bytes:
            raise FetchError(_too_large(url, max_bytes), permanent=True)
    encoding = response.charset_encoding or "utf-8"
    try:
        body = bytes(received).decode(encoding, "replace")
    except LookupError:  # an unknown charset name
        body = bytes(received).decode("utf-8", "replace")
    if _looks_like_html(content_type, body):
        return html_to_text(body)
    return Fetched(body, "")


def _too_large(url: str, max_bytes: int) -> str:
    return (
        f"fetching {url}: the document is larger than {max_bytes} bytes "
        "(memory.pipelineV2.documentMaxContentBytes)"
    )


def new_http_client(policy: FetchPolicy) -> httpx.AsyncClient:
    """The fetch client: every connect checked against `policy`, no proxy."""
    return httpx.AsyncClient(
        timeout=FETCH_TIMEOUT_S,
        headers={"User-Agent": USER_AGENT},
        transport=GuardedTransport(policy),
    )


class DocumentEvents:
    """Every document state the worker records, delivered in order to the
    watchers of that document in this process (polling alone could miss a
    state that lasted less than one poll)."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Queue[Any]]] = {}

    @contextmanager
    def watch(self, document_id: str) -> Iterator[asyncio.Queue[Any]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._watchers.setdefault(document_id, set()).add(queue)
        try:
            yield queue
        finally:
            watchers = self._watchers.get(document_id, set())
            watchers.discard(queue)
            if not watchers:
                self._watchers.pop(document_id, None)

    def publish(self, document_id: str, document: Any) -> None:
        for queue in self._watchers.get(document_id, ()):
            queue.put_nowait(document)
