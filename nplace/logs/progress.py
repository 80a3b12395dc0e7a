"""The console's view of a run: a tqdm bar on a terminal, plain lines otherwise (logs). Within
`labelled` (nplace sweep), each run's lines carry its short label and come at most
LINES_PER_RUN times a run."""
import contextlib
import contextvars
import math
import sys
import time

import tqdm

BAR = "step {n_fmt}/{total_fmt} {bar} {percentage:3.0f}% [{elapsed}<{remaining}] {postfix}"
LINES_PER_RUN = 20  # off a terminal, in a sweep: protocol 2's grids log every one of 2,000 steps
_LABELS = contextvars.ContextVar("labels", default=None)


@contextlib.contextmanager
def labelled(labels: dict[str, str]):
  """Within, the progress of a run named in `labels` (run name -> label) shows its label, not its
  name: a sweep's trial names run to 150 characters, and the sweep prints each once, as it starts."""
  token = _LABELS.set(labels)
  try:
    yield
  finally:
    _LABELS.reset(token)


def labels_of(names) -> dict[str, str]:
  """Run name -> its label, for the runs `labelled` names; {} outside it (nplace train)."""
  labels = _LABELS.get() or {}
  return {name: labels[name] for name in names if name in labels}


def lines_every(log_every: int, steps: int) -> int:
  """Steps between a labelled run's lines: its log cadence, or the multiple of it that prints
  at most LINES_PER_RUN lines."""
  return log_every * math.ceil(steps / (log_every * LINES_PER_RUN))


class Progress:
  """step, loss, tokens/s and ETA, and one-line messages, from process 0 (`active`)."""

  def __init__(self, total: int, tokens_per_step: int, active: bool, stream=None, every: int = 1,
               labels: dict | None = None):
    """`every`: off a terminal, a line only at multiples of this step, and at the last; `labels`:
    run name -> the label its lines and messages carry (labels_of)."""
    # sys.stdout when the run starts, not when this module was imported (a test may swap it in between)
    self.total, self.tokens_per_step, self.active, self.stream = total, tokens_per_step, active, stream or sys.stdout
    self.every, self.labels = every, labels or {}
    self.tty = self.stream.isatty()
    self.bar = None  # opened at the first update, so a resumed run's rate counts from there

  def update(self, step: int, loss: float, tokens_per_sec: float | None, label: str = ""):
    """`label`: a run's, shown before its line (off a terminal)."""
    if not self.active or (not self.tty and step % self.every and step != self.total):
      return
    rate = f"{tokens_per_sec:,.0f} tok/s" if tokens_per_sec else "compiling"
    if self.tty:
      if self.bar is None:
        self.bar = tqdm.tqdm(total=self.total, initial=step, file=self.stream, unit="step",
                             dynamic_ncols=True, bar_format=BAR)
      self.bar.update(step - self.bar.n)
      self.bar.set_postfix_str(f"loss {loss:.4f} {rate}")
      return
    eta = f" eta {duration(self.seconds_left(step, tokens_per_sec))}" if tokens_per_sec else ""
    prefix = f"[{label}] " if label else ""
    self.stream.write(f"{prefix}step {step}/{self.total} loss {loss:.4f} {rate}{eta}\n")
    self.stream.flush()

  def who(self, name: str, stacked: bool) -> str:
    """What a run's message starts with: its label, else its name in a cell of several runs."""
    if name in self.labels:
      return f"[{self.labels[name]}] "
    return f"{name}: " if stacked else ""

  def seconds_left(self, step, tokens_per_sec):
    return (self.total - step) * self.tokens_per_step / tokens_per_sec

  def message(self, text: str):
    """A line of its own; on a terminal printed above the bar, which stays at the bottom."""
    if not self.active:
      return
    if self.bar is not None:
      self.bar.write(text, file=self.stream)
    else:
      self.stream.write(text + "\n")
      self.stream.flush()


def duration(seconds: float) -> str:
  return time.strftime("%H:%M:%S", time.gmtime(max(seconds, 0)))


def stage(text: str, stream=None):
  """A line saying what a command does next, flushed before the work (a compile may take a
  minute); on stdout, as a run's progress, unless `stream` (stderr where stdout is the answer)."""
  stream = stream or sys.stdout
  stream.write(text + "\n")
  stream.flush()
