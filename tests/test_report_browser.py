"""The reports open in a real headless browser with the network cut off.

Chromium loads ``report.html`` from ``lens-possym profile`` and ``lens-possym ablate
--sweep bands`` (tiny models) through a recording proxy that refuses everything (see
:mod:`lens_possym.report.browser`): the test proves the page made no http(s) or websocket
request to any host, that it rendered (a non-blank screenshot, plotly's SVGs in the DOM)
and that selecting a head works (the address ``#head=L.H`` selects it through the same
function a click calls). The screenshots come from the same code as the docs' images
(``docs/figures/make_report_screenshots.py``). Without Chromium the test skips locally and
fails on CI (``CI=true``): ``make test`` installs it.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from lens_possym.report.browser import find_chromium, render_offline

ROOT = Path(__file__).resolve().parents[1]


def _screenshots_module():
    path = ROOT / "docs" / "figures" / "make_report_screenshots.py"
    spec = importlib.util.spec_from_file_location("make_report_screenshots", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def browser():
    path = find_chromium()
    if path is None:
        message = "Chromium is not installed (apt-get install chromium, or `make browser`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + ": CI must run the browser test")
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    return _screenshots_module().make_reports(out, "tiny-llama")


@pytest.mark.enable_socket  # the recording proxy listens on 127.0.0.1
def test_profile_report_opens_offline_and_selects_a_head(browser, reports, tmp_path):
    shots = _screenshots_module()
    path = reports["profile"]
    text = path.read_text()
    # the plotly library is inlined once; nothing outside is referenced by the page itself
    assert text.count("<script type='text/javascript'>") == 1
    page = text.replace(text[text.index("<script type='text/javascript'>"):
                             text.index("</script>") + 9], "")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//|file:)""", page)
    for host in ("update.googleapis.com", "accounts.google.com", "clients2.google.com"):
        assert host not in text  # the hosts the recorder sets apart as the browser's own
    run = shots.check_report(path, tmp_path / "profile.png", fragment="head=1.2", height=2400)
    assert run.requests == []
    assert run.dom.count("main-svg") >= 5  # plane, heatmaps, profile, attention, atlas drawn
    assert 'id="explore-head" class="caption" data-head="1.2"' in run.dom
    assert "head 1.2 by frequency" in run.dom


@pytest.mark.enable_socket
def test_ablate_report_opens_offline(browser, reports, tmp_path):
    run = _screenshots_module().check_report(reports["ablate"], tmp_path / "ablate.png",
                                             height=1600)
    assert run.requests == [] and run.dom.count("main-svg") >= 2


@pytest.mark.enable_socket
def test_the_recorder_sees_outside_requests(browser, tmp_path):
    """The check can fail: a page that asks for outside resources is caught."""
    page = tmp_path / "leaky.html"
    page.write_text("<img src='https://example.com/a.png'>"
                    "<script src='http://cdn.example.org/x.js'></script>"
                    "<img src='http://localhost:8080/b.png'>")
    run = render_offline(page)
    hosts = " ".join(run.requests)
    assert "example.com:443" in hosts and "cdn.example.org" in hosts and "localhost:8080" in hosts
