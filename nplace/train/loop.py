"""The training loop: one run (`nplace train`), or a cell of runs trained as one program
(`nplace sweep --batch K`, nplace/train/cell.py).

One jitted step with explicit shardings; metrics are fetched one step late so the host never
waits on the device (step_log.CellLog); checkpoints (orbax) every `checkpoint.every` steps, on
SIGTERM and at the end, eval and probes are periodic hooks (nplace/train/hooks.py); a run
resumes from its workdir's newest good checkpoint (a cell from its runs' newest common one).
A run of a cell that diverges stops alone; the others train on.
"""
import json
import signal

import jax
from jax.experimental import multihost_utils

from nplace.data import prepare
from nplace.errors import NOT_SET, ConfigError, DataError
from nplace.logs.progress import Progress, labels_of, lines_every
from nplace.logs.writer import Writer
from nplace.model.size import model_info
from nplace.runtime import chips, cpu_split, sharding, startup, workdirs
from nplace.train import checkpoint, evaluation, hooks
from nplace.train.cell import Cell, Run
from nplace.train.step_log import CellLog, StepLog
from nplace.train.summary import Summary, SummaryError, collapsed


class _Preemption:
  """SIGTERM (a TPU preemption notice) as a question the loop asks between steps. With several
  processes all must stop at the same step, or one leaves the others waiting in the step's
  collectives: JAX's preemption sync point answers for all of them (its notifier catches the
  signal; a handler of ours would replace it). Alone, our own handler sets a flag."""

  def __init__(self):
    self.shared = jax.process_count() > 1
    self._flag = False
    if not self.shared:
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, *_):
    self._flag = True

  def requested(self, step: int) -> bool:
    return multihost_utils.reached_preemption_sync_point(step) if self.shared else self._flag

  def restore(self):
    """The handler from before the run: between the trials of `nplace sweep`, SIGTERM ends it."""
    if not self.shared:
      signal.signal(signal.SIGTERM, self._previous)


class _CtrlC:
  """Ctrl-C raises KeyboardInterrupt at once, as always, and again between steps: orbax swallows
  one that lands while it waits on a save (its wait catches BaseException), and the run then
  trained on to its end."""

  def __init__(self):
    self.pressed = False
    self._previous = signal.signal(signal.SIGINT, self._handle)

  def _handle(self, *_):
    self.pressed = True
    raise KeyboardInterrupt

  def check(self):
    if self.pressed:
      raise KeyboardInterrupt

  def restore(self):
    signal.signal(signal.SIGINT, self._previous)


def train(config, workdir, extend: bool = False) -> Summary:
  """Trains (or resumes) in `workdir`; returns what it writes to `workdir/summary.json` (a
  finished run's, as it was). `extend`: a run started with another train.steps trains on to
  this one's."""
  workdir = workdirs.resolve(workdir)
  return train_cell({workdir.name: config}, {workdir.name: workdir}, extend)[0]


def _finished(run) -> Summary | None:
  """The summary of a run that has finished its train.steps (completed there, or diverged),
  which a rerun of the same model leaves as it is (of another, a ConfigError, as on resuming);
  None for any other."""
  path = run.workdir / workdirs.SUMMARY
  if not path.exists():
    return None
  try:
    summary = Summary.read(path)
  except SummaryError as e:
    raise DataError(str(e)) from None
  done = summary.status == "diverged" or (summary.status == "completed" and summary.step == run.config.train.steps)
  if done:
    checkpoint.check_newest_model(run.workdir, run.config.model)
  return summary if done else None


# The keys that cut the tokens into the run's train and validation windows: a resume under others
# trained on, and evaluated on, other windows (the tokens' hash in data.json is the same).
SPLIT_KEYS = ("data.val_fraction", "data.seq_len")


def _check_resume(run, extend: bool) -> None:
  """ConfigError (one line) when the run's newest checkpoint was saved by a run of other SPLIT_KEYS,
  or of another train.steps unless `extend` (and it is not past the new last step): its
  learning-rate schedule was set for those steps, so training it on is not a fresh run of these."""
  step, steps = run.mngr.latest_step(), run.config.train.steps
  if not step:  # none, or step 0 (a converted or initialised model): nothing trained on a schedule yet
    return
  try:
    config = checkpoint.saved_config(run.mngr, step)
    saved = config["train"]["steps"]
  except Exception:  # a checkpoint that does not read: restoring walks back past it and says so
    return
  for key in SPLIT_KEYS:  # --extend or not: the run's data is not the new config's
    section, _, field = key.partition(".")
    was, now = config.get(section, {}).get(field), run.config[section][field]
    if was is not None and was != now:
      raise ConfigError(key, now, f"{run.workdir} holds a run trained with {key}={was!r} (checkpoint at step {step}): "
                        "resumed, the run would train on and be evaluated on other windows of the tokens (another "
                        "split puts trained tokens in the validation set): give it its value, or use another directory")
  where = f"{run.workdir} holds a run started with train.steps={saved} (checkpoint at step {step})"
  if step > steps:
    raise ConfigError("train.steps", steps, f"{where}, past this run's last step: use another directory")
  if saved != steps and not extend:
    raise ConfigError("train.steps", steps, f"{where}; its learning-rate schedule was set for {saved} steps, so "
                      f"training it on is not a fresh {steps}-step run: train it on with `nplace train --extend`, "
                      "or use another directory")


