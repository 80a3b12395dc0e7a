"""Where a grid cell's wall time goes: compile, train steps, evaluation (its ROUGE and its
generation + loss on the device), checkpoints, and the host's work around each step.

    python benchmarks/cell_overhead.py --config experiments/stability.py:cpu [--trials 35]
        [--steps 20] [--json OUT.json] [--config.KEY=VALUE ...]

The cell is the grid's first cell of up to `--trials` trials (nplace.studies.sweep.cells: the first
trials in grid order that share a program, as `nplace sweep --batch K` forms them), trained by
nplace.train.loop.train_cell, the sweep's own path, in a temporary directory, for `--steps` steps,
evaluated at step 0, in the middle and at the end, saved at step 1 (orbax saves a run's first
step), in the middle and at the end. The library is not changed: the loop's seams are timed from here (Cell.step, next_batch and
evaluate, CellLog.flush, Evaluator.outputs, the evaluator's ROUGE, the hooks, checkpoint.save and
orbax's waits), and JAX's compile events (tracing, lowering, XLA) are charged to the call they
happened in. Every second of train_cell's wall is in exactly one row: a timed call's own time
less the calls timed inside it and its compiles; the time between timed calls to the loop (host
per step: the loop itself) or, before the first step and after the last, to setup and teardown.

How to read it. The loop fetches a step's metrics once the next step is queued, so the host's
work overlaps the device's: "train steps" is the device time the host waits for (plus
dispatch), not the step's device time. A large "host per step" with small "train steps" is a
host-bound loop, the device idle while the host logs and feeds it. "evaluation: generation +
loss" holds the eval step's device time and its validation batches' transfer; its first call's
compile is a compile row. A checkpoint row holds the saves' synchronous part and the waits for
the asynchronous writes (the last one at the end of the cell).

The full-length column (when --steps is shorter than the grid's train.steps) costs the cell at
the grid's own length and evaluation and checkpoint schedule: each row's cost per step,
evaluation or save times their count, compiles and setup once. The grid line below it costs
every cell of the grid (`nplace sweep --batch K`) the same way; a cell of another shape gets the
device rows scaled by its model FLOPs a step and the per-run rows by its trials: a guess, as
compile and host costs do not scale so.
"""
import collections
import contextlib
import functools
import json
import math
import pathlib
import sys
import tempfile
import threading
import time
from unittest import mock

import jax
import orbax.checkpoint as ocp
from absl import flags
from etils import epath

import _harness
from nplace.commands.sweep import config_args
from nplace.data import prepare
from nplace.errors import ConfigError
from nplace.logs.progress import Progress
from nplace.model.size import model_info
from nplace.runtime import startup
from nplace.studies import grid, sweep
from nplace.train import cell, checkpoint, evaluation, hooks, loop, scores, step_log

# jax/_src/dispatch.py's events: a jit's tracing, its lowering to StableHLO, XLA's compile (or
# the persistent cache's read); recorded one after another, for top-level jits only
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
COMPILE_OF = {"steps": "compile_train", "eval_device": "compile_eval"}  # the part a compile happened in

# part: (row, the unit its cost grows with, what it scales with across a grid's cells)
ROWS = {
    "compile_train": ("compile: train step", None, None),
    "compile_eval": ("compile: eval step", None, None),
    "compile_other": ("compile: other (init, a run's state sliced to save)", None, None),
    "steps": ("train steps (dispatch, waiting on the device)", "step", "device"),
    "batches": ("host per step: batches", "step", "trials"),
    "logging": ("host per step: metrics and logs", "step", "trials"),
    "loop": ("host per step: the loop itself", "step", None),
    "hooks": ("other hooks (probes, profile)", "step", "trials"),
    "eval_device": ("evaluation: generation + loss (device)", "evaluation", "device"),
    "rouge": ("evaluation: ROUGE", "evaluation", "trials"),
    "eval_host": ("evaluation: the rest (host)", "evaluation", "trials"),
    "checkpoints": ("checkpoints", "save", "trials"),
    "setup": ("setup and teardown (data and its first batch, init, writers)", None, "trials"),
}
HOOK_PARTS = {"checkpoint_hook": "checkpoints", "eval_hook": "eval_host"}  # others: "hooks"


