from __future__ import annotations

import os

from hypothesis import settings

# ROCKSMASH_THOROUGH=1 multiplies the examples of the property tests (for soak runs).
settings.register_profile("thorough", max_examples=1000)
if os.environ.get("ROCKSMASH_THOROUGH"):
    settings.load_profile("thorough")
