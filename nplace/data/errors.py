"""The data layer's error for bad input."""


class DataError(ValueError):
  """Bad data input (empty corpus, unknown source, ...): one line naming the
  source or file and the numbers; the CLI prints it and exits with code 2."""
