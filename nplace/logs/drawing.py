"""Figures drawn to pixels in a separate, lowest-priority process (`python -m nplace.logs.drawing`).

matplotlib spends ~0.1 s of CPU per figure, holding the GIL throughout; the 25 probe images
of a probe step, drawn on a thread beside the train loop, slowed a CPU run by 18%. A child
at nice 19 draws with the cycles the train step leaves idle, and never holds the train
loop's GIL. A plain subprocess reading pickled requests on its stdin, not multiprocessing:
spawn and forkserver re-run the parent's `__main__`, so an unguarded user script calling
`nplace.train.loop.train` would start training again in the child.
"""
import os
import pickle
import subprocess
import sys
import traceback


class Drawer:
  """`rgb(figure, *args)`: the [H, W, 3] uint8 pixels of `figure(*args)` (a module-level
  function returning a matplotlib Figure, e.g. `nplace.probes.figures.profile`), drawn in the child. The
  child starts at the first call and exits at `close` or when this process dies (its
  stdin closes). One request at a time: callers serialize (Writer's background thread)."""

  def __init__(self):
    self._child = None

  def rgb(self, figure, *args):
    if self._child is None:
      self._child = subprocess.Popen([sys.executable, "-m", "nplace.logs.drawing"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
      pickle.dump((figure, args), self._child.stdin)
      self._child.stdin.flush()
      ok, value = pickle.load(self._child.stdout)
    except (BrokenPipeError, EOFError):
      raise RuntimeError(f"the drawing process exited (code {self._child.wait()}) "
                         f"while drawing {figure.__name__}") from None
    if not ok:
      raise RuntimeError(f"drawing {figure.__name__} failed in the drawing process:\n{value}")
    return value

  def close(self):
    if self._child is not None:
      self._child.stdin.close()
      self._child.wait()
      self._child = None


def _serve():
  os.nice(19)
  from nplace.logs import plots  # matplotlib: the child's alone, the trainer never loads it for this
  requests, replies = sys.stdin.buffer, sys.stdout.buffer
  sys.stdout = sys.stderr  # a print in drawing code must not corrupt the replies
  while True:
    try:
      figure, args = pickle.load(requests)
    except EOFError:
      return
    try:
      reply = True, plots.to_rgb(figure(*args))
    except Exception:  # sent back whole: the parent raises it with the child's traceback
      reply = False, traceback.format_exc()
    pickle.dump(reply, replies)
    replies.flush()


if __name__ == "__main__":
  _serve()
