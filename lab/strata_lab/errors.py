"""The one exception the command line turns into a clear message and a non-zero exit."""


class LabError(Exception):
    """A user-facing error: bad input, a missing library or program, a corrupt results file.

    The message is printed as is, so it must say what went wrong and what to do about it.
    """

    exit_code = 2
