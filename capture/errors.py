"""The one error type capture raises; the CLI prints it as one line.

Capture cannot import kmemscope.errors in the standalone .pyz without carrying
the rest of the package root, so it has its own class with the same shape.
"""


class CaptureError(Exception):
    """A failure the user can act on: str() is the message, `hint` says what to do."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.hint = hint

    def __str__(self):
        base = super().__str__()
        return "%s (%s)" % (base, self.hint) if self.hint else base
