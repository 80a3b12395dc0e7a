"""What the probes cost: one suite call in units of a train step, and the slowdown of a
whole training run with `probe.every=50` against probes off (a benchmark, not a test).

    .venv/bin/python benchmarks/probe_cost.py [--config experiments/tiny.py:pre] [--repeats 5]
        [--steps 200] [--pairs 3] [--config.KEY=VALUE ...]

The step is the trainer's own (nplace.train.steps) on experiments/tiny.py's config; the suite
runs on probe.batch_size held-out sequences. The run comparison calls `nplace.train.loop.train`
on the synthetic source, alternating probes off and on, and compares the median tokens/s
(compilation excluded: the suite compiles before the first step, the train step's compile
is the excluded first step).
"""
import tempfile
import time

import jax
import numpy as np
from absl import flags

from _harness import compiled_step, median_seconds, parse_flags, random_batch
from nplace.config import experiment, validate
from nplace.probes import inputs, suite
from nplace.runtime import sharding
from nplace.runtime.startup import prepare_process
from nplace.train.loop import train


def call_cost(config, repeats):
  state, step = compiled_step(config)
  batch = random_batch(config)
  mesh = state["step"].sharding.mesh
  probe_batch = jax.device_put(inputs.probe_batch(config, held_out=True), sharding.replicated(mesh))
  key = inputs.probe_key(config)
  start = time.perf_counter()
  state, _ = jax.block_until_ready(step(state, batch))
  step_compile = time.perf_counter() - start
  holder = {"state": state}

  def probes():  # as the trainer's probe hook runs it
    return suite.suite(config, holder["state"]["params"], probe_batch, key, mesh)

  start = time.perf_counter()
  jax.block_until_ready(probes())
  suite_compile = time.perf_counter() - start

  def one_step():
    holder["state"], metrics = step(holder["state"], batch)
    return metrics

  step_s = median_seconds(one_step, repeats)
  probe_s = median_seconds(probes, repeats)
  print(f"compile: train step {step_compile:.1f} s, probe suite {suite_compile:.1f} s")
  print(f"train step {step_s * 1e3:.1f} ms; probe suite {probe_s * 1e3:.1f} ms = "
        f"{probe_s / step_s:.2f} train steps (every 50 steps: +{100 * probe_s / step_s / 50:.1f}% expected)")


def run_overhead(config, steps, pairs):
  """`pairs` alternated training runs with probes off and every 50 steps; the slowdown of
  the median rates (one run's rate swings ~10% on a shared CPU as the machine drifts)."""
  rates = {0: [], 50: []}
  for _ in range(pairs):
    for every in rates:
      config.probe.every, config.train.steps = every, steps
      with tempfile.TemporaryDirectory() as workdir:
        rates[every].append(train(config, workdir).tokens_per_sec)
      print(f"training run, {steps} steps, probes every {every or 'never'}: {rates[every][-1]:,.0f} tokens/s")
  off, on = np.median(rates[0]), np.median(rates[50])
  print(f"median of {pairs} runs each: probes off {off:,.0f} tokens/s, every 50 {on:,.0f} tokens/s: "
        f"slowdown {100 * (off / on - 1):.1f}% (needs < 10%)")


def main():
  def define(fv):
    flags.DEFINE_integer("repeats", 5, "timed calls of the step and of the suite", flag_values=fv)
    flags.DEFINE_integer("steps", 200, "steps of each training run", flag_values=fv)
    flags.DEFINE_integer("pairs", 3, "alternated training runs with probes off and on", flag_values=fv)

  fv = parse_flags(__doc__, define)
  config = fv.config if fv.config is not None else experiment("tiny", "pre")
  config.train.eval_every = config.checkpoint.every = fv.steps  # time steps and probes only
  validate(config)
  prepare_process(config)  # before the first device use, as `nplace train` does
  p = config.probe
  print(f"device: {jax.devices()[0].device_kind} x{jax.device_count()}; {config.model.placement}, "
        f"train batch {config.train.batch_size}x{config.data.seq_len}, probe batch {p.batch_size}, "
        f"hutchinson_probes {p.hutchinson_probes}, power_iters {p.power_iters}, remat {config.model.remat}")
  call_cost(config, fv.repeats)
  run_overhead(config, fv.steps, fv.pairs)


if __name__ == "__main__":
  main()
