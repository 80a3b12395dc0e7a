"""Periodic hooks between train steps (levanter's `add_hook(fn, every=N)`, nanodo's periodic
actions): checkpoints, eval, probes and profiles."""
import jax

from nplace.config import profile_window
from nplace.probes import inputs, suite, summaries
from nplace.runtime import sharding
from nplace.train import checkpoint


class Hooks:
  """Callables run between train steps, in the order added."""

  def __init__(self):
    self._hooks = []

  def add(self, fn, every: int, *, at_start=False, at_end=None):
    """`fn(step, state)` every `every` steps (0 = never) and, when `at_start`, at step 0 of a
    fresh run; `at_end(step, state)` once after the loop (each run's summary has its status)."""
    self._hooks.append((fn, every, at_start, at_end))

  def start(self, state):
    for fn, every, at_start, _ in self._hooks:
      if at_start and every:
        fn(0, state)

  def step(self, step: int, state):
    for fn, every, _, _ in self._hooks:
      if every and step % every == 0:
        fn(step, state)

  def end(self, step: int, state):
    for *_, at_end in self._hooks:
      if at_end:
        at_end(step, state)


def checkpoint_hook(hooks, cell, logs):
  """Each run's checkpoint in its own workdir; orbax decides the interval (checkpoint.every).
  The last step is saved unless the run diverged (its newest good checkpoint stays the newest).
  The step log's counters are saved with each checkpoint, so a resumed run goes on counting.
  Added after the eval and probe hooks, and the event files synced before the save starts: a
  checkpoint on disk means its step's eval and probes are too, so a run killed after it resumes
  there without losing them (a kill before it redoes them from the checkpoint before)."""
  def save(step, state):
    # each run's own manager: a run resumed past a step its partner had saved still saves it
    if not any(run.mngr.should_save(step) for run in cell.runs if not run.diverged):
      return
    logs.flush()  # this step's metrics are in the counters (saving waits for the step anyway)
    for i, run in enumerate(cell.runs):
      if run.diverged:
        continue
      run.writer.sync()  # a bucket workdir's event files go up with each checkpoint
      if checkpoint.save(run.mngr, step, cell.state_of(state, i), run.iterator, run.config):
        run.log.save_counters(step)

  def final(step, state):
    for i, run in enumerate(cell.runs):
      if not run.diverged and run.mngr.latest_step() != step:
        checkpoint.save(run.mngr, step, cell.state_of(state, i), run.iterator, run.config, force=True)
        run.log.save_counters(step)

  hooks.add(save, every=1, at_end=final)


def _rouge_line(results: dict) -> str:
  """The eval line's ROUGE-L: teacher-forced beside its copy baseline (a model that copies its
  input scores it), and generated; empty with ROUGE off."""
  if "teacher_forced_rougeL" not in results:
    return ""
  generated = f", generated {results['gen_rougeL']:.4f}" if "gen_rougeL" in results else ""
  return (f"; ROUGE-L teacher-forced {results['teacher_forced_rougeL']:.4f} "
          f"(copy baseline {results['copy_rougeL']:.4f}){generated}")


def eval_hook(hooks, cell, evaluator, progress, references, every, logs):
  """eval/* scalars and the summary's eval fields at step 0, every `every` steps and at the last
  step of a completed run: one evaluation pass for all the cell's runs. The last step's runs in
  that step's hooks, before its checkpoint, as every other eval does: a checkpoint on disk implies
  its step's eval (in the event files and in the counters saved with it), so a run resumed at its
  last step evaluates it no more (it had logged eval/* there twice)."""
  last = cell.config.train.steps

  def run(step, state):
    for r, results in zip(cell.runs, cell.evaluate(evaluator, state["params"])):
      if r.diverged:
        continue
      r.writer.scalars(step, {f"eval/{name}": value for name, value in results.items()} | references)
      r.summary.file_eval(results)
      who = progress.who(r.name, cell.stacked)
      progress.message(f"{who}step {step} eval loss {results['loss']:.4f} perplexity {results['perplexity']:.3f}"
                       f"{_rouge_line(results)} (frequency loss {references['data/frequency_loss']:.4f})")

  def periodic(step, state):
    if step % every == 0:
      run(step, state)
    elif step == last:
      logs.flush()  # the last step's divergence known: a run that diverged there is not evaluated
      if not all(r.diverged for r in cell.runs):
        run(step, state)

  hooks.add(periodic, every=1, at_start=True)


def probe_hook(hooks, cell, progress):
  """The probe suite on a fixed held-out batch (the same rows on every process), compiled apart
  from the train step, at the steps `summaries.probed` picks (step 0, every `probe.every` steps,
  the early schedule), written as each run's probe/* summaries; a cell's runs are probed one
  after another, each on its own slice of the state."""
  config = cell.config
  if not config.probe.every:
    return
  replicated = sharding.replicated(cell.run_mesh)
  batch = jax.make_array_from_process_local_data(replicated, inputs.probe_batch(config, held_out=True))
  writers = [summaries.ProbeWriter(r.writer, r.config) if r.writer.summary else None for r in cell.runs]

  def run(step, state):
    if not summaries.probed(config.probe, step):
      return
    for i, r in enumerate(cell.runs):
      if r.diverged:
        continue
      results = jax.device_get(suite.suite(r.config, cell.state_of(state, i)["params"], batch,
                                           inputs.probe_key(r.config), cell.run_mesh))
      if writers[i]:
        writers[i].write(step, results)
      who = progress.who(r.name, cell.stacked)
      progress.message(f"{who}step {step} probe suite: {len(results)} probes written to TensorBoard")

  hooks.add(run, every=1, at_start=True)  # `probed` picks the steps: early ones are off the every-N grid


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

  def final(step, state):
    if tracing:  # the run stopped inside the window
      end()

  if resumed_at and first - 1 <= resumed_at < last:  # step START-1's hooks will not run again
    begin()
  hooks.add(run, every=1, at_start=True, at_end=final)
