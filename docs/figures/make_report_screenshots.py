"""Run ``lens-possym profile`` and ``lens-possym ablate --sweep bands``, open both reports in
headless Chromium with the network cut off, check them and screenshot them.

The browser test (``tests/test_report_browser.py``) calls :func:`make_reports` and
:func:`check_report` with a tiny model; run as a script (on gemma-3-270m by default) it
writes the docs' screenshots, ``docs/figures/report_profile.png`` and
``report_ablate.png``, with the same code::

    PYTHONPATH=. python docs/figures/make_report_screenshots.py [--model gemma-3-270m]

It prints each report's size and what the browser saw.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lens_possym.cli import main as cli
from lens_possym.report.browser import inked_fraction, render_offline

HERE = Path(__file__).resolve().parent


def make_reports(out: Path, model: str, *, layers: str | None = None,
                 sweep_layers: str | None = None) -> dict[str, Path]:
    """Profile and band-sweep reports of ``model`` under ``out`` (``layers``: of both,
    ``sweep_layers``: of the sweep only); returns their paths."""
    profile = ["profile", "--model", model, "--n-prompts", "2", "--n-pairs", "4",
               "--out", str(out / "profile")]
    sweep = ["ablate", "--model", model, "--sweep", "bands", "--n-prompts", "4",
             "--n-pairs", "3", "--no-progress", "--out", str(out / "ablate")]
    if layers:
        profile += ["--layers", layers]
    if layers or sweep_layers:
        sweep += ["--layers", sweep_layers or layers]
    for argv in (profile, sweep):
        if cli(argv) != 0:
            raise RuntimeError(f"lens-possym {' '.join(argv)} failed")
    return {"profile": out / "profile" / "report.html", "ablate": out / "ablate" / "report.html"}


def check_report(path: Path, screenshot: Path, *, fragment: str = "", height: int = 3200,
                 dom: bool = True):
    """Open ``path`` offline, screenshot it; raise unless no outside request was made and
    the screenshot is not blank. Returns the :class:`BrowserRun`."""
    run = render_offline(path, screenshot=screenshot, fragment=fragment, height=height, dom=dom)
    if run.requests:
        raise AssertionError(f"{path} asked for outside resources: {run.requests}")
    inked = inked_fraction(screenshot)
    if inked < 0.02:
        raise AssertionError(f"the screenshot of {path} is blank ({inked:.1%} inked)")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--layers", default=None, help="layers for the band sweep and profile")
    parser.add_argument("--sweep-layers", default="0,3,6,9,12,15,17",
                        help="layers of the band sweep (one pass per layer, head and band)")
    parser.add_argument("--out", default="/tmp/lens-possym-report-screenshots")
    args = parser.parse_args()
    reports = make_reports(Path(args.out), args.model, layers=args.layers,
                           sweep_layers=args.sweep_layers)
    for name, path in reports.items():
        shot = HERE / f"report_{name}.png"
        run = check_report(path, shot, height=3400 if name == "profile" else 2000)
        print(f"{name}: {path} {path.stat().st_size / 1e6:.2f} MB; outside requests: "
              f"{len(run.requests)}; browser's own background requests kept apart: "
              f"{len(run.background)}; screenshot {shot} ({inked_fraction(shot):.0%} inked)")


if __name__ == "__main__":
    main()
