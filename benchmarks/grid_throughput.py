"""A grid's throughput: trial-tokens per second of one cell of K trials trained as one program
(`nplace sweep --batch K`) against the same trials one after another, and against PyTorch run
the way a user would run a grid on this machine: one single-thread process per core.

    .venv/bin/pip install -e '.[bench]'     # torch (CPU wheel: --index-url .../whl/cpu)
    .venv/bin/python benchmarks/grid_throughput.py [--workloads stability,12x256] [--cells 1,2,4,8,16]
        [--rounds 5] [--seconds 2] [--end-to-end STEPS]

Steady state (the steps alone). Contenders, each a warm worker process of its own, timed one
after the other within each round (so they never share the CPU), medians over rounds:
- nplace, a cell of K trials (K = 1: one trial, as `nplace train` runs it: the trials one after
  another), on the host split as the trainer splits it; the trials differ in seed and lr;
- torch: one process per core, each pinned to its core at 1 thread and training its own model
  (benchmarks/torch_gpt.py); the processes run at once and their rates add up.
Ratios per round: the cell against nplace K = 1 and against the torch processes; model FLOP/s
(trial-tokens/s x (6N + 12LTd)) as a share of a float32 matmul peak measured in the same run
(a 2048^3 product on all cores).

End to end (`--end-to-end STEPS`): the wall time of `nplace sweep` on K seeds of the workload
for STEPS steps (compile, init, evaluation and checkpoints included), at --batch K against
--batch 1, as trial-tokens per wall second.
"""
import argparse
import importlib.util
import multiprocessing
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import _harness
from nplace.errors import ConfigError


def _cell_worker(conn, workload, trials):
  import jax
  import numpy as np

  from nplace.model.size import model_info
  from nplace.runtime import startup
  from nplace.train.cell import Cell, Run
  from nplace.train.summary import Summary
  base = _harness.workload_config(workload, "pre")
  startup.prepare_process(base)  # before the first device use, as `nplace train` does
  runs = []
  for k in range(trials):
    c = base.copy_and_resolve_references()
    c.seed, c.optim.lr = k, base.optim.lr * (1 + 0.1 * k)
    runs.append(Run(str(k), c, None, summary=Summary()))
  cell = Cell(runs, jax.devices())  # one run: the trainer's own step, unstacked
  cell.compile()
  shape = (base.train.batch_size, base.data.seq_len + 1)
  rows = np.random.default_rng(1).integers(0, base.model.vocab_size, (trials, *shape) if cell.stacked else shape)
  batch = jax.device_put(rows, cell.batch_sharding)
  holder = {"state": cell.init()}

  def run(n):
    for _ in range(n):
      holder["state"], metrics = cell.step(holder["state"], batch)
    jax.block_until_ready(metrics)

  conn.send({"flops_per_token": model_info(base)["flops_per_token"], "mesh": dict(cell.mesh.shape),
             "tokens": trials * base.train.batch_size * base.data.seq_len})
  _harness.serve(conn, run)


def _peak_worker(conn):
  """The float32 matmul peak of the whole CPU: one device, every core on its product."""
  import jax
  import jax.numpy as jnp
  a = jnp.ones((2048, 2048), jnp.float32)
  matmul = jax.jit(lambda x: x @ x)
  jax.block_until_ready(matmul(a))
  conn.send(2 * 2048 ** 3 / _harness.median_seconds(lambda: matmul(a), 9))


def _torch_worker(conn, core, model_cfg, optim_cfg, batch_shape):
  os.sched_setaffinity(0, {core})
  import torch

  import torch_gpt
  torch.set_num_threads(1)
  _, step = torch_gpt.make_step(model_cfg, optim_cfg, seed=core)
  batch = torch.randint(0, model_cfg["vocab_size"], batch_shape, generator=torch.Generator().manual_seed(core))
  conn.send({})

  def run(n):
    for _ in range(n):
      step(batch)

  _harness.serve(conn, run)



def steady_state(workload, cells, rounds, seconds, with_torch):
  """Medians of each contender's trial-tokens/s, the per-round ratios, the matmul peak."""
  ctx = multiprocessing.get_context("spawn")
  proc, conn = _harness.start_worker(ctx, _peak_worker)
  peak = conn.recv()
  proc.join()
  config = _harness.workload_config(workload, "pre")
  cell_workers = {k: _harness.start_worker(ctx, _cell_worker, workload, k) for k in cells}
  info = {k: conn.recv() for k, (_, conn) in cell_workers.items()}
  torch_workers = []
  if with_torch:
    args = (config.model.to_dict(), config.optim.to_dict(), (config.train.batch_size, config.data.seq_len + 1))
    torch_workers = [_harness.start_worker(ctx, _torch_worker, core, *args) for core in sorted(os.sched_getaffinity(0))]
    for _, conn in torch_workers:
      conn.recv()
  tokens_per_step = config.train.batch_size * config.data.seq_len
  rates = {k: [] for k in cells} | ({"torch": []} if with_torch else {})
  for _ in range(rounds):
    for k, (_, conn) in cell_workers.items():
      conn.send(seconds)
      rates[k].append(conn.recv() * info[k]["tokens"])
    if with_torch:  # the processes at once, one per core, as a grid would run them
      for _, conn in torch_workers:
        conn.send(seconds)
      rates["torch"].append(sum(conn.recv() for _, conn in torch_workers) * tokens_per_step)
  for proc, conn in [*cell_workers.values(), *torch_workers]:
    conn.send(None)
    proc.join()
  baseline = cells[0]
  ratios = {k: {"alone": [a / b for a, b in zip(rates[k], rates[baseline])],
                "torch": [a / b for a, b in zip(rates[k], rates["torch"])] if with_torch else None} for k in cells}
  return info, {k: statistics.median(r) for k, r in rates.items()}, ratios, peak