class Ledger:
  """Seconds by part, each second of the timed span in exactly one part (see the docstring)."""

  def __init__(self):
    self.seconds = collections.Counter()
    self.n_steps, self.evaluations, self.saved = 0, 0, set()
    self._stack = []  # [part, start, seconds of the calls and compiles inside it]
    self._phase, self._idle_since = "setup", None

  def start(self):
    self._idle_since = time.perf_counter()

  def stop(self):
    self._account_idle(time.perf_counter())

  def phase(self, part):
    """From now on, time between timed calls goes to `part` (called between timed calls)."""
    self._account_idle(time.perf_counter())
    self._phase = part

  def _account_idle(self, now):
    self.seconds[self._phase] += now - self._idle_since
    self._idle_since = now

  @contextlib.contextmanager
  def part(self, name):
    start = time.perf_counter()
    if not self._stack:
      self._account_idle(start)
    frame = [name, start, 0.0]
    self._stack.append(frame)
    try:
      yield
    finally:
      end = time.perf_counter()
      self._stack.pop()
      self.seconds[name] += end - start - frame[2]
      if self._stack:
        self._stack[-1][2] += end - start
      else:
        self._idle_since = end

  def compiled(self, event, seconds, **_):
    """jax.monitoring's listener: a compile's seconds, out of the part it happened in."""
    if event not in COMPILE_EVENTS or threading.current_thread() is not threading.main_thread():
      return  # a background thread's compile (orbax's) takes none of the loop's time
    if self._stack:
      self._stack[-1][2] += seconds
      self.seconds[COMPILE_OF.get(self._stack[-1][0], "compile_other")] += seconds
    else:  # between timed calls: out of the phase's time, which is counted at the next call
      self.seconds[self._phase] -= seconds
      self.seconds["compile_other"] += seconds


def instrument(ledger, stack, log):
  """Timers around the loop's seams, for as long as `stack` is open; the loop's console
  lines go to `log`."""
  def patch(owner, name, new):
    stack.enter_context(mock.patch.object(owner, name, new))

  def timed(part, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      with ledger.part(part):
        return fn(*args, **kwargs)
    return wrapper

  cell_step, cell_next_batch, cell_evaluate = cell.Cell.step, cell.Cell.next_batch, cell.Cell.evaluate
  flush = step_log.CellLog.flush
  outputs, rouge_of_rows, save = evaluation.Evaluator.outputs, scores.rouge_of_rows, checkpoint.save
  add, start, end = hooks.Hooks.add, hooks.Hooks.start, hooks.Hooks.end

  def step(self, state, batch):
    ledger.n_steps += 1
    with ledger.part("steps"):
      return cell_step(self, state, batch)

  def next_batch(self):
    with ledger.part("batches" if ledger.n_steps else "setup"):  # the first opens the data
      return cell_next_batch(self)

  def evaluate(self, evaluator, params):
    with ledger.part("steps"):  # the step before is still running: its time is the step's
      jax.block_until_ready(params)
    with ledger.part("eval_host"):
      return cell_evaluate(self, evaluator, params)

  def flush_metrics(self):
    if self.pending:
      with ledger.part("steps"):  # what jax.device_get in flush would wait for
        jax.block_until_ready(self.pending[1])
    with ledger.part("logging"):
      flush(self)

  def eval_outputs(self, params):
    ledger.evaluations += 1
    with ledger.part("eval_device"):
      return outputs(self, params)

  def checkpoint_save(mngr, step, *args, **kwargs):
    with ledger.part("checkpoints"):
      saved = save(mngr, step, *args, **kwargs)
    if saved:
      ledger.saved.add(step)
    return saved

  def add_hook(self, fn, every, *, at_start=False, at_end=None):
    part = HOOK_PARTS.get(fn.__qualname__.split(".")[0], "hooks")
    add(self, timed(part, fn), every, at_start=at_start, at_end=at_end and timed(part, at_end))

  def start_hooks(self, state):  # step 0's hooks: the loop starts after them
    start(self, state)
    ledger.phase("loop")

  def end_hooks(self, step, state):
    ledger.phase("setup")
    end(self, step, state)

  patch(cell.Cell, "step", step)
  patch(cell.Cell, "next_batch", next_batch)
  patch(cell.Cell, "evaluate", evaluate)
  patch(step_log.CellLog, "flush", flush_metrics)
  patch(evaluation.Evaluator, "outputs", eval_outputs)
  patch(scores, "rouge_of_rows", lambda *args: timed("rouge", rouge_of_rows(*args)))
  patch(checkpoint, "save", checkpoint_save)
  for name in ("wait_until_finished", "close"):
    patch(ocp.CheckpointManager, name, timed("checkpoints", getattr(ocp.CheckpointManager, name)))
  patch(hooks.Hooks, "add", add_hook)
  patch(hooks.Hooks, "start", start_hooks)
  patch(hooks.Hooks, "end", end_hooks)
  patch(loop, "Progress", functools.partial(Progress, stream=log))


def schedule(config) -> dict:
  """How many steps, evaluations and saves a run of `config` makes (the loop's hooks: an
  evaluation at step 0, every eval_every and at the end; a save at step 1, orbax's first-save
  policy, every checkpoint.every and at the end)."""
  t, every = config.train, config.checkpoint.every
  saves = {1, t.steps, *(range(every, t.steps + 1, every) if every else ())}
  return {"step": t.steps, "evaluation": 1 + math.ceil(t.steps / t.eval_every) if t.eval_every else 0,
          "save": len(saves)}


def step_flops(config, trials: int) -> float:
  """A cell's model FLOPs a step: what its device rows scale with."""
  return model_info(config)["flops_per_token"] * config.train.batch_size * config.data.seq_len * trials


def cost(per_unit: dict, once: dict, counts: dict, device: float = 1.0, trials: float = 1.0) -> dict:
  """Each part's seconds for a run making `counts` units, its device rows scaled by `device`,
  its per-run rows by `trials`."""
  scale = {"device": device, "trials": trials, None: 1.0}
  return {part: (once[part] if unit is None else per_unit[part] * counts[unit]) * scale[scales]
          for part, (_, unit, scales) in ROWS.items()}


def clock(seconds: float) -> str:
  return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min" if seconds >= 3600 else (
      f"{int(seconds // 60)} min {seconds % 60:02.0f} s")


