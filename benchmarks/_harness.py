"""Shared by the benchmarks (not one itself): the trainer's compiled step, a random batch, a
median timer, the configurations the speed benchmarks run, and the flags of the scripts that
take a --config."""
import math
import pathlib
import sys
import time

import jax

from nplace.commands.flags import Command
from nplace.config import experiment, validate
from nplace.errors import ConfigError, UsageError
from nplace.runtime import sharding, startup
from nplace.train import state as train_state, steps

# name -> (experiment, its variant, model overrides): the CPU speed benchmarks' shapes
WORKLOADS = {
    "tiny": ("tiny", None, {}),                                  # 4 x 128, T 128
    "12x256": ("tiny", None, {"n_layer": 12, "d_model": 256}),   # 12 x 256, T 128
    "deep48": ("deep48", None, {}),                              # 48 x 64, T 64
    "stability": ("stability", "cpu", {}),                       # study A's CPU model: 12 x 64, T 64
}


def workload_config(name, placement, **model_overrides):
  """The config of a WORKLOADS entry with `placement` (and more model fields) set."""
  if name not in WORKLOADS:
    raise ValueError(f"workload {name!r}: expected one of {', '.join(WORKLOADS)}")
  preset, variant, overrides = WORKLOADS[name]
  config = experiment(preset, variant)
  config.model.update(placement=placement, **overrides, **{k: v for k, v in model_overrides.items() if v is not None})
  validate(config)
  return config


def compiled_step(config):
  """(state, step): `nplace train`'s jitted step and a fresh state, on this host's mesh, in a
  process prepared as it prepares one (which counts only before the first device use)."""
  startup.prepare_process(config)
  mesh = sharding.make_mesh(config.mesh)
  shardings = train_state.shardings(config, mesh)
  step, _ = steps.compile_steps(config, mesh, shardings)
  return train_state.init(config, shardings), step


def random_batch(config, seed=1):
  """A [batch, seq_len + 1] window of uniform random tokens."""
  return jax.random.randint(jax.random.key(seed), (config.train.batch_size, config.data.seq_len + 1),
                            0, config.model.vocab_size)


def median_seconds(fn, repeats):
  """Median wall time of fn() (blocked on its result) over `repeats` calls."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return sorted(times)[len(times) // 2]


def parse_flags(about: str, define=lambda fv: None):
  """The flags of a benchmark script that takes `--config FILE[:ARG]` (optional) and its
  `--config.KEY=VALUE` overrides, as `nplace` commands do: `--help` prints them; bad input is
  one line and exit code 2."""
  script = pathlib.Path(sys.argv[0]).name
  command = Command(f"python benchmarks/{script} [--config FILE[:ARG]] [flags] [--config.KEY=VALUE ...]", about,
                    define, config="optional")
  if "--help" in sys.argv[1:]:
    print(command.help())
    sys.exit(0)
  try:
    return command.parse(sys.argv[1:])[0]
  except (UsageError, ConfigError) as e:
    print(f"{script}: {e}", file=sys.stderr)
    sys.exit(2)


def serve(conn, run):
  """A worker process's side of a timing: warm up, size a round to the seconds the parent sends,
  then time rounds on request (steps per second back) until it sends None."""
  run(2)  # the first call compiles (nplace) or allocates (torch)
  start = time.perf_counter()
  run(2)
  per_step = (time.perf_counter() - start) / 2
  steps = None
  while (msg := conn.recv()) is not None:
    steps = steps or max(2, math.ceil(msg / per_step))
    start = time.perf_counter()
    run(steps)
    conn.send(steps / (time.perf_counter() - start))


def start_worker(ctx, target, *args):
  """A daemon process running `target(conn, *args)` and the parent's end of its pipe."""
  parent, child = ctx.Pipe()
  proc = ctx.Process(target=target, args=(child, *args), daemon=True)
  proc.start()
  return proc, parent
