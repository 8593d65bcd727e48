"""The HTML report opened in a real headless Chromium (Debian's `chromium`).

Talks the DevTools protocol over `--remote-debugging-pipe` (fds 3 and 4, NUL-separated JSON),
so no websocket library is needed. Checks: no console error or uncaught exception, no request
to anything but the file itself (no network), every plot rendered (a non-empty SVG or canvas),
user strings shown as text rather than markup; takes a full-page screenshot.

Skips with the reason when no Chromium is installed (`make test` installs it where apt exists).

Also a tool: `python tests/test_browser.py REPORT.html SHOT.png` checks a report and saves its
screenshot.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
    "--remote-debugging-pipe",
]


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """A headless Chromium driven over the DevTools pipe; one page, flattened session."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.events: list[dict] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="sitsprof-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move our ends out of the way of 3 and 4 before the child claims those numbers.
        fds = [to_child_r, from_child_w]

        def wire_fds():  # runs in the child, before exec
            os.dup2(fds[0], 3)
            os.dup2(fds[1], 4)

        for i, fd in enumerate(fds):
            if fd in (3, 4):
                fds[i] = os.dup(fd)
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            close_fds=False, preexec_fn=wire_fds,
        )
        for fd in {to_child_r, from_child_w, *fds}:
            os.close(fd)
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)

    # -- protocol ---------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"chromium closed the DevTools pipe: {err}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    # -- page ---------------------------------------------------------------------------
    def open(self, path: Path, wait_for: str, timeout: float = 60.0) -> None:
        """Navigate to a local file and wait until the JS expression `wait_for` is truthy."""
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session=True)
        deadline = time.monotonic() + timeout
        while not self.evaluate(wait_for):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied {wait_for!r}")
            time.sleep(0.1)

    def screenshot(self, out: Path, width: int = 1400, max_height: int = 16000) -> Path:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)
        time.sleep(0.3)  # let plotly's responsive resize settle
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": min(height, max_height), "deviceScaleFactor": 1,
                   "mobile": False}, session=True)
        time.sleep(0.5)
        shot = self.send("Page.captureScreenshot", {"format": "png"}, session=True)
        out.write_bytes(base64.b64decode(shot["data"]))
        self.page_height = min(height, max_height)
        return out

    def tiles(self, prefix: Path, width: int = 1400, tile: int = 1000) -> list[Path]:
        """The page (after `screenshot`) cut into readable full-resolution tiles."""
        paths = []
        for i, y in enumerate(range(0, self.page_height, tile)):
            clip = {"x": 0, "y": y, "width": width, "height": min(tile, self.page_height - y), "scale": 1}
            shot = self.send("Page.captureScreenshot", {"format": "png", "clip": clip}, session=True)
            path = Path(f"{prefix}-{i}.png")
            path.write_bytes(base64.b64decode(shot["data"]))
            paths.append(path)
        return paths

    def problems(self) -> dict[str, list[str]]:
        """Console errors, uncaught exceptions, and requests to anything but file:/data:/about:."""
        errors, requests = [], []
        for ev in self.events:
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(p["entry"].get("text", ""))
            elif method == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not url.startswith(("file:", "data:", "about:", "blob:")):
                    requests.append(url)
        return {"errors": errors, "requests": requests}

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:  # noqa: BLE001 - it may already be gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)


PLOT_STATE_JS = """
Array.from(document.querySelectorAll('div.plot')).map(function (el) {
  var svg = el.querySelectorAll('svg.main-svg');
  var marks = el.querySelectorAll(
    '.scatterlayer .trace path, .barlayer .point path, .heatmaplayer image, path.js-line');
  var canvas = Array.from(el.querySelectorAll('canvas')).filter(function (c) { return c.width > 0 && c.height > 0; });
  var box = el.getBoundingClientRect();
  return {id: el.id, rendered: el.getAttribute('data-rendered') === '1', svgs: svg.length,
          marks: marks.length, canvases: canvas.length, width: box.width, height: box.height,
          error: (el.querySelector('.plot-error') || {}).textContent || null};
})
"""


