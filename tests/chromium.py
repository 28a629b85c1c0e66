"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe): load a page,
collect its console errors and uncaught exceptions, evaluate JavaScript in it, take a screenshot.

Debian's `chromium` package; `find_chromium()` is None where it is not installed (tests skip, CI installs it).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Page:
    """One headless browser with one tab; use as a context manager."""

    def __init__(self, width: int = 1200, height: int = 900, timeout: float = 60.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.errors: list[str] = []
        self._id = 0
        self._buffer = b""
        self._events: list[dict] = []  # events that arrived while waiting for a reply

    def __enter__(self) -> Page:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="edgekit-chromium-")
        args = [
            find_chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile}",
            "about:blank",
        ]

        def child_fds():  # Chromium reads commands on fd 3 and writes replies on fd 4 (moved out of the way first)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._proc = subprocess.Popen(args, preexec_fn=child_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        try:
            self._open_tab()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _open_tab(self) -> None:
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self._send(f"{domain}.enable", session=True)
        self._send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            True,
        )

    def __exit__(self, *exc) -> None:
        try:
            self._send("Browser.close")
        except Exception:
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def load(self, path: Path) -> None:
        """Navigate to a local file, wait for its load event, then for two animation frames (drawing done)."""
        self._events.clear()
        self._send("Page.navigate", {"url": Path(path).resolve().as_uri()}, True)
        self._wait_event("Page.loadEventFired")
        self.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))")

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression (awaited when it is a promise)."""
        reply = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"JavaScript failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page (beyond the viewport) as a PNG."""
        size = self._send("Page.getLayoutMetrics", session=True)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self._send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}, True)["data"]
        Path(path).write_bytes(base64.b64decode(data))

    # --- the protocol -------------------------------------------------------------------------------------

    def _send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._note(reply)
            self._events.append(reply)

    def _wait_event(self, method: str) -> dict:
        while True:
            if self._events:
                message = self._events.pop(0)
            else:
                message = self._read()
                self._note(message)
            if message.get("method") == method:
                return message["params"]

    def _note(self, message: dict) -> None:
        """Keep console errors, uncaught exceptions and error-level log entries."""
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            if not select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError(f"no reply from Chromium in {self.timeout:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self._proc.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)
