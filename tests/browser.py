"""Open a page in headless Chromium (Debian's `chromium`, `make chromium-bin`) and record what it did, over
the Chrome DevTools protocol (websocket-client, already a dependency of the kubernetes client).

`open_page(path)` loads a local file and returns every request the page made (Network.requestWillBeSent,
the document itself included), every console message, log entry and uncaught exception, and lets the test
take screenshots of elements and evaluate expressions in the page.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

TIMEOUT = 30.0


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    ws: websocket.WebSocket
    session: str
    requests: list[str] = field(default_factory=list)  # URLs, in order
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    _next: int = 0
    _events: list[dict[str, Any]] = field(default_factory=list)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            reply = self._receive()
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
        raise TimeoutError(f"{method}: no reply in {TIMEOUT} s")

    def wait_for(self, event: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for i, e in enumerate(self._events):
                if e["method"] == event:
                    del self._events[i]
                    return e
            self._receive()
        raise TimeoutError(f"no {event} in {TIMEOUT} s")

    def settle(self, seconds: float = 0.5) -> None:
        """Read events for a while after the load (late console messages, late requests)."""
        self.ws.settimeout(0.1)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(websocket.WebSocketTimeoutException):
                    self._receive()
        finally:
            self.ws.settimeout(TIMEOUT)

    def _receive(self) -> dict[str, Any]:
        msg: dict[str, Any] = json.loads(self.ws.recv())
        method = msg.get("method")
        params = msg.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append((params.get("type", ""), text))
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.console.append((entry.get("level", ""), f"{entry.get('source')}: {entry.get('text')}"))
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(json.dumps(params.get("exceptionDetails", {})))
        if method is not None:
            self._events.append(msg)
        return msg

    def errors(self) -> list[str]:
        """Console errors and warnings, log errors and warnings, uncaught exceptions."""
        bad = [f"{lvl}: {text}" for lvl, text in self.console if lvl in ("error", "warning", "assert")]
        return bad + [f"exception: {e}" for e in self.exceptions]

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, clip: dict[str, float] | None = None) -> bytes:
        """A PNG of the page (or of `clip`, CSS pixels in the document) at scale 1."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])


@contextlib.contextmanager
def open_page(path: Path, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """Chromium started headless on its own profile, `path` loaded (file://) and its load event seen."""
    binary = chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium not installed (make chromium-bin)")
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    proc = subprocess.Popen(
        [
            binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--metrics-recording-only",
            "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {proc.poll()})")
            time.sleep(0.1)
        port, ws_path = port_file.read_text().splitlines()[:2]
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}{ws_path}", timeout=TIMEOUT)
        try:
            page = Page(ws, "")
            target = page.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            page.session = page.send(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
            )["sessionId"]
            for domain in ("Page", "Network", "Runtime", "Log"):
                page.send(f"{domain}.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
            page.send("Page.navigate", {"url": path.resolve().as_uri()})
            page.wait_for("Page.loadEventFired")
            page.settle()
            yield page
        finally:
            ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
