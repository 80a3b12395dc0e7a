"""`nplace train`: the training loop.

One jitted step with explicit shardings; metrics are fetched one step late so the
host never waits on the device; checkpoints (orbax) every `checkpoint.every` steps,
on SIGTERM and at the end; a run resumes from its workdir's newest good checkpoint.
"""
import json
import pathlib
import signal
import time

import jax
from absl import flags

from nplace import checkpoint, data, metrics, sharding, train_state
from nplace.config import ConfigError
from nplace.info import model_info
from nplace.probes.suite import collapsed


def initialize_distributed(d) -> None:
  """jax.distributed for multi-process runs; must run before anything touches a device."""
  if not d.initialize:
    return
  # CPU processes need a collectives backend; TPU and GPU ignore this setting.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=d.coordinator_address,
                             num_processes=d.num_processes, process_id=d.process_id)


class _Preemption:
  """Turns SIGTERM (a TPU preemption notice) into a flag the loop checks between steps."""

  def __init__(self):
    self.requested = False
    signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, *_):
    self.requested = True


def _global_batch(local_batch, batch_sharding):
  return jax.make_array_from_process_local_data(batch_sharding, local_batch)


def evaluate(eval_step, params, config, batch_sharding, local_batch_size) -> dict:
  """Mean loss and perplexity over the first `train.eval_batches` validation batches."""
  val = data.make_iterator(config.data, "val", local_batch_size, seed=config.seed, shuffle=False)
  totals = None
  for _ in range(config.train.eval_batches):
    out = eval_step(params, _global_batch(next(val), batch_sharding))
    totals = out if totals is None else jax.tree.map(lambda a, b: a + b, totals, out)
  totals = jax.device_get(totals)
  return {"eval/loss": totals["loss_sum"] / totals["count"],
          "eval/perplexity": totals["ppl_sum"] / totals["count"]}


def make_probe_fn(config, writer, replicated):
  """step -> None: the probe suite on a fixed validation batch (the same rows on every
  process), compiled apart from the train step, written to TensorBoard as probe/*."""
  from nplace.probes import command, suite, summaries
  batch = jax.make_array_from_process_local_data(replicated, command.probe_batch(config, held_out=True))

  def run_probes(params, step):
    with sharding.activation_layout(replicated.mesh, config.mesh):
      results = jax.device_get(suite.suite(config, params, batch, command.probe_key(config)))
    if writer.summary:
      summaries.write(writer.summary, step, results, config)

  return run_probes