# The model keys a train state's bytes grow with
SIZE_KEYS = ("model.n_layer", "model.d_model", "model.d_ff", "model.vocab_size", "model.max_len")


def _check_memory(config, state_bytes: int, devices, runs: int) -> None:
  """ConfigError (one line naming the model's size keys) when the train states of `runs` runs
  alone (`state_bytes` each: parameters and AdamW moments, in their dtypes) exceed the memory of
  all `devices` together: they could never be held, and finding out took a compile and an
  out-of-memory traceback. Activations are not counted, and memory that is not known refuses nothing."""
  has = chips.memory_bytes(devices)
  needs = runs * state_bytes
  if has is None or needs <= has:
    return
  sizes = ", ".join(f"{key}={config[key]}" for key in SIZE_KEYS if config[key] is not None)
  states = f"a cell's {runs} train states (parameters and AdamW moments) need" if runs > 1 else \
      "the train state (parameters and AdamW moments) needs"
  raise ConfigError("model", NOT_SET, f"{sizes}: {states} {needs:,} bytes, "
                    f"more than the {has:,} bytes of memory of the {len(devices)} "
                    f"{devices[0].platform} devices it would train on together: make the model smaller")


def _check_data(run, meta: dict, is_main: bool) -> None:
  """DataError (one line) when the run's checkpoints were trained on other tokens than `meta`'s
  (a corpus file was changed under a stopped run: its resume would train on other data);
  else records them, in the workdir's data.json."""
  path, now = run.workdir / workdirs.DATA_RECORD, {"source": meta["source"], "tokens_sha256": meta.get("tokens_sha256")}
  then = json.loads(path.read_text()) if run.mngr.latest_step() is not None and path.exists() else {}
  if None not in (then.get("tokens_sha256"), now["tokens_sha256"]) and then["tokens_sha256"] != now["tokens_sha256"]:
    raise DataError(f"{run.workdir} was trained on other tokens of {then['source']} (sha256 "
                    f"{then['tokens_sha256'][:12]}..., now {now['tokens_sha256'][:12]}...; see {path}): its data "
                    "changed since; put the data back, or train in another directory")
  if is_main and then != now and (now["tokens_sha256"] or not then):  # data prepared before hashing: kept
    workdirs.write_atomic(path, json.dumps(now) + "\n")


def train_cell(configs: dict, run_dirs: dict, extend: bool = False) -> list[Summary]:
  """Trains (or resumes) the runs named in `configs` (name -> config; 2 or more: one program
  over their stacked states, see nplace/train/cell.py) each in its workdir `run_dirs[name]`;
  returns what each writes to its summary.json. Runs that have all finished are left as they
  are (their summaries returned); a run whose checkpoint has another train.steps is refused
  unless `extend` (`_check_resume`)."""
  config = next(iter(configs.values()))
  runs = [Run(name, c, workdirs.resolve(run_dirs[name])) for name, c in configs.items()]
  for run in runs:  # a missing bucket or read-only directory: one line, before anything starts
    workdirs.check_writable(run.workdir)
  startup.prepare_process(config)
  n_proc, is_main = jax.process_count(), jax.process_index() == 0
  finished = [_finished(run) for run in runs]
  if all(finished):
    for run, summary in zip(runs, finished) if is_main else ():
      print(f"{run.workdir}: finished, {summary.status} at step {summary.step} (summary.json kept; a new "
            f"train.steps and --extend train it on): {summary.to_json(indent=None)}", flush=True)
    return finished
  devices = cpu_split.mesh_devices(config)
  info = model_info(config)
  _check_memory(config, info["state_bytes"], devices, len(runs))
  if config.train.batch_size % n_proc:
    raise ConfigError("train.batch_size", config.train.batch_size, f"must divide over {n_proc} processes")
  cell = Cell(runs, devices)  # ConfigError on an uneven split, or runs that cannot share a program
  sharding.check_batch(cell.mesh.shape, config)
  meta = prepare.read_meta(prepare.prepared_dir(config.data))
  evaluation.check_validation_split(config, meta)
  tokens = config.train.batch_size * config.data.seq_len
  labels = labels_of(run.name for run in runs)  # in a sweep: its trials' short labels
  every = lines_every(config.train.log_every, config.train.steps) if labels else 1
  progress = Progress(config.train.steps, tokens * cell.trials, is_main, every=every, labels=labels)
  for run in runs:
    run.mngr = checkpoint.manager(run.workdir, run.config.checkpoint)
  try:
    for run in runs:
      _check_resume(run, extend)
      _check_data(run, meta, is_main)
    _run(cell, meta, progress, is_main, info["flops_per_token"])
  finally:  # also after an error: no save is left writing (nplace sweep goes on to the next trial)
    for run in runs:
      run.mngr.wait_until_finished()
      run.mngr.close()
  for run in runs if is_main else ():
    # atomically: a kill mid-write leaves none (the rerun resumes the run) rather than half a file
    workdirs.write_atomic(run.workdir / workdirs.SUMMARY, run.summary.to_json())
    who = progress.who(run.name, cell.stacked)
    progress.message(f"{who}{run.summary.status} at step {run.summary.step}: {run.summary.to_json(indent=None)}")
  return [run.summary for run in runs]


