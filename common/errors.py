"""Typed errors that library code raises and the CLI turns into one line on stderr."""


class KmemscopeError(Exception):
    """A failure the user can act on; str() is the message, `hint` says what to do."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.hint = hint

    def __str__(self):
        base = super().__str__()
        return f"{base} ({self.hint})" if self.hint else base


class TraceFileError(KmemscopeError):
    """A trace.dat or bundle that cannot be read: missing, empty, truncated, corrupt."""


class DatasetError(KmemscopeError):
    """A dataset directory that is missing, empty or lacks a table a command needs."""


class QueryError(KmemscopeError):
    """An unknown analysis, a bad parameter, or SQL that DuckDB rejects."""


class CaptureError(KmemscopeError):
    """A recording that cannot start, run or be put back: no root, no tracefs, no trace-cmd,
    someone else tracing, no space. Raised by kmemscope.capture, which runs on Python 3.8."""
