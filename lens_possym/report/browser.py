"""Open a report in headless Chromium with the network cut off, and record what it asked for.

Used by the tests (the report must open offline, with no outside request) and by
``docs/figures/make_report_screenshots.py`` (so the screenshots in the docs are what the
test saw). How outside requests are caught:

* Chromium is started with ``--proxy-server`` pointing at a small recording proxy on
  127.0.0.1 and ``--proxy-bypass-list=<-loopback>``: *every* http(s) and websocket request
  the page makes, to any host (localhost included), goes to that proxy, which writes it down
  and refuses it (https arrives as ``CONNECT host:443``, so it is caught before any
  encryption);
* ``--host-resolver-rules="MAP * ~NOTFOUND"``: no name resolves, so nothing can leave by
  another route either;
* Chromium's own background traffic is turned off by flags where a flag exists; what is
  left (the component updater's ``update.googleapis.com``, sign-in's ``accounts.google.com``
  and the network clock's ``clients2.google.com``, which Debian's Chromium 156 contacts even
  for an empty page) is recognised by host (:data:`BROWSER_OWN_HOSTS`) and kept apart in
  :attr:`BrowserRun.background`: a page request to one of those hosts would be missed, so
  the tests also check that the report's text does not name them.

A ``file://`` page can still read other local files; the report references none (its
images are ``data:`` URLs, its scripts inline), which the tests check in the page's text.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..errors import LensPossymError

__all__ = ["find_chromium", "render_offline", "BrowserRun", "BrowserMissingError",
           "BROWSER_OWN_HOSTS", "inked_fraction"]

#: hosts Chromium itself contacts in the background, whatever the page
BROWSER_OWN_HOSTS = ("update.googleapis.com", "accounts.google.com", "clients2.google.com")

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


class BrowserMissingError(LensPossymError, FileNotFoundError):
    """No Chromium/Chrome executable was found."""


def find_chromium() -> str | None:
    """Path of a Chromium-like browser (``$CHROMIUM`` first), or ``None``."""
    candidates = [os.environ.get("CHROMIUM", "")] + list(_BROWSERS)
    for name in candidates:
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


@dataclass
class BrowserRun:
    """What one offline page load gave: the rendered DOM, the outside requests the page made
    (``requests``, as ``"METHOD url"``), the browser's own background requests
    (``background``) and the screenshot (PNG path, if asked)."""

    dom: str
    requests: list[str] = field(default_factory=list)
    background: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def _host(request: str) -> str:
    from urllib.parse import urlsplit

    target = request.split(" ", 1)[1]
    if "://" not in target:  # CONNECT host:port
        return target.rsplit(":", 1)[0]
    return urlsplit(target).hostname or ""


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str]

    def _refuse(self) -> None:
        self.server.seen.append(f"{self.command} {self.path}")  # type: ignore[attr-defined]
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_CONNECT = do_PUT = do_OPTIONS = _refuse

    def log_message(self, *args) -> None:  # quiet
        pass


def _chromium_args(browser: str, proxy_port: int, user_data_dir: str) -> list[str]:
    return [
        browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--no-first-run", "--no-default-browser-check", "--disable-extensions",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-domain-reliability", "--metrics-recording-only",
        "--component-updater=disable", "--no-pings",
        "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,"
        "Translate,AutofillServerCommunication",
        f"--user-data-dir={user_data_dir}",
        f"--proxy-server=http://127.0.0.1:{proxy_port}", "--proxy-bypass-list=<-loopback>",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--virtual-time-budget=5000",
    ]


def render_offline(html_path: str | Path, *, screenshot: str | Path | None = None,
                   dom: bool = True, fragment: str = "", width: int = 1280,
                   height: int = 4000, browser: str | None = None,
                   timeout: float = 120.0) -> BrowserRun:
    """Load ``html_path`` in headless Chromium, offline (one page load); return its DOM
    (``dom``), the requests it made and (``screenshot``) a PNG of the first
    ``width × height`` pixels.

    ``fragment`` is appended to the address (e.g. ``"head=3:1"`` opens the profile
    report's explorer on that head).
    """
    browser = browser or find_chromium()
    if browser is None:
        raise BrowserMissingError("no Chromium found: install it (apt-get install chromium, "
                                  "or `make browser`) or set $CHROMIUM to its path")
    url = Path(html_path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as user_data_dir:  # a fresh browser profile
            args = _chromium_args(browser, server.server_address[1], user_data_dir)
            shot = None
            extra = ["--dump-dom"] if dom else []
            if screenshot is not None:
                shot = Path(screenshot)
                shot.parent.mkdir(parents=True, exist_ok=True)
                extra += [f"--window-size={width},{height}", f"--screenshot={shot.resolve()}"]
            text = subprocess.run(args + extra + [url], capture_output=True, text=True,
                                  timeout=timeout, check=True).stdout
    finally:
        server.shutdown()
        server.server_close()
    seen = list(server.seen)  # type: ignore[attr-defined]
    own = [r for r in seen if _host(r) in BROWSER_OWN_HOSTS]
    return BrowserRun(dom=text, requests=[r for r in seen if r not in own], background=own,
                      screenshot=shot)


def inked_fraction(png: str | Path) -> float:
    """Share of a screenshot's pixels that are not (near) white: 0 for a blank page."""
    from matplotlib.image import imread

    pixels = imread(str(png))[..., :3]
    return float((pixels.min(axis=-1) < 0.9).mean())
