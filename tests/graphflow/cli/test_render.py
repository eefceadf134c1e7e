"""Tables the commands print: one line per row, whatever the text in a cell."""

from __future__ import annotations

from graphflow.cli.render import CELL_MAX, cell, table


def test_text_with_control_characters_prints_as_one_cell() -> None:
    """A tool name proposed by a model, an approver's id: a newline in them would print as
    rows of their own (a forged line of an audit trail)."""
    forged = "x\n7  2026-12-03T00:00:00Z  result  call_9  wire_money  cfo  allow  yes"
    lines = table(["STAGE", "TOOL"], [["proposal", forged], ["decision", "tab\there\r\x00\x7f"]])
    assert len(lines) == 3
    assert "x\\n7  2026" in lines[1] and lines[2].endswith("tab\\there\\r\\x00\\x7f")
    assert cell("line\u2028sep\x85") == "line\\u2028sep\\x85"
    assert cell("naïve ✓ 日本") == "naïve ✓ 日本"  # (printable text is kept)


def test_a_long_cell_is_cut_so_that_the_table_stays_readable() -> None:
    long = "t" * 100_000
    lines = table(["THREAD", "STATUS"], [[long, "paused"], ["t2", "done"]])
    assert all(len(line) < CELL_MAX + 20 for line in lines)
    assert lines[1].startswith("t" * (CELL_MAX - 1) + "\u2026")


def test_wide_and_combining_characters_keep_the_columns_aligned() -> None:
    from graphflow.cli.render import table, width

    assert (width("abc"), width("日本"), width("e\u0301"), width("😀")) == (3, 4, 1, 2)
    lines = table(["THREAD", "STATUS"], [["注文-1", "paused"], ["cafe\u0301", "done"], ["t", "x"]])
    # The second column starts at the same terminal column on every line.
    starts = {width(line[: line.rindex("  ") + 2]) for line in lines}
    assert starts == {width("注文-1") + 2}, lines
