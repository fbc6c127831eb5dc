"""The benchmark's one error type."""


class BenchError(ValueError):
    """Bad benchmark input; the message is meant for the user."""
