"""The ``bespokv`` command's entry point: says which extra to install, and exits 2, when
the service's dependencies are missing (``pip install rocksmash`` alone has none of
them), instead of a traceback; otherwise runs :func:`bespokv.cli.main`."""

from __future__ import annotations

import sys

from bespokv import INSTALL_HINT, missing_service_modules


def main() -> int:
    missing = missing_service_modules()
    if missing:
        print(f"bespokv: {INSTALL_HINT} (missing: {', '.join(missing)})", file=sys.stderr)
        return 2
    from bespokv.cli import main as cli_main

    return cli_main()
