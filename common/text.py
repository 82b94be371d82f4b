"""Text from datasets and traces made safe to print: one helper for every line kmemscope shows.

A label, host, folder name or comm may hold a newline or a terminal escape
(`ESC ] 0 ; title BEL` retitles a terminal, others recolour or rewrite it):
printed raw, it would forge lines or act on the user's terminal. Everything
kmemscope prints as text (table cells, notes, errors, headers) passes through
printable(); JSON output keeps the data as it is, escaped by JSON itself.

Names and text that go into SQL are quoted here too (quote_ident, quote_literal): a
table name comes from a trace, a label from a bundle, and neither is ever pasted raw.
"""

# C0 and C1 control characters and DEL, shown as \xNN (newline, CR and tab as \n \r \t);
# the Unicode line and paragraph separators (a terminal or editor may break the line there)
# and the bidirectional controls (they reorder what follows: a label that reads as one
# value and is another), shown as \uNNNN.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_CONTROL.update({c: f"\\u{c:04x}" for c in [0x061c, 0x200e, 0x200f, 0x2028, 0x2029,
                                            *range(0x202a, 0x202f), *range(0x2066, 0x206a)]})


def printable(text):
    """`text` with control characters escaped: the one rule for every name, label, path or
    note kmemscope prints as text."""
    return str(text).translate(_CONTROL)


def printable_lines(text):
    """`text` of several lines with control characters escaped inside each line (the line
    breaks kmemscope itself wrote stay; a stray CR or escape does not)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def quote_ident(name):
    """`name` as a quoted SQL identifier (table names come from traces: never paste them)."""
    return '"' + str(name).replace('"', '""') + '"'


def quote_literal(text):
    """`text` as a quoted SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


# Beyond this a double's fixed-point digits are noise (1.7e308 has 309 of them): such a
# number is written with an exponent, as tables do (render/tables.py).
FIXED_POINT_MAX = 1e21


def number_text(value, places=2):
    """`value` with `places` decimals, or as 1.7e+308 where fixed point would run to hundreds
    of digits; inf and nan as Python writes them."""
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if abs(value) >= FIXED_POINT_MAX:
        return f"{value:.6g}"
    return f"{value:.{places}f}"
