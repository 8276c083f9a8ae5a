"""One self-contained HTML page per run (``DIR/report.html`` beside a command's other ``--out`` files).

A page is rendered from the same records the command prints as JSON (one source of truth), embeds
them in a ``<script type="application/json" id="trainsim-data">`` block, and names the command that
made it and the trainsim version. Charts are hand-written inline SVG (:mod:`.svg`), the behaviour
(sortable tables, hover labels, a self-check the browser tests read) a little plain JavaScript
(:mod:`.page`): no chart library, because the page must open from ``file://`` with no network, stay
small (a vendored library would be most of its size) and need no pinned third-party code.

One module per page kind: :mod:`.whatif`, :mod:`.plan`, :mod:`.nccl`, :mod:`.published`.
"""
