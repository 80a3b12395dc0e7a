"""What one compiled program trains: one run, or a cell of runs (`nplace sweep --batch K`) whose
configs differ only in the seed and steps.HYPERPARAMETERS, their states stacked on the mesh's
leading `trial` axis. Everything the loop does to "the state" goes through a Cell: make or
restore it, step it, evaluate it, and hand each run its own slice to save or probe. For one
run every one of these is what it always was; the loop, hooks and logs do not tell the two apart.

Each run of a cell stays a run of its own: its workdir gets its event files, summary, counters
and checkpoints (its slice of the state, saved as a lone run saves it), so `nplace eval`,
`nplace probe` and `nplace train` read it alone.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from nplace.config import flatten
from nplace.data import loader
from nplace.errors import ConfigError
from nplace.runtime import sharding
from nplace.train import checkpoint, state as train_state, steps


@dataclasses.dataclass
class Run:
  """One run of a cell: its config and workdir, and what the loop attaches to it (its writer,
  summary and step log)."""
  name: str
  config: ml_collections.ConfigDict
  workdir: epath.Path
  mngr: object = None  # its orbax CheckpointManager
  iterator: object = None  # its grain train iterator
  writer: object = None
  summary: object = None
  log: object = None

  @property
  def diverged(self) -> bool:
    return self.summary.status == "diverged"


def value(config, key: str):
  """A dotted key's value (`optim.lr`)."""
  node = config
  for part in key.split("."):
    node = node[part]
  return node


FREE = ("seed", *steps.HYPERPARAMETERS)  # the keys the runs of a cell may differ in


def program(config) -> dict:
  """What the runs of a cell must share: every key's value but FREE's."""
  return {key: v for key, v in flatten(config.to_dict()).items() if key not in FREE}


def varying(configs) -> tuple[str, ...]:
  """The HYPERPARAMETERS the configs differ in; a ConfigError naming the first other key they
  differ in (such runs need programs of their own)."""
  shared = [program(c) for c in configs]
  for key, v in shared[0].items():
    if any(p[key] != v for p in shared[1:]):
      raise ConfigError(key, [p[key] for p in shared], f"the runs of a cell may differ only in {', '.join(FREE)}")
  return tuple(key for key in steps.HYPERPARAMETERS if len({value(c, key) for c in configs}) > 1)


def traced(differ: tuple[str, ...]) -> tuple[str, ...]:
  """The HYPERPARAMETERS a cell's step takes as per-run arrays: steps.ALWAYS_TRACED and those its
  runs differ in (`varying`'s)."""
  return tuple(key for key in steps.HYPERPARAMETERS if key in steps.ALWAYS_TRACED or key in differ)


