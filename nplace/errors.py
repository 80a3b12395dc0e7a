"""The three kinds of bad input. Each message is one line naming the offending key, file or
value; `nplace` prints it and exits with code 2, before anything is built or compiled."""


class UsageError(Exception):
  """Bad command-line input: a missing or unknown flag, a path that does not exist."""


NOT_SET = object()  # ConfigError's value for a key the config lacks


class ConfigError(ValueError):
  """A bad configuration value; the message names the key."""

  def __init__(self, key: str, value, why: str):
    super().__init__(f"config error: {key}{'' if value is NOT_SET else f'={value!r}'}: {why}")
    self.key = key


class DataError(ValueError):
  """Bad data input (empty corpus, unknown source, ...), naming the source or file and the
  numbers."""
