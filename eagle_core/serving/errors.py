"""Messages meant for the page (never a stack trace)."""


class UserError(ValueError):
    """A message for the page."""


class Finished(UserError):
    """Step or Run on a generation that already ended: it is kept, never silently replaced."""


class Busy(UserError):
    """The session (or the server) is busy with something that must not be interrupted."""


class Stopped(UserError):
    """Stop came before there was anything to show (a generation being computed in one go, a Step waiting for
    its turn): the request ends without a cycle."""
