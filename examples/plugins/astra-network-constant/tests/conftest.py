"""Test setup for the example plugin.

The tests import ``astra_network_constant``. When the plugin is installed
(``pip install -e .``) that just works; when this folder is run from a checkout
where it is not installed (the astra-sim repository's own test run), fall back
to ``src/`` so the unit tests still run. Tests that need the *installed*
entry point skip themselves in that case.
"""

import sys
from pathlib import Path

try:
    import astra_network_constant  # noqa: F401
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
