"""The training loop's pieces: periodic hooks (levanter's `add_hook(fn, every=N)`, nanodo's
periodic actions) for checkpoints, eval, probes and profiles, and the one-step-late step log."""
import json
import math
import time

import jax

from nplace import checkpoint, evaluation, metrics, workdirs
from nplace.config import profile_window


class Hooks:
  """Callables run between train steps, in the order added."""

  def __init__(self):
    self._hooks = []

  def add(self, fn, every: int, *, at_start=False, at_end=None):
    """`fn(step, state)` every `every` steps (0 = never) and, when `at_start`, at step 0 of a
    fresh run; `at_end(step, state, status)` once after the loop, with the run's status."""
    self._hooks.append((fn, every, at_start, at_end))

  def start(self, state):
    for fn, every, at_start, _ in self._hooks:
      if at_start and every:
        fn(0, state)

  def step(self, step: int, state):
    for fn, every, _, _ in self._hooks:
      if every and step % every == 0:
        fn(step, state)

  def end(self, step: int, state, status: str):
    for *_, at_end in self._hooks:
      if at_end:
        at_end(step, state, status)


def checkpoint_hook(hooks, mngr, train_iter, config, log):
  """Orbax decides the interval (checkpoint.every); the last step is saved unless the run
  diverged (its newest good checkpoint stays the newest). The step log's counters are saved
  with each checkpoint, so a resumed run goes on counting."""
  def save(step, state):
    if mngr.should_save(step):
      log.flush()  # this step's metrics are in the counters (saving waits for the step anyway)
    if checkpoint.save(mngr, step, state, train_iter, config):
      log.save_counters(step)
      log.writer.sync()  # a bucket workdir's event files go up with each checkpoint

  def final(step, state, status):
    if status != "diverged" and mngr.latest_step() != step:
      checkpoint.save(mngr, step, state, train_iter, config, force=True)
      log.save_counters(step)

  hooks.add(save, every=1, at_end=final)


def eval_hook(hooks, evaluator, writer, progress, summary, references, every):
  """eval/* scalars and the summary's eval fields at step 0, every `every` steps and at the end
  of a completed run."""
  def run(step, state):
    results = evaluator(state["params"])
    writer.scalars(step, {f"eval/{name}": value for name, value in results.items()} | references)
    summary.update(evaluation.summary_fields(results))
    rouge = f" rougeL {results['rougeL']:.4f}" if "rougeL" in results else ""
    progress.message(f"step {step} eval loss {results['loss']:.4f} perplexity {results['perplexity']:.3f}"
                     f"{rouge} (frequency loss {references['data/frequency_loss']:.4f})")

  def final(step, state, status):
    if status == "completed" and step % every:
      run(step, state)

  hooks.add(run, every, at_start=True, at_end=final)


def probe_hook(hooks, config, writer, progress, replicated):
  """The probe suite on a fixed held-out batch (the same rows on every process), compiled apart
  from the train step, at step 0 and every `probe.every` steps, written as probe/* summaries."""
  if not config.probe.every:
    return
  from nplace.probes import command, suite, summaries
  batch = jax.make_array_from_process_local_data(replicated, command.probe_batch(config, held_out=True))
  probe_writer = summaries.ProbeWriter(writer, config) if writer.summary else None

  def run(step, state):
    results = jax.device_get(
        suite.suite(config, state["params"], batch, command.probe_key(config), replicated.mesh))
    if probe_writer:
      probe_writer.write(step, results)
    progress.message(f"step {step} probe suite: {len(results)} probes written to TensorBoard")

  hooks.add(run, config.probe.every, at_start=True)


def profile_hook(hooks, config, workdir, resumed_at, progress):
  """A jax.profiler trace of train steps START..STOP (train.profile_steps) under
  `workdir/plugins/profile/`, where TensorBoard's Profile tab finds it; the loop marks each
  step with a StepTraceAnnotation. Added after the other hooks, it starts once step START-1's
  eval and probes are done, so the trace holds train steps only (and step 1's compile when
  START is 1); a run resumed inside the window traces the rest of it."""
  window = profile_window(config.train)
  if window is None:
    return
  first, last = window
  tracing = False

  def begin():
    nonlocal tracing
    jax.profiler.start_trace(str(workdir))
    tracing = True

  def end():
    nonlocal tracing
    jax.profiler.stop_trace()
    tracing = False
    progress.message(f"profile of steps {first}..{last} written to {workdir}/plugins/profile "
                     f"(TensorBoard: the Profile tab)")

  def run(step, state):
    if step == first - 1:
      begin()
    elif step == last and tracing:
      jax.block_until_ready(state)  # the last step's device work belongs in the trace
      end()

  def final(step, state, status):
    if tracing:  # the run stopped inside the window
      end()

  if resumed_at and first - 1 <= resumed_at < last:  # step START-1's hooks will not run again
    begin()
  hooks.add(run, every=1, at_start=True, at_end=final)


