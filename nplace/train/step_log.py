"""The host side of each train step, run one step late: divergence, loss spikes, the summary's
counters, train/* and perf/* scalars, the progress line. `CellLog` fetches a step's metrics once
and hands each run of the cell (nplace/train/cell.py) its own to its `StepLog`."""
import collections
import json
import math
import time

import jax
import numpy as np

from nplace.runtime import workdirs


class CellLog:
  """The runs' step logs, one step late (once the next step is queued, so the host never waits
  on the device), and the progress line: the mean loss of the runs logged, their tokens/s (in
  a sweep, a line per run with its label)."""

  def __init__(self, cell, progress):
    self.cell, self.progress, self.pending = cell, progress, None

  def push(self, step: int, step_metrics):
    """Queues this step's metrics and handles the previous step's."""
    self.flush()
    self.pending = (step, step_metrics)

  def flush(self):
    if not self.pending:
      return
    (step, step_metrics), self.pending = self.pending, None
    m, now = jax.device_get(step_metrics), time.perf_counter()
    logged = [(run.name, run.log.record(step, self.cell.metrics_of(m, i), now))
              for i, run in enumerate(self.cell.runs) if not run.diverged]
    logged = [(name, entry) for name, entry in logged if entry is not None]
    if not logged:
      return
    rates = [tps for _, (_, tps) in logged]
    rate = sum(rates) if all(rates) else None  # the cell's: what its ETA runs at
    labels = self.progress.labels
    if labels:  # a sweep's trials: a line each, its own loss
      for name, (loss, _) in logged:
        self.progress.update(step, loss, rate, labels.get(name, name))
    else:
      self.progress.update(step, float(np.mean([loss for _, (loss, _) in logged])), rate)


class StepLog:
  """The host side of one run's train steps: divergence, spikes, the summary's counters,
  train/* and perf/* scalars."""

  def __init__(self, config, writer, summary, tokens_per_step, mfu_per_tps, counters_path):
    """`mfu_per_tps`: the MFU of one token per second (None: no known peak FLOP/s);
    `counters_path`: the JSON file of the summary's counters per checkpointed step (None: not
    written)."""
    self.config, self.writer, self.summary = config, writer, summary
    self.counters_path = counters_path
    self.tokens_per_step, self.mfu_per_tps = tokens_per_step, mfu_per_tps
    self.spikes = SpikeCounter(config.train.spike_window, config.train.spike_zscore)
    # The first step includes compilation: time from its end.
    self.start = self.window_start = None
    self.steps = self.window_steps = 0

  def save_counters(self, step: int):
    if self.counters_path:
      saved = self._saved_counters()
      saved[str(step)] = self.summary.counters()
      keep = sorted(saved, key=int)[-(self.config.checkpoint.keep + 1):]  # +1: one being written
      workdirs.write_atomic(self.counters_path, json.dumps({k: saved[k] for k in keep}))

  def restore_counters(self, step: int):
    """The counters as of checkpoint `step` (a resumed run); the spike window starts empty."""
    for name, value in self._saved_counters().get(str(step), {}).items():
      setattr(self.summary, name, value)
    self.spikes.count = self.summary.loss_spikes

  def _saved_counters(self) -> dict:
    path = self.counters_path
    return json.loads(path.read_text()) if path and path.exists() else {}

  def tokens_per_sec(self) -> float | None:
    return self.steps * self.tokens_per_step / (time.perf_counter() - self.start) if self.steps else None

  def record(self, step, m, now) -> tuple[float, float | None] | None:
    """Step `step`'s metrics `m` (on the host), finished at `now`; (loss, tokens/s since the last
    logged step) when this step is logged, else None."""
    t = self.config.train
    if self.start is None:
      self.start = self.window_start = now
    else:
      self.steps += 1
      self.window_steps += 1
    loss, s = float(m["loss"]), self.summary
    s.step, s.train_loss = step, loss
    if not m["finite"]:
      if t.on_divergence == "stop":
        s.status, s.diverged_at = "diverged", step
        return None
      s.skipped_steps += 1
    self.spikes.update(loss)
    s.loss_spikes = int(self.spikes.count)
    # How far the loss ever climbed back above the best it had reached, after warmup: the first
    # steps' transients (4.4 nats in `make demo`'s Peri-LN run, which then trained normally)
    # are not the spikes a failure means.
    if math.isfinite(loss) and step > self.config.optim.warmup_steps:
      if s.min_train_loss is not None:
        s.max_loss_rebound = max(s.max_loss_rebound or 0.0, loss - s.min_train_loss)
      s.min_train_loss = loss if s.min_train_loss is None else min(loss, s.min_train_loss)
    if step % t.log_every == 0 or step == t.steps:
      if step > self.config.optim.warmup_steps and math.isfinite(loss):
        s.max_train_loss = loss if s.max_train_loss is None else max(loss, s.max_train_loss)
      return self._log(step, loss, m, now)
    return None

  def _log(self, step, loss, m, now):
    tps = None
    if self.window_steps:
      elapsed = now - self.window_start
      tps = self.window_steps * self.tokens_per_step / elapsed
      self.writer.scalars(step, {
          "perf/tokens_per_sec": tps, "perf/step_time": elapsed / self.window_steps,
          "perf/mfu": tps * self.mfu_per_tps if self.mfu_per_tps else None})
      self.window_start, self.window_steps = now, 0
    self.writer.scalars(step, {"train/loss": loss, "train/grad_norm": m["grad_norm"], "train/lr": m["lr"],
                               "train/loss_spikes": self.summary.loss_spikes,
                               "train/skipped_steps": self.summary.skipped_steps})
    return loss, tps


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
