"""The console's view of a run: a tqdm bar on a terminal, plain lines otherwise (logs)."""
import sys
import time

import tqdm

BAR = "step {n_fmt}/{total_fmt} {bar} {percentage:3.0f}% [{elapsed}<{remaining}] {postfix}"


class Progress:
  """step, loss, tokens/s and ETA, and one-line messages, from process 0 (`active`)."""

  def __init__(self, total: int, tokens_per_step: int, active: bool, stream=None):
    # sys.stdout when the run starts, not when this module was imported (a test may swap it in between)
    self.total, self.tokens_per_step, self.active, self.stream = total, tokens_per_step, active, stream or sys.stdout
    self.tty = self.stream.isatty()
    self.bar = None  # opened at the first update, so a resumed run's rate counts from there

  def update(self, step: int, loss: float, tokens_per_sec: float | None):
    if not self.active:
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
    self.stream.write(f"step {step}/{self.total} loss {loss:.4f} {rate}{eta}\n")
    self.stream.flush()

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
