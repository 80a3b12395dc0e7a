"""The training loop (`nplace train`).

One jitted step with explicit shardings; metrics are fetched one step late so the
host never waits on the device (step_log.StepLog); checkpoints (orbax) every
`checkpoint.every` steps, on SIGTERM and at the end, eval and probes are periodic
hooks (nplace/train/hooks.py); a run resumes from its workdir's newest good checkpoint.
"""
import signal

import jax

from nplace.data import loader, prepare
from nplace.errors import ConfigError
from nplace.logs.progress import Progress
from nplace.logs.writer import Writer
from nplace.model.size import model_info
from nplace.runtime import chips, cpu_split, sharding, startup, workdirs
from nplace.train import checkpoint, evaluation, hooks, state as train_state, steps
from nplace.train.step_log import StepLog
from nplace.train.summary import Summary, collapsed


class _Preemption:
  """Turns SIGTERM (a TPU preemption notice) into a flag the loop checks between steps."""

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, *_):
    self.requested = True

  def restore(self):
    """The handler from before the run: between the trials of `nplace sweep`, SIGTERM ends it."""
    signal.signal(signal.SIGTERM, self._previous)


def _global_batch(local_batch, batch_sharding):
  return jax.make_array_from_process_local_data(batch_sharding, local_batch)


def _announce(progress, workdir, config, evaluator, mesh):
  """Where the logs go, what runs where and when, before the first step."""
  progress.message(f"logs: {workdir} (TensorBoard event files; summary.json at the end)\n"
                   f"  tensorboard --logdir {workdir}")
  progress.message(f"devices: {mesh.size} x {mesh.devices.flat[0].platform}, mesh {dict(mesh.shape)}")
  if config.probe.every:
    progress.message(f"probes: the suite runs at step 0 and every {config.probe.every} steps")
  for note in evaluator.notes():
    progress.message(note)


def train(config, workdir) -> Summary:
  """Trains (or resumes) in `workdir`; returns what it writes to `workdir/summary.json`."""
  workdir = workdirs.resolve(workdir)
  startup.prepare_process(config)
  mesh = sharding.make_mesh(config.mesh, cpu_split.mesh_devices(config))
  n_proc, is_main = jax.process_count(), jax.process_index() == 0
  if config.train.batch_size % n_proc:
    raise ConfigError("train.batch_size", config.train.batch_size, f"must divide over {n_proc} processes")
  sharding.check_batch(mesh.shape, config)
  meta = prepare.read_meta(prepare.prepared_dir(config.data))
  val_windows = sum((n - 1) // config.data.seq_len for _, n in meta["shards"]["val"])
  if config.train.eval_batches * config.train.batch_size > val_windows:
    raise ConfigError("train.eval_batches", config.train.eval_batches,
                      f"the validation split holds {val_windows // config.train.batch_size} batches")
  state_shardings = train_state.shardings(config, mesh)  # ConfigError on an uneven split
  progress = Progress(config.train.steps, config.train.batch_size * config.data.seq_len, is_main)
  mngr = checkpoint.manager(workdir, config.checkpoint)
  try:
    summary = _run(config, workdir, mesh, state_shardings, meta, mngr, progress, is_main)
  finally:  # also after an error: no save is left writing (nplace sweep goes on to the next trial)
    mngr.wait_until_finished()
    mngr.close()
  if is_main:
    (workdir / "summary.json").write_text(summary.to_json())
    progress.message(f"{summary.status} at step {summary.step}: {summary.to_json(indent=None)}")
  return summary


def _run(config, workdir, mesh, state_shardings, meta, mngr, progress, is_main) -> Summary:
  """The loop, from the newest checkpoint (or init) to the last step, divergence or SIGTERM."""
  local_batch = config.train.batch_size // jax.process_count()
  batch_sharding = sharding.batch_sharding(mesh, config.mesh)
  train_iter = loader.make_iterator(config.data, "train", local_batch, seed=config.seed, shuffle=True)
  state, start = checkpoint.restore_latest(mngr, train_state.abstract(config), state_shardings, train_iter,
                                         model_config=config.model)
  if state is None:
    state = train_state.init(config, state_shardings)
  train_step, eval_step = steps.compile_steps(config, mesh, state_shardings)

  writer = Writer(workdir, purge_step=start + 1 if start else None, active=is_main)
  if not start:
    writer.text("config", f"```\n{config.to_json_best_effort(indent=2)}\n```")
  evaluator = evaluation.Evaluator(config, eval_step, lambda b: _global_batch(b, batch_sharding),
                                   local_batch, is_main)
  _announce(progress, workdir, config, evaluator, mesh)
  summary = Summary(step=start, frequency_loss=meta["frequency_loss"], entropy_rate=meta.get("entropy_rate"),
                    rouge_text=evaluator.rouge_text)
  peak = chips.peak_flops(mesh.devices.flat[0].device_kind, config.train.peak_flops)
  log = StepLog(config, writer, progress, summary, config.train.batch_size * config.data.seq_len,
                      model_info(config)["flops_per_token"] / (peak * mesh.size) if peak else None,
                      workdir / "counters.json" if is_main else None)
  if start:
    log.restore_counters(start)
  loop = hooks.Hooks()
  hooks.checkpoint_hook(loop, mngr, train_iter, config, log)
  references = {"data/frequency_loss": meta["frequency_loss"], "data/entropy_rate": meta.get("entropy_rate")}
  hooks.eval_hook(loop, evaluator, writer, progress, summary, references, config.train.eval_every)
  hooks.probe_hook(loop, config, writer, progress, sharding.replicated(mesh))
  hooks.profile_hook(loop, config, workdir, start, progress)
  preemption = _Preemption()

  try:
    if start == 0:
      loop.start(state)
    for step in range(start + 1, config.train.steps + 1):
      with jax.profiler.StepTraceAnnotation("train", step_num=step):  # ~free unless tracing
        state, step_metrics = train_step(state, _global_batch(next(train_iter), batch_sharding))
      log.push(step, step_metrics)
      if summary.status == "diverged":
        break
      loop.step(step, state)
      if preemption.requested:
        summary.status = "preempted"
        break
    log.flush()
    loop.end(summary.step, state, summary.status)
  finally:
    preemption.restore()
    writer.close()
  if summary.val_loss is not None:
    summary.collapsed = bool(collapsed(summary.val_loss, meta["frequency_loss"]))
  summary.tokens_per_sec = log.tokens_per_sec()
  return summary

