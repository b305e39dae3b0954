"""``python -m bespokv``: the same CLI as the ``bespokv`` command."""

from bespokv.command import main

raise SystemExit(main())
