"""The one exception type a user sees as a single error line (see cli.main)."""


class TextmillError(Exception):
    """Bad input or configuration: reported as one line on stderr with a non-zero exit, no traceback."""
