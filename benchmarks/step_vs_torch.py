"""nplace's train step against a PyTorch GPT of the same shape and placement, side by side.

    .venv/bin/pip install -e '.[bench]'     # torch (CPU wheel: --index-url .../whl/cpu)
    .venv/bin/python benchmarks/step_vs_torch.py [--workloads tiny,12x256,deep48]
        [--placements pre,peri] [--remat default,none] [--rounds 5] [--seconds 2]

Contenders, each a warm worker process of its own: nplace (the trainer's jitted step,
nplace.train.steps, all cores), nplace on one core (one device, the process pinned to a
core), torch eager at 2 threads and at 1 thread (pinned to that core too)
(benchmarks/torch_gpt.py: AdamW + clipping, float32). Each round times every contender for
about `--seconds` on the same fixed random batch, one after the other, so they never share
the CPU; the ratios are nplace / torch (2 threads, 1 thread) and, on one core, nplace's over
torch's, per round, reported as the median over rounds (min..max). The one-core ratio is one
core's step alone; the others add how each side spreads a step over the cores. The nplace
workers run as `nplace train` does, with `train.reuse_host_memory` (glibc keeps freed
memory); torch keeps glibc's defaults (its step was no faster with the same settings).
Model FLOP/s = tokens/s x (6N + 12LTd) (`nplace info`), as a share of a float32 matmul peak
measured in the all-cores nplace worker in the same run.
"""
import argparse
import importlib.util
import multiprocessing
import os
import statistics

import _harness
from nplace.errors import ConfigError

CONTENDERS = {"nplace": None, "torch 2 thr": 2, "torch 1 thr": 1}


def _one_core():
  """Pins this process to its first allowed core (before any thread starts)."""
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _nplace_worker(conn, workload, placement, remat, one_core=False):
  if one_core:
    _one_core()
  import jax
  import jax.numpy as jnp

  from nplace.model.size import model_info
  config = _harness.workload_config(workload, placement, remat=remat)
  if one_core:
    config.train.cpu_devices = 1
  state, step = _harness.compiled_step(config)
  batch = _harness.random_batch(config)
  holder = {"state": state}

  def run(n):
    for _ in range(n):
      holder["state"], metrics = step(holder["state"], batch)
    jax.block_until_ready(metrics)

  def peak():
    a = jnp.ones((2048, 2048), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    jax.block_until_ready(matmul(a))
    return 2 * 2048 ** 3 / _harness.median_seconds(lambda: matmul(a), 7)

  conn.send({"flops_per_token": model_info(config)["flops_per_token"], "peak": None if one_core else peak(),
             "remat": config.model.remat, "devices": jax.device_count()})
  _harness.serve(conn, run)


def _torch_worker(conn, threads, model_cfg, optim_cfg, batch_shape):
  if threads == 1:
    _one_core()
  import torch

  import torch_gpt
  torch.set_num_threads(threads)
  _, step = torch_gpt.make_step(model_cfg, optim_cfg)
  batch = torch.randint(0, model_cfg["vocab_size"], batch_shape, generator=torch.Generator().manual_seed(1))

  def run(n):
    for _ in range(n):
      step(batch)

  conn.send({})
  _harness.serve(conn, run)



def measure(workload, placement, remat, rounds, seconds):
  """Median tokens/s of each contender and the per-round ratios nplace / each torch."""
  config = _harness.workload_config(workload, placement, remat=remat)
  tokens = config.train.batch_size * config.data.seq_len
  ctx = multiprocessing.get_context("spawn")
  args = (config.model.to_dict(), config.optim.to_dict(), (config.train.batch_size, config.data.seq_len + 1))
  workers = {"nplace": _harness.start_worker(ctx, _nplace_worker, workload, placement, remat),
             "nplace 1 core": _harness.start_worker(ctx, _nplace_worker, workload, placement, remat, True)}
  workers.update({name: _harness.start_worker(ctx, _torch_worker, threads, *args)
                  for name, threads in CONTENDERS.items() if threads})
  info = {name: conn.recv() for name, (_, conn) in workers.items()}["nplace"]
  rates = {name: [] for name in workers}
  for _ in range(rounds):
    for name, (_, conn) in workers.items():
      conn.send(seconds)
      rates[name].append(conn.recv() * tokens)
  for proc, conn in workers.values():
    conn.send(None)
    proc.join()
  ratios = {name: [a / b for a, b in zip(rates["nplace"], r)] for name, r in rates.items() if name.startswith("torch")}
  ratios["1 core"] = [a / b for a, b in zip(rates["nplace 1 core"], rates["torch 1 thr"])]
  return info, {name: statistics.median(r) for name, r in rates.items()}, ratios


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workloads", default=",".join(_harness.WORKLOADS))
  parser.add_argument("--placements", default="pre,peri")
  parser.add_argument("--remat", default="default", help="comma list: default (the preset's) | none | full | ...")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=2.0, help="per contender per round")
  args = parser.parse_args()
  runs = [(w, p, None if r == "default" else r) for w in args.workloads.split(",")
          for p in args.placements.split(",") for r in args.remat.split(",")]
  for workload, placement, remat in runs:  # a bad value fails here, before any worker compiles
    try:
      _harness.workload_config(workload, placement, remat=remat)
    except (ValueError, ConfigError) as e:
      parser.error(str(e))
  if importlib.util.find_spec("torch") is None:
    parser.exit(2, "step_vs_torch: the baseline needs torch: .venv/bin/pip install torch "
                   "--index-url https://download.pytorch.org/whl/cpu\n")
  print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.rounds} rounds of ~{args.seconds:g} s each")
  print("| workload | placement | remat | nplace devices | nplace tok/s | torch 2 thr | torch 1 thr | nplace / torch 2 thr "
        "(median, min..max) | nplace / torch 1 thr | nplace 1 core | 1 core: nplace / torch | nplace GFLOP/s | % of peak |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for workload, placement, remat in runs:
    info, rate, ratios = measure(workload, placement, remat, args.rounds, args.seconds)
    flops = rate["nplace"] * info["flops_per_token"]
    spread = lambda r: f"{statistics.median(r):.2f} ({min(r):.2f}..{max(r):.2f})"
    print(f"| {workload} | {placement} | {info['remat']} | {info['devices']} | {rate['nplace']:,.0f} | "
          f"{rate['torch 2 thr']:,.0f} | {rate['torch 1 thr']:,.0f} | **{spread(ratios['torch 2 thr'])}** | "
          f"{spread(ratios['torch 1 thr'])} | {rate['nplace 1 core']:,.0f} | {spread(ratios['1 core'])} | "
          f"{flops / 1e9:.0f} | {100 * flops / info['peak']:.0f}% of {info['peak'] / 1e9:.0f} |", flush=True)
  print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
