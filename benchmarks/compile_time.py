"""Compile time of the train step at 12, 24 and 48 layers, and of the probe suite.

    .venv/bin/python benchmarks/compile_time.py [--config experiments/deep48.py:pre]
        [--layers 12,24,48] [--config.KEY=VALUE ...]

Each depth is the config with `model.n_layer` replaced; the step is the trainer's own
(nplace.train.steps, lowered on the state's shapes, nothing run) and the suite
nplace.probes.suite's jit, both timed from trace to executable. The layers are scanned,
so the time should stay nearly flat with depth (target: 48 layers <= 1.5x 12 layers).
"""
import copy
import time

import jax
from absl import flags

from _harness import compiled_step, parse_flags, random_batch
from nplace.config import experiment, validate
from nplace.probes import inputs, suite


def _seconds(lower):
  start = time.perf_counter()
  lower().compile()
  return time.perf_counter() - start


def compile_times(config):
  """(train step, probe suite) compile seconds for `config`."""
  state, step = compiled_step(config)
  step_s = _seconds(lambda: step.lower(state, random_batch(config)))
  probe_batch, key = inputs.probe_batch(config, held_out=True), inputs.probe_key(config)
  mesh = state["step"].sharding.mesh  # the suite as the trainer's probe hook compiles it
  suite_s = _seconds(lambda: suite.lower(config, state["params"], probe_batch, key, mesh))
  return step_s, suite_s


def main():
  fv = parse_flags(__doc__, lambda f: flags.DEFINE_string("layers", "12,24,48", "depths", flag_values=f))
  base = fv.config if fv.config is not None else experiment("deep48", "pre")
  print(f"{base.model.placement}, d_model {base.model.d_model}, remat {base.model.remat}, "
        f"batch {base.train.batch_size}x{base.data.seq_len}; {jax.devices()[0].device_kind}")
  print("| layers | train step compile s | probe suite compile s |\n|---|---|---|")
  first = None
  # The first depth (2, discarded) warms up the compiler; a repeated shape would hit jax's cache.
  for i, n_layer in enumerate([2, *map(int, fv.layers.split(","))]):
    config = copy.deepcopy(base)
    config.model.n_layer = n_layer
    validate(config)
    step_s, suite_s = compile_times(config)
    if not i:
      continue
    first = first or (step_s, suite_s)
    print(f"| {n_layer} | {step_s:.1f} ({step_s / first[0]:.2f}x) | {suite_s:.1f} ({suite_s / first[1]:.2f}x) |",
          flush=True)


if __name__ == "__main__":
  main()
