"""The one exception type that the CLI reports as a one-line user error."""


class UserError(ValueError):
  """Bad input from the user: a flag value, a missing or malformed file.

  The CLI prints its message on one line and exits with status 2; any other
  exception is a bug and keeps its traceback.
  """
