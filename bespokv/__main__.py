"""``python -m bespokv``: the same CLI as the ``bespokv`` command."""

from bespokv.cli import main

raise SystemExit(main())