def train(config, workdir) -> dict:
  """Trains (or resumes) in `workdir`; returns what it writes to `workdir/summary.json`."""
  workdir = pathlib.Path(workdir)
  initialize_distributed(config.distributed)
  mesh = sharding.make_mesh(config.mesh)
  n_proc, is_main = jax.process_count(), jax.process_index() == 0
  if config.train.batch_size % n_proc:
    raise ConfigError("train.batch_size", config.train.batch_size, f"must divide over {n_proc} processes")
  local_batch = config.train.batch_size // n_proc
  meta = data.read_meta(data.prepared_dir(config.data))
  val_windows = sum((n - 1) // config.data.seq_len for _, n in meta["shards"]["val"])
  if config.train.eval_batches * config.train.batch_size > val_windows:
    raise ConfigError("train.eval_batches", config.train.eval_batches,
                      f"the validation split holds {val_windows // config.train.batch_size} batches")
  state_shardings = train_state.shardings(config, mesh)  # ConfigError on an uneven split
  batch_sharding = sharding.batch_sharding(mesh, config.mesh)
  train_iter = data.make_iterator(config.data, "train", local_batch, seed=config.seed, shuffle=True)

  mngr = checkpoint.manager(workdir, config.checkpoint)
  state, start = checkpoint.restore_latest(mngr, train_state.abstract(config), state_shardings, train_iter)
  if state is None:
    state = train_state.init(config, state_shardings)
  train_step, eval_step = train_state.compile_steps(config, mesh, state_shardings)

  writer = metrics.Writer(workdir, purge_step=start + 1 if start else None, active=is_main)
  if not start:
    writer.text("config", f"```\n{config.to_json_best_effort(indent=2)}\n```")
  references = {"data/frequency_loss": meta["frequency_loss"], "data/entropy_rate": meta.get("entropy_rate")}
  tokens_per_step = config.train.batch_size * config.data.seq_len
  flops_per_token = model_info(config)["flops_per_token"]
  peak = metrics.peak_flops(jax.devices()[0].device_kind, config.train.peak_flops)
  progress = metrics.Progress(config.train.steps, tokens_per_step, is_main)
  spikes = metrics.SpikeCounter(config.train.spike_window, config.train.spike_zscore)
  preemption = _Preemption()
  probe_every = config.probe.every
  run_probes = make_probe_fn(config, writer, sharding.replicated(mesh)) if probe_every else None

  summary = {"status": "completed", "step": start, "train_loss": None, "val_loss": None,
             "frequency_loss": meta["frequency_loss"], "entropy_rate": meta.get("entropy_rate"),
             "tokens_per_sec": None, "diverged_at": None, "collapsed": None}
  skipped, pending = 0, None
  clock = {"start": None, "steps": 0, "window_start": None, "window_steps": 0}

  def finish_step(step, step_metrics):
    """Host side of a step, run once the next step is already queued."""
    nonlocal skipped
    m = jax.device_get(step_metrics)
    now = time.perf_counter()
    if clock["start"] is None:  # the first step includes compilation: time from its end
      clock["start"] = clock["window_start"] = now
    else:
      clock["steps"] += 1
      clock["window_steps"] += 1
    loss = float(m["loss"])
    summary.update(step=step, train_loss=loss)
    if not m["finite"]:
      if config.train.on_divergence == "stop":
        summary.update(status="diverged", diverged_at=step)
        return
      skipped += 1
    spikes.update(loss)
    if step % config.train.log_every == 0 or step == config.train.steps:
      tps = None
      if clock["window_steps"]:
        elapsed = now - clock["window_start"]
        tps = clock["window_steps"] * tokens_per_step / elapsed
        writer.scalars(step, {
            "perf/tokens_per_sec": tps,
            "perf/step_time": elapsed / clock["window_steps"],
            "perf/mfu": tps * flops_per_token / (peak * jax.device_count()) if peak else None})
        clock.update(window_start=now, window_steps=0)
      writer.scalars(step, {"train/loss": loss, "train/grad_norm": m["grad_norm"], "train/lr": m["lr"],
                            "train/loss_spikes": spikes.count, "train/skipped_steps": skipped})
      progress.update(step, loss, tps)

  def run_eval(step):
    results = evaluate(eval_step, state["params"], config, batch_sharding, local_batch)
    writer.scalars(step, results | references)
    summary["val_loss"] = float(results["eval/loss"])
    progress.message(f"step {step} eval loss {results['eval/loss']:.4f} "
                     f"(frequency loss {meta['frequency_loss']:.4f})")

  if start == 0:
    run_eval(0)
    if run_probes:
      run_probes(state["params"], 0)
  for step in range(start + 1, config.train.steps + 1):
    batch = _global_batch(next(train_iter), batch_sharding)
    state, step_metrics = train_step(state, batch)
    if pending:
      finish_step(*pending)
    pending = (step, step_metrics)
    if summary["status"] == "diverged":
      break
    checkpoint.save(mngr, step, state, train_iter, config)
    if step % config.train.eval_every == 0:
      run_eval(step)
    if run_probes and step % probe_every == 0:
      run_probes(state["params"], step)
    if preemption.requested:
      summary["status"] = "preempted"
      break
  if pending:
    finish_step(*pending)

  if summary["status"] != "diverged" and mngr.latest_step() != summary["step"]:
    checkpoint.save(mngr, summary["step"], state, train_iter, config, force=True)
  if summary["status"] == "completed" and summary["step"] % config.train.eval_every:
    run_eval(summary["step"])
  if summary["val_loss"] is not None:
    summary["collapsed"] = bool(collapsed(summary["val_loss"], meta["frequency_loss"]))
  mngr.wait_until_finished()
  mngr.close()
  if clock["steps"]:
    summary["tokens_per_sec"] = clock["steps"] * tokens_per_step / (time.perf_counter() - clock["start"])
  writer.close()
  if is_main:
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    progress.message(f"{summary['status']} at step {summary['step']}: {json.dumps(summary)}")
  return summary


def main(argv):
  """`nplace train --config CFG --workdir DIR [--config.x=y ...]`."""
  from nplace.cli import parse_flags
  fv = parse_flags(argv, lambda f: flags.DEFINE_string("workdir", None, "run directory", flag_values=f))
  if not fv.workdir:
    from nplace.cli import UsageError
    raise UsageError("--workdir is required")
  train(fv.config, fv.workdir)
