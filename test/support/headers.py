"""Case-insensitive header lookup shared by the mock engine's Request and the client's Response."""

from __future__ import annotations

from typing import Optional


class HeaderLookup:
    """Mixin for objects with `headers`: a list of (name, value) pairs in wire order."""

    headers: list

    def header(self, name: str) -> Optional[str]:
        n = name.lower()
        for k, v in self.headers:
            if k.lower() == n:
                return v
        return None

    def header_all(self, name: str) -> list:
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]
