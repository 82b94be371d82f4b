"""SQL results of plain scalar columns as Python rows (reader.query_rows)."""


class Rows:
    """A result of plain scalar columns as Python rows, which tables.format_table prints as
    it prints an Arrow table, without importing pyarrow (a tenth of a second of a quick
    `sql`).

    kinds: one of KINDS per column, what format_table needs of its type."""
    KINDS = ("int", "float", "text", "bool")

    def __init__(self, column_names, kinds, rows):
        self.column_names, self.kinds, self.rows = list(column_names), list(kinds), rows

    @property
    def num_rows(self):
        return len(self.rows)

    def columns_as_lists(self):
        return [[r[j] for r in self.rows] for j in range(len(self.column_names))]

    def slice(self, offset, length):
        """Rows offset .. offset+length, as pyarrow.Table.slice gives them."""
        return Rows(self.column_names, self.kinds, self.rows[offset:offset + length])