def _announce(progress, cell, evaluator):
  """Where the logs go, what runs where and when, before the first step."""
  mesh, config = cell.mesh, cell.config
  if cell.stacked:
    progress.message(f"cell: {cell.trials} runs in one program ({cell.names}), differing in "
                     f"{', '.join(cell.varying) or 'the seed'}")
  for run in cell.runs:
    if run.name in progress.labels:  # a sweep's trial: its label, and its name once (the sweep points TensorBoard)
      progress.message(f"{progress.who(run.name, True)}logs: {run.workdir}")
    else:
      progress.message(f"logs: {run.workdir} (TensorBoard event files; summary.json at the end)\n"
                       f"  tensorboard --logdir {run.workdir}")
  progress.message(f"devices: {mesh.size} x {mesh.devices.flat[0].platform}, mesh {dict(mesh.shape)}")
  p = config.probe
  if p.every:
    early = f", and every {p.early_every} steps up to step {p.early_until}" if p.early_every else ""
    progress.message(f"probes: the suite runs at step 0 and every {p.every} steps{early}")
  for note in evaluator.notes():
    progress.message(note)


def _run(cell, meta, progress, is_main, flops_per_token: float) -> None:
  """The loop, from the newest checkpoint (or init) to the last step, divergence or SIGTERM."""
  config = cell.config
  cell.open_data()
  state, start = cell.restore()
  if state is None:
    state = cell.init()
  for run in cell.runs if start else ():
    progress.message(f"{progress.who(run.name, True)}resumed from step {start} (checkpoint {run.mngr.directory / str(start)})")
  cell.compile()
  evaluator = evaluation.Evaluator(config, cell.eval_step,
                                   lambda b: jax.make_array_from_process_local_data(cell.eval_batch_sharding, b),
                                   is_main, cell.share)
  peak = chips.peak_flops(cell.mesh.devices.flat[0].device_kind, config.train.peak_flops)
  mfu_per_tps = flops_per_token / (peak * cell.mesh.size) if peak else None
  for run in cell.runs:
    # a fresh start purges from step 0: a run killed before its first checkpoint landed may have
    # logged steps that this one logs again
    first = start + 1 if start else 0
    run.writer = Writer(run.workdir, purge_step=first, active=is_main)
    # at each (re)start: an extended run, or one resumed with other settings, shows what it trains on
    run.writer.text("config", f"```\n{run.config.to_json_best_effort(indent=2)}\n```", first)
    run.summary = Summary(step=start, frequency_loss=meta["frequency_loss"], entropy_rate=meta.get("entropy_rate"),
                          rouge_text=evaluator.rouge_text, gen_decoding=evaluator.decoding)
    run.log = StepLog(run.config, run.writer, run.summary, config.train.batch_size * config.data.seq_len,
                      mfu_per_tps, run.workdir / workdirs.COUNTERS if is_main else None)
    if start:
      run.log.restore_counters(start)
  _announce(progress, cell, evaluator)
  logs = CellLog(cell, progress)
  loop = hooks.Hooks()
  references = {"data/frequency_loss": meta["frequency_loss"], "data/entropy_rate": meta.get("entropy_rate")}
  hooks.eval_hook(loop, cell, evaluator, progress, references, config.train.eval_every, logs)
  hooks.probe_hook(loop, cell, progress)
  hooks.checkpoint_hook(loop, cell, logs)  # after a step's eval and probes: a checkpoint implies them
  hooks.profile_hook(loop, config, cell.runs[0].workdir, start, progress)
  preemption, ctrl_c = _Preemption(), _CtrlC()

  try:
    if start == 0:
      loop.start(state)
    last, stopped = start, set()
    for step in range(start + 1, config.train.steps + 1):
      with jax.profiler.StepTraceAnnotation("train", step_num=step):  # ~free unless tracing
        state, step_metrics = cell.step(state, cell.next_batch())
      last = step
      logs.push(step, step_metrics)
      for run in cell.runs if is_main else ():
        if run.diverged and run.name not in stopped:  # its summary, kept should the cell be stopped before its end
          workdirs.write_atomic(run.workdir / workdirs.SUMMARY, run.summary.to_json())
          stopped.add(run.name)
      if all(run.diverged for run in cell.runs):
        break
      loop.step(step, state)
      ctrl_c.check()
      if preemption.requested(step):
        for run in cell.runs:
          if not run.diverged:
            run.summary.status = "preempted"
        break
    logs.flush()
    loop.end(last, state)
  finally:
    preemption.restore()
    ctrl_c.restore()
    for run in cell.runs:
      run.writer.close()
  for run in cell.runs:
    if run.summary.val_loss is not None:
      run.summary.collapsed = bool(collapsed(run.summary.val_loss, meta["frequency_loss"]))
    run.summary.tokens_per_sec = run.log.tokens_per_sec()
