"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

``--dump-dom`` and ``--screenshot`` see a page as it first renders; the MLflow compare page's
metrics table is a virtualised grid 300 pixels high that renders only the rows in view, so a test
must scroll it before the last metrics (``verdict_code.*``) exist in the DOM. The protocol lets a
test run JavaScript in the page and capture a screenshot afterwards, with no websocket or browser
driver package: Chromium reads commands from file descriptor 3 and writes replies to 4, each a JSON
object ended by a NUL byte.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
from pathlib import Path
from typing import Any

#: A descriptor number above the protocol's 3 and 4, where the pipes wait before they are put there.
FIRST_FREE_FD = 10
#: Seconds a page may take to meet a condition before :meth:`Browser.wait_for` gives up.
WAIT_TIMEOUT = 60.0


class Browser:
    """One headless Chromium with one page, commanded over a pipe; a context manager that ends the browser."""

    def __init__(self, executable: str, flags: list[str], *, profile: Path, width: int, height: int) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def wire_pipes() -> None:
            # In the child: the protocol's fixed descriptors 3 and 4, inheritable across exec. The pipes
            # are first moved above them, as os.pipe() may have returned 3 or 4 itself.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, FIRST_FREE_FD) for fd in (commands_read, replies_write)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._process = subprocess.Popen(
            [executable, *flags, "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_pipes,
            close_fds=False,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.kill()
        self._process.wait(timeout=30)
        os.close(self._commands)
        os.close(self._replies)

    def send(self, method: str, **params: Any) -> dict:
        """Send one protocol command (to the page once attached) and return its result; raise on an error reply."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if getattr(self, "_session", None):
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the protocol pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, condition: str, *, timeout: float = WAIT_TIMEOUT) -> Any:
        """Poll the JavaScript expression ``condition`` until it is truthy and return its value."""
        poll = f"""new Promise((resolve, reject) => {{
            const deadline = Date.now() + {timeout * 1000};
            const check = () => {{
                let value;
                try {{ value = ({condition}); }} catch (error) {{ value = null; }}  // the page is still loading
                if (value) resolve(value);
                else if (Date.now() > deadline) reject(new Error("timed out"));
                else setTimeout(check, 200);
            }};
            check();
        }})"""
        return self.evaluate(poll)

    def screenshot(self, path: Path) -> Path:
        """The viewport as a PNG file at ``path``."""
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path