class StepLog:
  """The host side of each train step, run one step late (once the next step is queued, so the
  host never waits on the device): divergence, spikes, train/* and perf/* scalars, progress."""

  # summary fields carried over a resume
  COUNTERS = ("loss_spikes", "skipped_steps", "max_train_loss", "min_train_loss", "max_loss_rebound")

  def __init__(self, config, writer, progress, summary, tokens_per_step, mfu_per_tps, counters_path):
    """`mfu_per_tps`: the MFU of one token per second (None: no known peak FLOP/s);
    `counters_path`: the JSON file of COUNTERS per checkpointed step (None: not written)."""
    self.config, self.writer, self.progress, self.summary = config, writer, progress, summary
    self.counters_path = counters_path
    self.tokens_per_step, self.mfu_per_tps = tokens_per_step, mfu_per_tps
    self.spikes = metrics.SpikeCounter(config.train.spike_window, config.train.spike_zscore)
    self.pending = None
    # The first step includes compilation: time from its end.
    self.start = self.window_start = None
    self.steps = self.window_steps = 0

  def push(self, step: int, step_metrics):
    """Queues this step's metrics and handles the previous step's."""
    self.flush()
    self.pending = (step, step_metrics)

  def flush(self):
    if self.pending:
      self._finish(*self.pending)
      self.pending = None

  def save_counters(self, step: int):
    if self.counters_path:
      saved = self._saved_counters()
      saved[str(step)] = {key: self.summary[key] for key in self.COUNTERS}
      keep = sorted(saved, key=int)[-(self.config.checkpoint.keep + 1):]  # +1: one being written
      workdirs.write_atomic(self.counters_path, json.dumps({k: saved[k] for k in keep}))

  def restore_counters(self, step: int):
    """The counters as of checkpoint `step` (a resumed run); the spike window starts empty."""
    self.summary.update(self._saved_counters().get(str(step), {}))
    self.spikes.count = self.summary["loss_spikes"]

  def _saved_counters(self) -> dict:
    path = self.counters_path
    return json.loads(path.read_text()) if path and path.exists() else {}

  def tokens_per_sec(self) -> float | None:
    return self.steps * self.tokens_per_step / (time.perf_counter() - self.start) if self.steps else None

  def _finish(self, step, step_metrics):
    m, now, t = jax.device_get(step_metrics), time.perf_counter(), self.config.train
    if self.start is None:
      self.start = self.window_start = now
    else:
      self.steps += 1
      self.window_steps += 1
    loss, s = float(m["loss"]), self.summary
    s.update(step=step, train_loss=loss)
    if not m["finite"]:
      if t.on_divergence == "stop":
        s.update(status="diverged", diverged_at=step)
        return
      s["skipped_steps"] += 1
    self.spikes.update(loss)
    s["loss_spikes"] = int(self.spikes.count)
    # How far the loss ever climbed back above the best it had reached, after warmup: the first
    # steps' transients (4.4 nats in `make demo`'s Peri-LN run, which then trained normally)
    # are not the spikes a failure means.
    if math.isfinite(loss) and step > self.config.optim.warmup_steps:
      if s["min_train_loss"] is not None:
        s["max_loss_rebound"] = max(s["max_loss_rebound"] or 0.0, loss - s["min_train_loss"])
      s["min_train_loss"] = loss if s["min_train_loss"] is None else min(loss, s["min_train_loss"])
    if step % t.log_every == 0 or step == t.steps:
      if step > self.config.optim.warmup_steps and math.isfinite(loss):
        s["max_train_loss"] = loss if s["max_train_loss"] is None else max(loss, s["max_train_loss"])
      self._log(step, loss, m, now)

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
                               "train/loss_spikes": self.summary["loss_spikes"],
                               "train/skipped_steps": self.summary["skipped_steps"]})
    self.progress.update(step, loss, tps)
