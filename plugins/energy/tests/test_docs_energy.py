"""docs/energy.md's energy-optimal layout script runs and prints what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "energy.md"


def test_layout_example_prints_what_the_page_shows(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Example: the energy-optimal layout", 1)[1]
    script = re.search(r"python - <<'EOF'\n(.*?)\nEOF\n```", section, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
