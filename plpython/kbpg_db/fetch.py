"""Web pages in: fetch a URL, render it with headless Chromium when it is HTML (so text a
page writes with JavaScript is there), and convert it like a file.

Runs in the converter's child process (:func:`kbpg_db.convert.run_isolated`), so a page
that hangs, redirects forever or is enormous costs that process only. Only http and https
are fetched; the fetch follows at most ``max_redirects`` redirects.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from kbpg_db.convert import Converted, ConvertError, Limits, convert, convert_html, format_of

USER_AGENT = "kbpg (knowledge base ingestion)"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # the server's user, often in a container without user namespaces
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
)


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConvertError(f"{url!r} is not an http or https URL")
    return urllib.parse.urlunsplit(parts)


def _too_slow(url: str, limits: Limits) -> ConvertError:
    return ConvertError(
        f"{url} did not answer within {limits.fetch_timeout_s:g} s (kb.fetch_timeout_s)"
    )


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """TimeoutError in this thread after ``seconds`` (the converter's child runs fetches
    on its main thread; elsewhere the read loop's deadline alone applies)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _get(
    url: str, limits: Limits, validators: dict[str, str] | None = None
) -> tuple[bytes, str, str, dict[str, str]]:
    """The body (at most the text limit), its content type, the URL it came from and its
    validators (ETag, Last-Modified). With ``validators`` from an earlier fetch the request
    is conditional: a page that has not changed raises ConvertError with status 304."""
    redirects = type(
        "Redirects",
        (urllib.request.HTTPRedirectHandler,),
        {"max_redirections": limits.max_redirects, "max_repeats": limits.max_redirects},
    )
    opener = urllib.request.build_opener(redirects())
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    if validators and validators.get("etag"):
        headers["If-None-Match"] = validators["etag"]
    if validators and validators.get("last_modified"):
        headers["If-Modified-Since"] = validators["last_modified"]
    req = urllib.request.Request(url, headers=headers)
    # One deadline for the whole fetch (connect, redirects, headers, body): a server that
    # drips a byte every few seconds never trips a per-read timeout.
    deadline = time.monotonic() + limits.fetch_timeout_s
    try:
        with (
            _alarm(limits.fetch_timeout_s),
            opener.open(req, timeout=limits.fetch_timeout_s) as resp,
        ):
            parts: list[bytes] = []
            size = 0
            while size <= limits.max_text_bytes:
                if time.monotonic() > deadline:
                    raise TimeoutError
                part = resp.read1(min(65536, limits.max_text_bytes + 1 - size))
                if not part:
                    break
                parts.append(part)
                size += len(part)
            body = b"".join(parts)
            ctype = resp.headers.get("Content-Type", "") or ""
            final = resp.geturl()
            found = {
                k: v
                for k, v in (
                    ("etag", resp.headers.get("ETag")),
                    ("last_modified", resp.headers.get("Last-Modified")),
                )
                if v
            }
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            raise ConvertError(f"{url} has not changed", status=304) from None
        if 300 <= exc.code < 400:
            raise ConvertError(
                f"{url} redirects more than {limits.max_redirects} times (or in a loop)"
            ) from None
        raise ConvertError(
            f"{url} answered HTTP {exc.code} {exc.reason}", status=exc.code
        ) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise _too_slow(url, limits) from None
        raise ConvertError(f"{url} could not be fetched ({reason})") from None
    except TimeoutError:
        raise _too_slow(url, limits) from None
    except OSError as exc:
        raise ConvertError(f"{url} could not be fetched ({exc})") from None
    if len(body) > limits.max_text_bytes:
        raise ConvertError(
            f"{url} is larger than {limits.max_text_bytes} bytes; the limit is "
            f"{limits.max_text_bytes} bytes"
        )
    if not body:
        raise ConvertError(f"{url} answered with an empty body")
    return body, ctype, final, found


def chromium() -> str | None:
    """Chromium's path: KBPG_CHROMIUM, else chromium or chromium-browser on PATH."""
    found = os.environ.get("KBPG_CHROMIUM") or shutil.which("chromium")
    return found or shutil.which("chromium-browser")


@contextlib.contextmanager
def _address_space_lifted() -> Iterator[None]:
    """The converter's address-space limit would stop Chromium at start (it reserves far
    more than it uses); the render has its own timeout instead. The limit is lifted in this
    process around the run, not in a ``preexec_fn``, which can hang between fork and exec."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def render(url: str, limits: Limits) -> str:
    """The DOM of ``url`` after its scripts ran (headless Chromium's --dump-dom)."""
    exe = chromium()
    if exe is None:
        raise ConvertError(
            "cannot render the page: Chromium is not installed on the database server",
            hint="apt-get install chromium on the database host, or set KBPG_CHROMIUM",
        )
    budget_ms = int(min(limits.fetch_timeout_s / 2, 10) * 1000)
    with tempfile.TemporaryDirectory(prefix="kbpg-chromium-") as profile:
        cmd = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ]
        try:
            with _address_space_lifted():
                proc = subprocess.run(
                    cmd,
                    capture_output=True,
                    timeout=limits.fetch_timeout_s,
                    env={**os.environ, "HOME": profile},
                )
        except subprocess.TimeoutExpired:
            raise ConvertError(
                f"{url} did not finish rendering within {limits.fetch_timeout_s:g} s"
            ) from None
    dom = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0 or not dom.strip():
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ConvertError(f"{url} could not be rendered ({(err or ['no output'])[-1]})")
    return dom


def _name_of(url: str, ctype: str) -> str:
    path = urllib.parse.urlsplit(url).path
    name = os.path.basename(path) or "index"
    if format_of(name) is None:
        kind = ctype.split(";")[0].strip().lower()
        ext = {
            "text/html": ".html",
            "application/xhtml+xml": ".html",
            "application/pdf": ".pdf",
            "text/csv": ".csv",
            "application/json": ".json",
            "text/plain": ".txt",
            "text/markdown": ".md",
            "application/rss+xml": ".rss",
            "application/atom+xml": ".atom",
        }.get(kind)
        if ext is None and "officedocument" in kind:
            ext = {
                "wordprocessingml": ".docx",
                "presentationml": ".pptx",
                "spreadsheetml": ".xlsx",
            }.get(kind.split(".")[-2] if "." in kind else "", None)
        name += ext or ""
    return name


def fetch_and_convert(
    url: str, limits: Limits, do_render: bool = True, validators: dict[str, str] | None = None
) -> Converted:
    url = check_url(url)
    body, ctype, final, found = _get(url, limits, validators)
    name = _name_of(final, ctype)
    fmt = format_of(name, body)
    meta: dict[str, Any] = {"url": url, **found}
    if final != url:
        meta["final_url"] = final
    if fmt == "html":
        html = render(final, limits) if do_render else body.decode("utf-8", "replace")
        out = convert_html(html, limits)
        out.meta["file_type"] = "html"
        out.meta["rendered"] = do_render
        out.file = html.encode("utf-8")
        out.file_name = re.sub(r"[^\w.-]", "_", name)[:200] or "page.html"
    else:
        try:
            out = convert(body, name, limits)
        except ConvertError as exc:
            raise ConvertError(f"{url} {exc}", exc.hint) from None
        out.file, out.file_name = body, name
    out.meta.update(meta)
    return out
