"""Run reporting: spike counting, the progress bar (or lines), the event-file writer."""
import functools
import io
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from nplace.logs.writer import Writer
from nplace.logs import progress as progress_lib
from nplace.logs.progress import Progress
from nplace.train.step_log import SpikeCounter


def test_spike_counter_flags_only_outliers_after_a_full_window():
  counter = SpikeCounter(window=20, zscore=4.0)
  rng = np.random.default_rng(0)
  flags = [counter.update(3.0 + 0.01 * rng.standard_normal()) for _ in range(40)]
  assert not any(flags)
  assert counter.update(3.5) and counter.count == 1
  assert not counter.update(float("nan")) and counter.count == 1
  assert not counter.update(2.0) and counter.count == 1  # a sudden drop is not a spike
  assert counter.update(10.0) and counter.count == 2  # the NaN did not enter the window (its mean would be NaN)


def test_progress_plain_lines_off_a_terminal():
  out = io.StringIO()
  progress = Progress(total=100, tokens_per_step=1000, active=True, stream=out)
  progress.update(10, 2.5, None)
  progress.update(20, 2.25, 10_000.0)
  lines = out.getvalue().splitlines()
  assert lines == ["step 10/100 loss 2.5000 compiling", "step 20/100 loss 2.2500 10,000 tok/s eta 00:00:08"]
  Progress(100, 1000, active=False, stream=out).update(30, 1.0, 1.0)
  assert len(out.getvalue().splitlines()) == 2


def test_a_labelled_run_prints_its_label_at_most_lines_per_run_times():
  every = progress_lib.lines_every(log_every=1, steps=2000)  # protocol 2 logs every step
  assert every == 100 and progress_lib.lines_every(10, 300) == 20 and progress_lib.lines_every(10, 150) == 10
  with progress_lib.labelled({"n_layer=6,d_model=32,placement=pre,lr=0.001,seed=0": "12/84"}):
    labels = progress_lib.labels_of(["n_layer=6,d_model=32,placement=pre,lr=0.001,seed=0", "other"])
  assert labels == {"n_layer=6,d_model=32,placement=pre,lr=0.001,seed=0": "12/84"}
  assert progress_lib.labels_of(["other"]) == {}  # outside a sweep: nplace train's lines, as they were
  out = io.StringIO()
  progress = Progress(total=250, tokens_per_step=1000, active=True, stream=out, every=100, labels=labels)
  for step in range(1, 251):
    progress.update(step, 2.5, None, "12/84")
  assert out.getvalue().splitlines() == [f"[12/84] step {n}/250 loss 2.5000 compiling" for n in (100, 200, 250)]
  assert progress.who("n_layer=6,d_model=32,placement=pre,lr=0.001,seed=0", stacked=True) == "[12/84] "
  assert progress.who("other", stacked=True) == "other: " and progress.who("other", stacked=False) == ""


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_progress_bar_on_a_terminal_keeps_messages_on_their_own_lines():
  out = Terminal()
  progress = Progress(total=100, tokens_per_step=1000, active=True, stream=out)
  progress.update(10, 2.5, None)
  progress.update(20, 2.25, 10_000.0)
  progress.message("step 20 eval loss 2.3000")
  progress.update(30, 2.0, 10_000.0)
  text = out.getvalue()
  assert "step 20/100" in text and "loss 2.2500 10,000 tok/s" in text and "step 30/100" in text
  assert "\rstep 20 eval loss 2.3000\n" in text  # the bar is cleared first, then redrawn below
  assert text.index("eval loss") < text.rindex("step 30/100")


def test_writer_purges_steps_rewritten_after_a_resume(tmp_path):
  first = Writer(tmp_path, purge_step=None, active=True)
  for step in range(1, 8):
    first.scalars(step, {"train/loss": step})
  first.close()
  resumed = Writer(tmp_path, purge_step=5, active=True)
  for step in range(5, 10):
    resumed.scalars(step, {"train/loss": 10 * step, "perf/mfu": None})
  resumed.close()
  acc = event_accumulator.EventAccumulator(str(tmp_path))
  acc.Reload()
  assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [
      (1, 1), (2, 2), (3, 3), (4, 4), (5, 50), (6, 60), (7, 70), (8, 80), (9, 90)]
  assert "perf/mfu" not in acc.Tags()["scalars"]
  assert not list(tmp_path.glob("x*")) and Writer(tmp_path / "x", None, active=False).summary is None


def test_later_writes_run_in_order_off_the_caller_and_close_waits_for_them(tmp_path):
  writer = Writer(tmp_path, purge_step=None, active=True)
  release, threads = threading.Event(), set()

  def slow_write(step):
    release.wait(timeout=30)
    threads.add(threading.current_thread().name)
    writer.summary.add_scalar("probe/x", float(step), step)

  for step in (1, 2, 3):
    writer.later(functools.partial(slow_write, step))
  writer.scalars(4, {"train/loss": 1.0})
  assert not threads  # the caller was not held up by the pending writes
  release.set()
  writer.close()
  acc = event_accumulator.EventAccumulator(str(tmp_path))
  acc.Reload()
  assert [e.step for e in acc.Scalars("probe/x")] == [1, 2, 3]
  assert threads and threading.current_thread().name not in threads


def test_a_failed_later_write_is_raised_at_close(tmp_path):
  writer = Writer(tmp_path, purge_step=None, active=True)
  writer.later(lambda: 1 / 0)
  with pytest.raises(ZeroDivisionError):
    writer.close()


def test_importing_the_writer_leaves_an_installed_torch_unloaded(tmp_path):
  """tensorboardX imports torch on load where it is installed; nplace keeps it out, and
  `import torch` still works afterwards."""
  fake = tmp_path / "site" / "torch"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("LOADED = True\n")
  check = ("import sys\nimport nplace.logs.writer\n"
           "assert 'torch' not in sys.modules, 'torch was imported'\n"
           "import torch\nassert torch.LOADED\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), *sys.path]))
  result = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
