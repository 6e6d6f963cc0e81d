"""Browser tests of the console: Debian's headless Chromium driven by Playwright (never a browser download).

Collected only under `make console-test` (NEXUS_BROWSER_TESTS=1), which installs the browser extra and
the `chromium` package first; `make test` keeps the HTTP-level console tests (tests/integration).
"""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("NEXUS_BROWSER_TESTS") == "1" else ["test_*.py"]