def main():
  def define(fv):
    flags.DEFINE_integer("trials", 35, "trials in the cell (nplace sweep --batch K)", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("steps", 20, "train steps of the measured cell", lower_bound=1, flag_values=fv)
    flags.DEFINE_string("json", None, "also write the parts and projections to this file, as one JSON object",
                        flag_values=fv)

  startup.cpu_only_without_tpu()  # as nplace's commands do
  fv = _harness.parse_flags(__doc__, define)
  spec, cli_overrides = config_args(sys.argv[1:])

  def usage(message):
    print(f"cell_overhead.py: {message}", file=sys.stderr)
    sys.exit(2)

  if fv.config is None:
    usage("--config FILE[:ARG] is required: a grid (an experiment file with get_sweep)")
  with tempfile.TemporaryDirectory(prefix="cell_overhead-") as tmp:
    workdir = epath.Path(tmp)
    try:
      trials = grid.expand(spec, fv.config, cli_overrides, workdir)
    except (grid.GridError, ConfigError) as e:
      usage(e)
    groups = sweep.cells(trials, list(range(len(trials))), fv.trials)
    chosen = [trials[i] for i in groups[0]]
    configs = {}
    for t in chosen:
      c = t.config.copy_and_resolve_references()
      c.train.steps = fv.steps
      c.train.eval_every = c.checkpoint.every = max(1, fv.steps // 2)
      configs[t.name] = c
    first = next(iter(configs.values()))
    startup.prepare_process(first)  # before the first device use, as train_cell does it
    prepare.prepared_dir(first.data)  # the data made (or found) before the timing
    device = jax.devices()[0]
    print(f"{spec}: the first cell of {len(chosen)} trials ({chosen[0].name} .. {chosen[-1].name}), "
          f"{fv.steps} steps of {first.train.batch_size} x {first.data.seq_len} tokens (the grid's: "
          f"{chosen[0].config.train.steps}); {jax.device_count()} x {device.device_kind} ({device.platform}); "
          f"jax {jax.__version__}", flush=True)

    ledger = Ledger()
    jax.monitoring.register_event_duration_secs_listener(ledger.compiled)
    log_path = workdir / "loop.log"
    with open(log_path, "w") as log, contextlib.ExitStack() as stack:
      instrument(ledger, stack, log)
      start = time.perf_counter()
      ledger.start()
      try:
        loop.train_cell(configs, {name: workdir / name for name in configs})
      except Exception:
        log.flush()
        print(f"cell_overhead.py: the cell failed; its log:\n{log_path.read_text()[-3000:]}", file=sys.stderr)
        raise
      ledger.stop()
      wall = time.perf_counter() - start
    out = report(ledger, wall, chosen, trials, groups, fv.trials)
  if fv.json:
    out.update(config=spec, device=device.device_kind, jax=jax.__version__)
    pathlib.Path(fv.json).write_text(json.dumps(out) + "\n")


def report(ledger, wall, chosen, trials, groups, batch) -> dict:
  """Prints the table of parts, the full-length projection and the grid's; returns them."""
  measured = {"step": ledger.n_steps, "evaluation": ledger.evaluations, "save": len(ledger.saved)}
  once = {part: ledger.seconds[part] for part in ROWS}
  per_unit = {part: ledger.seconds[part] / measured[unit] if unit and measured[unit] else 0.0
              for part, (_, unit, _) in ROWS.items()}
  grid_config = chosen[0].config
  full = schedule(grid_config)
  projecting = full["step"] > ledger.n_steps
  full_cost = cost(per_unit, once, full)
  full_wall = sum(full_cost.values())
  print(f"measured: {measured['step']} steps, {measured['evaluation']} evaluations, {measured['save']} saves; "
        f"wall {wall:.1f} s" + (f"; full length: {full['step']} steps, {full['evaluation']} evaluations, "
                                f"{full['save']} saves" if projecting else ""))
  head = "| part | seconds | share of wall | cost |" + (" full length, s | share |" if projecting else "")
  print(head + "\n|" + "---|" * head.count(" |"))
  for part, (row, unit, _) in ROWS.items():
    if not ledger.seconds[part] and part in ("hooks", "compile_other"):
      continue
    each = f"{per_unit[part] * 1e3:.1f} ms per {unit}" if unit else "once"
    line = f"| {row} | {ledger.seconds[part]:.2f} | {ledger.seconds[part] / wall:.1%} | {each} |"
    if projecting:
      line += f" {full_cost[part]:.1f} | {full_cost[part] / full_wall:.1%} |"
    print(line)
  total = f"| wall (train_cell) | {wall:.2f} | 100% | |" + (f" {full_wall:.1f} ({clock(full_wall)}) | 100% |"
                                                           if projecting else "")
  print(total)
  if not any(ledger.seconds[p] for p in COMPILE_OF.values()):
    print(f"warning: jax {jax.__version__} recorded none of {', '.join(COMPILE_EVENTS)}: the compiles are in "
          "the other rows")
  per_step = sum(per_unit[p] for p, (_, unit, _) in ROWS.items() if unit == "step")
  tokens = len(chosen) * grid_config.train.batch_size * grid_config.data.seq_len
  print(f"a step, host and device: {per_step * 1e3:.1f} ms ({tokens / per_step:,.0f} trial-tokens/s); "
        f"train steps alone: {per_unit['steps'] * 1e3:.1f} ms")
  out = {"trials": len(chosen), "measured": measured, "wall_s": wall, "step_s": per_step,
         "train_step_s": per_unit["steps"], "seconds": {ROWS[p][0]: ledger.seconds[p] for p in ROWS}}
  if projecting:
    out.update(full=full, full_s=full_wall, full_seconds={ROWS[p][0]: full_cost[p] for p in ROWS})
  if len(trials) > len(chosen) or projecting:
    base = step_flops(grid_config, len(chosen))
    flops, total_s = {}, 0.0
    for g in groups:
      c = trials[g[0]].config
      key = (c.model.n_layer, c.model.d_model, c.train.batch_size, c.data.seq_len, c.model.vocab_size)
      flops[key] = flops.get(key) or step_flops(c, 1)
      total_s += sum(cost(per_unit, once, schedule(c), device=flops[key] * len(g) / base,
                          trials=len(g) / len(chosen)).values())
    print(f"the grid, {len(trials)} trials in {len(groups)} cells at --batch {batch}: projected {clock(total_s)} "
          f"(cells of another shape: device rows scaled by model FLOPs a step, per-run rows by trials)")
    out.update(grid_trials=len(trials), grid_cells=len(groups), grid_s=total_s)
  return out


if __name__ == "__main__":
  main()
