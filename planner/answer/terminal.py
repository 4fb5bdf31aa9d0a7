"""Terminal output of the CLI: tables that print every value whole at any width (``show``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def console() -> Console:
    """The terminal's width on a terminal; unlimited otherwise (pipes, files, CI logs), so that ids and
    plan tables are printed whole whatever COLUMNS says."""
    term = Console()
    return term if term.is_terminal else Console(width=1_000_000)


def _fit(table: Table, width: int) -> bool:
    """Give ``table``'s columns widths that keep every word whole within ``width`` columns (rich's own
    layout may cut a column below its longest word, or crop the table); False when no such layout
    exists. Columns get their longest word, then the room left goes to the columns needing least more
    to show their cells on one line."""
    from rich.cells import cell_len
    from rich.text import Text

    texts = [[Text.from_markup(str(x)).plain for x in [c.header, *c.cells]] for c in table.columns]
    mins = [max([cell_len(w) for t in col for w in t.split()] or [1]) for col in texts]
    maxs = [max([cell_len(line) for t in col for line in t.splitlines()] or [1]) for col in texts]
    room = width - table._extra_width - sum(table._get_padding_width(i) for i in range(len(texts)))
    if sum(mins) > room:
        return False
    if sum(maxs) > room:
        widths, spare = list(mins), room - sum(mins)
        for i in sorted(range(len(texts)), key=lambda i: maxs[i] - mins[i]):
            add = min(spare, maxs[i] - widths[i])
            widths[i] += add
            spare -= add
        for column, w in zip(table.columns, widths):
            column.width = w
    return True


def show(table: Table, out: Console | None = None) -> None:
    """Print ``table`` with every value whole. On a terminal, cells wrap at spaces (headers too) but a
    word is never cut or replaced by '…' (``_fit``); when no layout fits the terminal, each row is
    printed as a record (``header: value`` lines) instead. Off a terminal (pipes, files) the width is
    unlimited: always the table, one line per row."""
    out = out or console()
    if _fit(table, out.width):
        out.print(table)
        return
    headers = [" ".join(str(c.header).split()) for c in table.columns]
    columns = [[str(cell) for cell in c.cells] for c in table.columns]
    width = max(map(len, headers))
    for r in range(table.row_count):
        out.rule(style="dim")
        for header, cells in zip(headers, columns):
            out.print(f"{header:>{width}}: {cells[r]}", highlight=False, soft_wrap=True)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
