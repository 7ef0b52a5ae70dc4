"""Load a page from disk in headless Chromium and say what broke: the tests' browser driver.

Chromium is driven through the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(JSON messages ending in a NUL byte on file descriptors 3 and 4), so nothing beyond the
``chromium`` binary is needed: no websocket client, no browser download. The page is
opened in a fresh tab after the console and the log are listened to, so an error raised
while the page loads is caught; after the load event every ``<img>`` is read back.

References
----------
Chrome DevTools Protocol: https://chromedevtools.github.io/devtools-protocol/
(``Target.attachToTarget`` with ``flatten``, ``Runtime.consoleAPICalled``,
``Runtime.exceptionThrown``, ``Log.entryAdded``, ``Page.loadEventFired``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PageCheck", "check_page", "find_chromium", "screenshot"]

# "inside": the image's right edge is within its <section> (or the page's body)
_IMAGES = ("JSON.stringify(Array.from(document.images).map(i => ({src: i.src.slice(0, 60), "
           "complete: i.complete, width: i.naturalWidth, inside: "
           "i.getBoundingClientRect().right <= (i.closest('section') || document.body)"
           ".getBoundingClientRect().right + 0.5})))")


def find_chromium() -> str | None:
    """Return the Chromium (or Chrome) executable on ``PATH``, or None.

    Debian's ``chromium-headless-shell`` (what CI installs: no GTK, a fraction of the
    packages) is enough for these checks.
    """
    for name in ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome",
                 "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _flags(profile: str) -> list[str]:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
    return ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--mute-audio",
            f"--user-data-dir={profile}"]


@dataclass
class PageCheck:
    """What loading a page showed.

    Attributes
    ----------
    images
        One ``{"src", "complete", "width", "inside"}`` per ``<img>`` (``src`` cut to 60
        characters; ``inside``: drawn within its ``<section>``, not spilling out of it).
    errors
        Console errors, uncaught exceptions and error log entries (failed loads), as text.
    """

    images: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def broken_images(self) -> list[dict[str, Any]]:
        """The images that did not load (not complete, or no natural width)."""
        return [i for i in self.images if not i["complete"] or i["width"] <= 0]

    @property
    def overflowing_images(self) -> list[dict[str, Any]]:
        """The images drawn wider than their section (they spill out of it)."""
        return [i for i in self.images if not i["inside"]]


class _Pipe:
    """One CDP connection over the pipe: send a command, wait for its answer, keep events."""

    def __init__(self, binary: str, profile: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # Chromium reads commands on fd 3 and writes answers on fd 4
            # move both ends above 4 first: a pipe's own number may be 3 or 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            for wanted, fd in zip((3, 4), high, strict=True):
                os.dup2(fd, wanted)  # dup2 onto another number clears close-on-exec

        self.proc = subprocess.Popen(
            [binary, *_flags(profile), "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=fds)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._done = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    with self._done:
                        self._answers[msg["id"]] = msg
                        self._done.notify_all()
                else:
                    self.events.put(msg)

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        with self._done:
            if not self._done.wait_for(lambda: ident in self._answers, timeout):
                raise TimeoutError(f"chromium did not answer {method} within {timeout} s")
            answer = self._answers.pop(ident)
        if "error" in answer:
            raise RuntimeError(f"chromium: {method} failed: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_browser)


def _error_text(event: dict[str, Any]) -> str | None:
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
        return f"console.{params['type']}: {args}"
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        described = details.get("exception", {}).get("description", "")
        return f"uncaught: {details.get('text', '')} {described}".strip()
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"log: {entry.get('text', '')} {entry.get('url', '')}".strip()
    return None


def check_page(page: str | Path, *, binary: str | None = None, timeout: float = 60.0
               ) -> PageCheck:
    """Load ``page`` (a file) in headless Chromium; return its images and errors.

    Raises
    ------
    FileNotFoundError
        If no Chromium is installed.
    TimeoutError
        If the page does not fire its load event within ``timeout`` seconds.
    """
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="islands-chromium-") as profile:
        pipe = _Pipe(binary, profile)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget",
                                {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session=session)
            check = PageCheck()
            deadline = time.monotonic() + timeout
            loaded = False
            while not loaded:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{page} did not load within {timeout} s")
                try:
                    event = pipe.events.get(timeout=left)
                except queue.Empty:
                    continue
                loaded = (event.get("method") == "Page.loadEventFired"
                          and event.get("sessionId") == session)
                text = _error_text(event)
                if text is not None:
                    check.errors.append(text)
            found = pipe.call("Runtime.evaluate", {"expression": _IMAGES,
                                                   "returnByValue": True}, session=session)
            check.images = json.loads(found["result"]["value"])
            time.sleep(0.2)  # errors logged just after the load event
            while not pipe.events.empty():
                text = _error_text(pipe.events.get())
                if text is not None:
                    check.errors.append(text)
            return check
        finally:
            pipe.close()


def screenshot(page: str | Path, out: str | Path, *, width: int = 1200, height: int = 1500,
               binary: str | None = None, timeout: float = 120.0) -> Path:
    """Save a PNG of the top ``width`` × ``height`` pixels of ``page`` (``--screenshot``)."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    target = Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="islands-chromium-") as profile:
        subprocess.run(
            [binary, *_flags(profile), "--hide-scrollbars", f"--window-size={width},{height}",
             f"--screenshot={target}", Path(page).resolve().as_uri()],
            check=True, timeout=timeout, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return target
