"""A real headless Chromium (Debian's ``chromium``) for the web tests: one run's DOM and console.

``scripts/test`` installs chromium where it is missing and sets ``ARENAD_REQUIRE_BROWSER=1``:
there a missing browser fails the tests that import this; elsewhere they are skipped with the
reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from web_dom import Node, parse

ROOT = Path(__file__).parents[1]
ARTIFACTS = Path(os.environ.get("ARENAD_ARTIFACTS", ROOT / ".artifacts")) / "web"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
PHONE = "390,844"  # CSS pixels of a common phone
BROWSER_TIMEOUT = 90.0

if BROWSER is None:
    reason = "chromium is not installed (apt-get install chromium; scripts/test does)"
    if os.environ.get("ARENAD_REQUIRE_BROWSER") == "1":
        raise RuntimeError(reason)
    pytest.skip(reason, allow_module_level=True)

CONSOLE = re.compile(r":CONSOLE[:(]|Refused to|Page load failed")


def chromium(url: str, *flags: str) -> tuple[str, list[str]]:
    """(stdout, console lines) of one headless run on ``url``."""
    assert BROWSER is not None
    with tempfile.TemporaryDirectory(prefix="arenad-chromium-") as profile:
        proc = subprocess.run(
            [
                BROWSER,
                "--headless",
                "--no-sandbox",  # root in a container: no user namespace for the sandbox
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                f"--window-size={PHONE}",
                *flags,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=BROWSER_TIMEOUT,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if CONSOLE.search(line)]
    return proc.stdout, console


def dom_of(url: str) -> Node:
    html, console = chromium(url, "--dump-dom")
    assert console == [], console
    assert html.strip(), "the browser dumped no DOM"
    return parse(html)