GRID = '''
from nplace.config import experiment


def get_config(arg=None):
  import sys
  sys.path.insert(0, {benchmarks!r})
  import _harness
  c = _harness.workload_config({workload!r}, "pre")
  c.train.update(steps={steps}, eval_every={steps}, log_every=10)
  c.checkpoint.every = {steps}
  return c


def get_sweep(arg=None):
  return [{{"seed": s}} for s in range({trials})]
'''


def end_to_end(workload, trials, steps):
  """Trial-tokens per wall second of `nplace sweep` at --batch `trials` and at --batch 1."""
  nplace = pathlib.Path(sys.executable).parent / "nplace"
  config = _harness.workload_config(workload, "pre")
  tokens = trials * steps * config.train.batch_size * config.data.seq_len
  out = {}
  with tempfile.TemporaryDirectory() as tmp:
    grid = pathlib.Path(tmp) / "grid.py"
    grid.write_text(GRID.format(benchmarks=str(pathlib.Path(__file__).parent), workload=workload, steps=steps,
                                trials=trials))
    env = dict(os.environ, NPLACE_CACHE=str(pathlib.Path(tmp) / "cache"))
    subprocess.run([nplace, "prepare", "--config", str(grid)], env=env, check=True, capture_output=True)
    for batch in (trials, 1):
      start = time.perf_counter()
      subprocess.run([nplace, "sweep", "--config", str(grid), "--workdir", str(pathlib.Path(tmp) / f"b{batch}"),
                      "--batch", str(batch)], env=env, check=True, capture_output=True)
      out[batch] = tokens / (time.perf_counter() - start)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workloads", default="stability,12x256")
  parser.add_argument("--cells", default="1,2,4,8,16", help="comma list of K (trials per cell); the first is the baseline")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=2.0, help="per contender per round")
  parser.add_argument("--end-to-end", type=int, default=0, metavar="STEPS",
                      help="also time whole sweeps of the largest K's trials for this many steps")
  parser.add_argument("--no-torch", action="store_true", help="leave the PyTorch contender out")
  args = parser.parse_args()
  try:
    cells = [int(k) for k in args.cells.split(",")]
    assert cells and all(k >= 1 for k in cells)
  except (ValueError, AssertionError):
    parser.error(f"--cells {args.cells!r}: expected a comma list of positive integers")
  workloads = args.workloads.split(",")
  for workload in workloads:  # a bad name fails here, before any worker compiles
    try:
      _harness.workload_config(workload, "pre")
    except (ValueError, ConfigError) as e:
      parser.error(str(e))
  with_torch = not args.no_torch
  if with_torch and importlib.util.find_spec("torch") is None:
    parser.exit(2, "grid_throughput: the PyTorch baseline needs torch: .venv/bin/pip install torch "
                   "--index-url https://download.pytorch.org/whl/cpu (or --no-torch)\n")
  print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.rounds} rounds of ~{args.seconds:g} s each; "
        f"{len(os.sched_getaffinity(0))} cores")
  spread = lambda r: f"{statistics.median(r):.2f} ({min(r):.2f}..{max(r):.2f})"
  for workload in workloads:
    info, rate, ratios, peak = steady_state(workload, cells, args.rounds, args.seconds, with_torch)
    torch_rate = f"; torch, {len(os.sched_getaffinity(0))} single-thread processes: {rate['torch']:,.0f}" if with_torch else ""
    print(f"\n{workload}: trial-tokens/s{torch_rate}; matmul peak {peak / 1e9:.0f} GFLOP/s")
    print(f"| K | mesh | trial-tokens/s | vs K={cells[0]} | vs torch | model GFLOP/s | % of peak |")
    print("|---|---|---|---|---|---|---|")
    for k in cells:
      flops = rate[k] * info[k]["flops_per_token"]
      vs_torch = spread(ratios[k]["torch"]) if with_torch else "-"
      print(f"| {k} | {info[k]['mesh']} | {rate[k]:,.0f} | {spread(ratios[k]['alone'])} | {vs_torch} | "
            f"{flops / 1e9:.0f} | {100 * flops / peak:.0f}% |", flush=True)
    if args.end_to_end:
      k = max(cells)
      e2e = end_to_end(workload, k, args.end_to_end)
      print(f"end to end, {k} trials x {args.end_to_end} steps (nplace sweep, compile and eval included): "
            f"--batch {k} {e2e[k]:,.0f} trial-tokens per wall second, --batch 1 {e2e[1]:,.0f}: "
            f"{e2e[k] / e2e[1]:.2f}x", flush=True)
  print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
