"""Entry point of worker processes: ``python -m rocksmash._worker_entry`` (see worker.py).

A separate module, because running ``rocksmash.worker`` itself with ``-m`` would import it
twice (once through the package, once as ``__main__``).
"""

from rocksmash.worker import main

if __name__ == "__main__":
    main()
