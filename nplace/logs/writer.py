"""A run's TensorBoard event files: scalars, text and images (tensorboardX: no TensorFlow)."""
import concurrent.futures
import sys
import threading

from nplace.logs import drawing
from nplace.runtime import workdirs


def _import_tensorboardx():
  """tensorboardX without the torch its writer imports on load wherever torch is installed
  (~2 s and ~190 MB a process for nothing: nplace hands it numpy arrays). `import torch`
  works again afterwards (BERTScore needs it)."""
  if "torch" in sys.modules:
    import tensorboardX  # here, not at the top: the import must run with torch hidden (below)
    return tensorboardX
  sys.modules["torch"] = None  # `import torch` raises ImportError, which tensorboardX catches
  try:
    import tensorboardX  # as above
  finally:
    del sys.modules["torch"]
  return tensorboardX


tensorboardX = _import_tensorboardx()


class Writer:
  """Scalars and text as TensorBoard event files (tensorboardX: no TensorFlow needed).

  Inactive off process 0. `purge_step` (the first step a run logs: a resumed run's, or 0 for a
  fresh start after a run killed before its first checkpoint) makes TensorBoard drop whatever
  an interrupted run wrote from that step on, so no step appears twice.
  A bucket logdir gets the files at each `sync` and at `close` (nplace.runtime.workdirs.EventSync).
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
    """figure(*args) (a module-level figure function, e.g. nplace.probes.figures.profile) drawn by the drawing process and written as
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

  def text(self, tag: str, text: str, step: int = 0):
    if self.summary:
      self.summary.add_text(tag, text, step)

  def sync(self):
    """Everything written so far reaches the workdir (with each checkpoint: a run killed after it
    keeps every step it logged): the event file is closed (tensorboardX's flush leaves queued
    events unwritten) and, for a bucket, uploaded; the next write opens the next file."""
    if not self.events:
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
