"""Reporting a run: TensorBoard event files, the console progress line, loss-spike counting."""
import collections
import concurrent.futures
import math
import sys
import threading
import time

import numpy as np
import tqdm

from nplace import drawing, workdirs


def _import_tensorboardx():
  """tensorboardX without the torch its writer imports on load wherever torch is installed
  (~2 s and ~190 MB a process for nothing: nplace hands it numpy arrays). `import torch`
  works again afterwards (BERTScore needs it)."""
  if "torch" in sys.modules:
    import tensorboardX
    return tensorboardX
  sys.modules["torch"] = None  # `import torch` raises ImportError, which tensorboardX catches
  try:
    import tensorboardX
  finally:
    del sys.modules["torch"]
  return tensorboardX


tensorboardX = _import_tensorboardx()

# Peak dense bf16 FLOP/s per device, for perf/mfu when train.peak_flops is not set.
PEAK_FLOPS = {
    "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
    "TPU v5": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
    "NVIDIA A100-SXM4-40GB": 312e12, "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H200": 989e12,
}
BAR = "step {n_fmt}/{total_fmt} {bar} {percentage:3.0f}% [{elapsed}<{remaining}] {postfix}"


def peak_flops(device_kind: str, configured: float | None) -> float | None:
  return configured if configured is not None else PEAK_FLOPS.get(device_kind)


class Writer:
  """Scalars and text as TensorBoard event files (tensorboardX: no TensorFlow needed).

  Inactive off process 0. `purge_step` (the first step of a resumed run) makes TensorBoard
  drop whatever an interrupted run wrote from that step on, so no step appears twice.
  A bucket logdir gets the files at each `sync` and at `close` (nplace.workdirs.EventSync).
  """

  def __init__(self, logdir, purge_step: int | None, active: bool):
    self.events, self._summary, self._background, self._pending = None, None, None, []
    self._drawer = drawing.Drawer()
    self.purge_step, self.segments = purge_step, 0
    self._opening = threading.Lock()
    if active:
      self.events = workdirs.EventSync(workdirs.resolve(logdir))
      self._background = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nplace-writer")

  @property
  def summary(self) -> tensorboardX.SummaryWriter | None:
    """The open event file (None off process 0), opened at its first use: a bucket run's
    segment after a checkpoint with nothing written since leaves no empty file."""
    with self._opening:  # `later` writes from another thread
      if self.events and self._summary is None:
        # Event files are named by the second they were opened in; the suffix keeps a quick
        # resume (or a bucket run's next segment) from overwriting an earlier file.
        suffix = f".from{self.purge_step or 0}" + (f".{self.segments:05d}" if self.segments else "")
        self._summary = tensorboardX.SummaryWriter(str(self.events.local), filename_suffix=suffix,
                                                   purge_step=None if self.segments else self.purge_step)
      return self._summary

  def later(self, write) -> None:
    """Runs write() on the writer's one background thread, in order (probe images wait for
    the drawing process there, off the train loop); `sync` and `close` wait for it, and
    re-raise its errors."""
    pending = []
    for future in self._pending:  # one pass: a write that fails between two would go unseen
      if future.done():
        future.result()
      else:
        pending.append(future)
    self._pending = pending + [self._background.submit(write)]

  def image(self, tag: str, step: int, figure, *args) -> None:
    """figure(*args) (a function of nplace.plots) drawn by the drawing process and written as
    an image, in order, off the caller (`later`)."""
    self.later(lambda: self.summary.add_image(tag, self._drawer.rgb(figure, *args), step, dataformats="HWC"))

  def _finish_later(self):
    for future in self._pending:
      future.result()
    self._pending = []

  def scalars(self, step: int, values: dict):
    if self.summary:
      for tag, value in values.items():
        if value is not None:
          self.summary.add_scalar(tag, float(value), step)

  def text(self, tag: str, text: str):
    if self.summary:
      self.summary.add_text(tag, text, 0)

  def sync(self):
    """A bucket workdir gets everything written so far: the event file is closed (tensorboardX's
    flush leaves queued events unwritten) and uploaded; the next write opens the next one.
    Locally a no-op."""
    if not (self.events and self.events.remote):
      return
    self._finish_later()
    if self._summary:
      self._summary.close()
      self.events.push()
      self.segments, self._summary = self.segments + 1, None

  def close(self):
    if self._background:
      try:
        self._finish_later()
      finally:
        self._background.shutdown()
        self._drawer.close()
    if self._summary:
      self._summary.close()
    if self.events:
      self.events.close()


class Progress:
  """step, loss, tokens/s and ETA: a tqdm bar on a terminal, plain lines otherwise (logs)."""

  def __init__(self, total: int, tokens_per_step: int, active: bool, stream=sys.stdout):
    self.total, self.tokens_per_step, self.active, self.stream = total, tokens_per_step, active, stream
    self.tty = stream.isatty()
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
    eta = f" eta {_duration(self.seconds_left(step, tokens_per_sec))}" if tokens_per_sec else ""
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


def _duration(seconds: float) -> str:
  return time.strftime("%H:%M:%S", time.gmtime(max(seconds, 0)))


class SpikeCounter:
  """Counts losses more than `zscore` standard deviations above the rolling window's mean."""

  def __init__(self, window: int, zscore: float):
    self.losses = collections.deque(maxlen=window)
    self.zscore, self.count = zscore, 0

  def update(self, loss: float) -> bool:
    spike = False
    if len(self.losses) == self.losses.maxlen and math.isfinite(loss):
      mean, std = np.mean(self.losses), np.std(self.losses)
      spike = std > 0 and (loss - mean) / std > self.zscore
    self.count += spike
    if math.isfinite(loss):
      self.losses.append(loss)
    return spike
