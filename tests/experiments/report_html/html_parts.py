"""Read a rendered page back with the standard library's HTML parser: its table cells, its marks
(elements with ``data-tip``), its links and its embedded data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any


@dataclass
class Parts:
    cells: list[str] = field(default_factory=list)
    marks: list[dict[str, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    svgs: int = 0
    data: Any = None
    external: list[str] = field(default_factory=list)  # src / stylesheet hrefs: none may exist


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts = Parts()
        self._cell: list[str] | None = None
        self._data: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "td":
            self._cell = []
        if tag == "svg" and "chart" in a.get("class", ""):
            self.parts.svgs += 1
        if "data-tip" in a:
            self.parts.marks.append(a)
        if tag == "a" and "href" in a:
            self.parts.links.append(a["href"])
        if "src" in a or (tag == "link" and "href" in a):
            self.parts.external.append(a.get("src") or a["href"])
        if tag == "script" and a.get("id") == "trainsim-data":
            self._data = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.parts.cells.append("".join(self._cell).strip())
            self._cell = None
        if tag == "script" and self._data is not None:
            self.parts.data = json.loads("".join(self._data))
            self._data = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._data is not None:
            self._data.append(data)
        self.parts.text.append(data)


def read(html: str) -> Parts:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.parts