def check_report(path: Path, screenshot: Path | None = None, binary: str | None = None,
                 tiles: Path | None = None) -> dict:
    """Open a report, wait for every plot, return {'plots', 'errors', 'requests', 'title'}."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary on PATH")
    browser = Chromium(binary)
    try:
        browser.open(Path(path), "document.body && document.body.hasAttribute('data-plots-done')")
        state = {"plots": browser.evaluate(PLOT_STATE_JS), "title": browser.evaluate("document.title"),
                 "injected": browser.evaluate("document.querySelectorAll('img, iframe, object, embed').length"),
                 "hostile_text": browser.evaluate("document.body.innerText.indexOf('<img src=x') >= 0")}
        if screenshot is not None:
            browser.screenshot(Path(screenshot))
            if tiles is not None:
                state["tiles"] = [str(p) for p in browser.tiles(Path(tiles))]
        state.update(browser.problems())
        return state
    finally:
        browser.close()


def _skip_reason() -> str | None:
    if find_chromium() is None:
        return ("no chromium on PATH (`make test` installs Debian's chromium where apt-get exists; "
                "else `apt-get install -y chromium`)")
    return None


needs_chromium = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

HOSTILE = '<img src=x onerror="console.error(1)">&amp;"node\'7'


def _policy_payload() -> dict:
    results = [{"policy": p, "capacity": c, "block_hit_ratio": h, "token_hit_ratio": h, "prefix_hit_ratio": h * 0.9,
                "evictions": 100, "extra": {"p99_ms": 300 * (1 - h)}}
               for p, base in (("lru", 0.2), ("lirs", 0.25), (HOSTILE, 0.3))
               for c, h in ((1000, base), (10000, base + 0.15), (50000, base + 0.2))]
    decisions = [{"t": i * 60.0, "policy": "lirs" if i < 6 else "sits", "entropy": 2 + i / 4, "p99_ms": 40 + 3 * i}
                 for i in range(12)]
    return {"results": results, "decisions": decisions}


@pytest.mark.slow  # ~18 s: starts Chromium and draws every plot
@needs_chromium
def test_report_renders_in_headless_chromium(tmp_path):
    """The real pipeline: two synthetic runs (one host name hostile) and policy results -> HTML."""
    from sitsprof.reports.report import write_report
    from sitsprof.reports.synthetic import make_synthetic_run

    runs = [make_synthetic_run(tmp_path / "runs", "node-a", seed=1, samples=20_000).path,
            make_synthetic_run(tmp_path / "runs", "node-b", seed=2, samples=20_000, host=HOSTILE,
                               slowdown=1.1).path]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(_policy_payload()))
    html_path = write_report(runs, tmp_path / "report.html", policy_results_path=policy)
    shot = tmp_path / "report.png"
    state = check_report(html_path, screenshot=shot)
    assert state["errors"] == [], state["errors"]
    assert state["requests"] == [], f"report fetched from the network: {state['requests']}"
    assert len(state["plots"]) >= 20, len(state["plots"])
    for plot in state["plots"]:
        assert plot["error"] is None, plot
        assert plot["rendered"] and plot["svgs"] > 0, plot
        assert plot["marks"] > 0 or plot["canvases"] > 0, f"empty plot: {plot}"
        assert plot["width"] > 100 and plot["height"] > 100, plot
    assert state["injected"] == 0, "a user string became markup"
    assert state["hostile_text"], "the hostile host name is not shown as text"
    assert shot.stat().st_size > 50_000
    keep = os.environ.get("SITSPROF_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


if __name__ == "__main__":  # python tests/test_browser.py REPORT.html [SHOT.png [TILE_PREFIX]]
    args = sys.argv[1:]
    result = check_report(Path(args[0]), Path(args[1]) if len(args) > 1 else None,
                          tiles=Path(args[2]) if len(args) > 2 else None)
    print(json.dumps({k: v for k, v in result.items() if k != "plots"}, indent=1))
    for plot in result["plots"]:
        print(plot)
    sys.exit(1 if result["errors"] or result["requests"] else 0)
