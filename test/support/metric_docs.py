"""docs/metrics.md as the integration tests read it: the documented families, by section."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def families_by_section() -> dict:
    """{section title: {family name, ...}} from the tables of docs/metrics.md."""
    out: dict = {}
    section = None
    for line in DOCS.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        m = re.match(r"\| `([a-z_:]+)` \| (counter|gauge|histogram) \|", line)
        if m:
            out.setdefault(section, set()).add(m.group(1))
    return out


def documented_families(sections_excluded=("Route journal",)) -> set:
    """Every documented family outside the excluded sections."""
    return {n for s, names in families_by_section().items() if s not in sections_excluded for n in names}
