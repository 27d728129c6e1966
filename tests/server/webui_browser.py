"""Headless Chromium for the web chat's browser test, through Playwright: which browser this machine has, and
why the test skips when it has none."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Debian's `chromium` (apt-get install chromium), Ubuntu's name for it, Chrome; $HINFER_BROWSER wins.
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def system_chromium() -> str | None:
    given = os.environ.get("HINFER_BROWSER")
    if given:
        return given
    return next((path for name in _NAMES if (path := shutil.which(name))), None)


def launch(playwright):
    """A headless Chromium, or None: the system's first, else the one `python -m playwright install chromium`
    downloads (which needs Playwright's download site)."""
    # Root (as in CI) cannot start Chromium's sandbox; a container's small /dev/shm can crash its renderer.
    args = ["--no-sandbox", "--disable-dev-shm-usage"]
    path = system_chromium()
    if path is not None:
        return playwright.chromium.launch(executable_path=path, headless=True, args=args)
    bundled = playwright.chromium.executable_path
    if bundled and Path(bundled).exists():
        return playwright.chromium.launch(headless=True, args=args)
    return None


NO_BROWSER = ("no Chromium on this machine: install Debian's (apt-get install chromium), set HINFER_BROWSER to a "
              "Chromium or Chrome binary, or run `python -m playwright install chromium`")
NO_PLAYWRIGHT = "playwright is not installed (pip install playwright): it drives the browser"