class Cell:
  """The runs of one program, on `devices`: one run unstacked (`stacked` False), or K >= 2 runs
  stacked on the `trial` axis of a (trial, data, fsdp, tensor) mesh."""

  def __init__(self, runs: list[Run], devices):
    self.runs, self.config = runs, runs[0].config  # the program's config
    self.stacked = len(runs) > 1
    if self.stacked and jax.process_count() > 1:  # each process's iterators load its rows of every run
      raise ConfigError("distributed.initialize", True, "a cell of runs trains in one process: "
                        "run one cell per host (nplace sweep --batch K --cell N), or the trials alone")
    K = len(runs) if self.stacked else None
    self.varying = varying([r.config for r in runs]) if self.stacked else ()
    self.traced = traced(self.varying) if self.stacked else ()
    self.mesh = sharding.make_mesh(self.config.mesh, devices, trials=K)
    # each run's slice laid out as a lone run's state: what it saves, and what its probes read
    self.run_mesh = sharding.make_mesh(self.config.mesh, devices) if self.stacked else self.mesh
    self.state_shardings = train_state.shardings(self.config, self.mesh, K)  # ConfigError on an uneven split
    self.run_shardings = train_state.shardings(self.config, self.run_mesh) if self.stacked else self.state_shardings
    self.batch_sharding = sharding.batch_sharding(self.mesh, self.config.mesh, trials=self.stacked)
    self.eval_batch_sharding = sharding.batch_sharding(self.mesh, self.config.mesh, stacked=True)
    self.share = sharding.process_share(self.mesh, self.config.mesh)  # (i, n): this process loads share i of n
    self._rows = [None] * len(runs)  # each run's last batch rows (a stopped run is fed them again)
    if self.stacked:
      trials = sharding.trial_sharding(self.mesh)
      self.hyper = {key: jax.device_put(jnp.asarray([value(r.config, key) for r in runs], jnp.float32), trials)
                    for key in self.traced}
      self._active, self._active_K = None, None
      self._slice = jax.jit(lambda state, i: jax.tree.map(lambda x: x[i], state), out_shardings=self.run_shardings)

  @property
  def trials(self) -> int:
    return len(self.runs)

  def open_data(self) -> None:
    """Each run's train iterator: its own seed, so its own order of the windows."""
    for run in self.runs:
      i, n = self.share
      run.iterator = loader.make_iterator(run.config.data, "train", self.config.train.batch_size // n,
                                          seed=run.config.seed, shuffle=True, process_index=i, process_count=n)

  def restore(self):
    """(state, step): the runs' newest common checkpoint, or (None, 0)."""
    abstract = train_state.abstract(self.config)
    mngrs, iterators = [r.mngr for r in self.runs], [r.iterator for r in self.runs]
    models = [r.config.model for r in self.runs]
    if not self.stacked:
      states, step = checkpoint.restore_together(mngrs, abstract, self.state_shardings, iterators, models)
      return (states[0] if states else None), step
    host = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0]), abstract)
    states, step = checkpoint.restore_together(mngrs, abstract, host, iterators, models)
    if not states:
      return None, 0
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *states)
    return jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, lambda index: x[index]),
                        stacked, self.state_shardings), step

  def init(self):
    """A fresh state: each run's the one it would start from alone."""
    seeds = [r.config.seed for r in self.runs] if self.stacked else None
    return train_state.init(self.config, self.state_shardings, seeds)

  def compile(self) -> None:
    self._train_step, eval_step = steps.compile_steps(self.config, self.mesh, self.state_shardings,
                                                      self.traced if self.stacked else None)
    # a cell's runs each evaluated at their own hyperparameters (model.dt changes the forward pass)
    self.eval_step = (lambda params, batches: eval_step(params, batches, self.hyper)) if self.stacked else eval_step

  def next_batch(self):
    """The step's global batch: each running run's next rows (stacked for a cell)."""
    for i, run in enumerate(self.runs):
      if not (self.stacked and run.diverged and self._rows[i] is not None):
        self._rows[i] = next(run.iterator)
    local = np.stack(self._rows) if self.stacked else self._rows[0]
    return jax.make_array_from_process_local_data(self.batch_sharding, local)

  def step(self, state, batch):
    if not self.stacked:
      return self._train_step(state, batch)
    active = tuple(not run.diverged for run in self.runs)
    if active != self._active:  # a run that diverged trains no further (its updates masked)
      self._active = active
      self._active_K = jax.device_put(np.asarray(active), sharding.trial_sharding(self.mesh))
    return self._train_step(state, batch, self.hyper, self._active_K)

  def metrics_of(self, metrics, i: int) -> dict:
    """Run i's values of a step's metrics (fetched to the host)."""
    return {name: m[i] for name, m in metrics.items()} if self.stacked else metrics

  def state_of(self, state, i: int):
    """Run i's state as a lone run holds it."""
    return self._slice(state, i) if self.stacked else state

  def evaluate(self, evaluator, params) -> list[dict]:
    """Every run's evaluation: one pass over the validation batches for the whole cell."""
    if not self.stacked:
      return [evaluator(params)]
    out = evaluator.outputs(params)
    return [evaluator.results({k: v[i] for k, v in out.items()}) for i in range(self.trials)]

  @functools.cached_property
  def names(self) -> str:
    return ", ".join(r.name for r in self.runs)
