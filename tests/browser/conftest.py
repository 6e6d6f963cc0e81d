"""Browser tests of the console: Debian's headless Chromium driven by Playwright (never a browser download).

`make test` runs the short one (NEXUS_BROWSER_TESTS=short: test_console_browser_short.py, one sign-in, one
order page with a rejected step, one redrive seen live); `make console-test` runs them all
(NEXUS_BROWSER_TESTS=1). Both targets install the browser extra and Debian's `chromium` package first.
Without the variable (a bare `pytest`) none is collected: the browser may not be installed.
"""

from __future__ import annotations

import os

_MODE = os.environ.get("NEXUS_BROWSER_TESTS", "")
if _MODE == "1":
    collect_ignore_glob: list[str] = []
elif _MODE == "short":
    collect_ignore_glob = ["test_console_browser.py"]
else:
    collect_ignore_glob = ["test_*.py"]
