"""``python -m rocksmash``: the same command-line tool as ``rocksmash`` (rocksmash/cli.py)."""

from rocksmash.cli import main

raise SystemExit(main())
