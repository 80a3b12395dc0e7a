"""Does a run fit a TPU slice (`nplace compile`)? The real train step (and the probe suite, when
probe.every > 0) compiled ahead of time for the slice's abstract devices (libtpu, no TPU
needed: the `aot` extra) on abstract inputs: per-chip memory against the chip's HBM, and a
roofline estimate of step time and MFU.
"""
import copy
import re

import jax

from nplace.model.size import model_info
from nplace.probes import suite
from nplace.runtime import chips, sharding
from nplace.train import state as train_state, steps

GiB = chips.GiB
REMAT_RECOMPUTE = {"full": 4 / 3, "dots": 1.0, "dots_no_batch": 1.0, "none": 1.0}
_EXHAUSTED = re.compile(r"([\d.]+)([GMK])\b.*?exceeds .*?HBM.*?\(([\d.]+)([GMK])\)")


class DoesNotFit(Exception):
  """The train step (or the probe suite) needs more memory per chip than the chip has."""

  def __init__(self, needs: float, has: float, hints: list[str]):
    super().__init__(f"does not fit: needs {needs / GiB:.2f} GiB of {has / GiB:.2f} GiB per chip; "
                     f"try {' or '.join(hints)}")


def _abstract(tree, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def chip_bytes(compiled) -> dict:
  """Bytes per chip. `peak` is what the chip must hold: arguments, outputs not aliased to them
  (the donated state) and the temporaries, which are one arena. (XLA's peak_memory_in_bytes
  came out below the temporaries on TPU: 7.7 GB against 10.4 GB for 1.5B in float32.)"""
  m = compiled.memory_analysis()
  peak = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
  return {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
          "aliased": m.alias_size_in_bytes, "temporaries": m.temp_size_in_bytes, "peak": peak}


def _compile(lowered, hints: list[str]):
  """The compiled executable; DoesNotFit when the compiler runs out of HBM."""
  try:
    return lowered.compile()
  except jax.errors.JaxRuntimeError as e:
    found = _EXHAUSTED.search(str(e))
    if "RESOURCE_EXHAUSTED" not in str(e) or not found:
      raise
    unit = {"G": GiB, "M": 1 << 20, "K": 1 << 10}  # XLA's G is GiB: a v5e reports 15.75G usable
    raise DoesNotFit(float(found[1]) * unit[found[2]], float(found[3]) * unit[found[4]], hints) from None


def _hints(config, batch_per_chip: int, topo) -> list[str]:
  hints = []
  if batch_per_chip > 1:
    hints.append(f"--batch-per-chip {batch_per_chip // 2}")
  if config.model.remat != "full":
    hints.append("--config.model.remat=full")
  if config.model.dtype != "bfloat16":
    hints.append("--config.model.dtype=bfloat16")
  if config.model.loss_chunks == 1 and config.data.seq_len % 8 == 0:  # the logits: 124M's peak 3.27 -> 1.22 GiB
    hints.append("--config.model.loss_chunks=8")
  if config.mesh.fsdp != -1:
    hints.append("--config.mesh.fsdp=-1 --config.mesh.data=1")
  bigger = [n for n in topo.chip.shapes if n > topo.chips]
  if bigger:
    hints.append(f"a larger slice ({chips.Topology(topo.chip, '', bigger[0]).cloud_name})")
  return hints


def roofline(config, topo, mesh, trials: int = 1) -> dict:
  """Step time as the slower of compute and FSDP/data-parallel traffic, assumed overlapped.

  FLOPs come from the model's formula (6N + 12 L T d per token, nplace info): XLA's cost
  analysis counts a scanned layer once. Compute adds the forward recomputed by remat; traffic
  is three passes of float32 parameters over the fsdp axis (all-gather forward and again for
  the recomputed backward, reduce-scatter of gradients) and an all-reduce over `data`. A cell of
  `trials` runs does that many runs' FLOPs, and each chip moves the traffic of the runs it holds."""
  chip = topo.chip
  tokens = trials * config.train.batch_size * config.data.seq_len
  info = model_info(config)
  model_flops = info["flops_per_token"] * tokens / topo.chips
  compute_s = model_flops * REMAT_RECOMPUTE[config.model.remat] / chip.peak_flops
  param_bytes = 4 * info["params"]
  fsdp, data = mesh.shape["fsdp"], mesh.shape["data"]
  runs_per_chip = trials // mesh.shape.get(sharding.TRIAL, 1)
  comm_bytes = runs_per_chip * (3 * param_bytes * (fsdp - 1) / fsdp + 2 * param_bytes / fsdp * (data - 1) / data)
  step_s = max(compute_s, comm_bytes / chip.ici_bandwidth)
  return {"model_flops_per_chip": model_flops, "compute_s": compute_s,
          "comm_s": comm_bytes / chip.ici_bandwidth, "step_s": step_s,
          "mfu": model_flops / (step_s * chip.peak_flops), "tokens_per_sec": tokens / step_s,
          "params": info["params"]}


def check(config, topology: str, batch_per_chip: int, probes: bool = True, trials: int | None = None,
          say=lambda text: None) -> dict:
  """The report for `config` on `topology` at `batch_per_chip`; raises DoesNotFit. The probe
  suite is compiled too when the run would use it (`probe.every` > 0). With `trials`, a cell of
  that many runs (every hyperparameter an array), each run on the chips the trial axis gives
  it with `batch_per_chip` sequences per chip. `say(text)`: each stage, before it (a compile
  takes up to minutes)."""
  topo = chips.resolve(topology)
  # a mesh the slice's chips cannot tile is refused before libtpu loads and the stages print
  ways = sharding.trial_ways(config.mesh, topo.chips, trials or 1)
  say(f"loading libtpu for {topo.cloud_name}'s abstract devices ({topo.name}, {topo.chips} chips)...")
  config = copy.deepcopy(config)
  devices = topo.devices()
  say(f"compiling the train step{f' of a cell of {trials} runs' if trials else ''} for {topo.cloud_name}...")
  config.train.batch_size = batch_per_chip * topo.chips // ways
  mesh = sharding.make_mesh(config.mesh, devices, trials)
  state_shardings = train_state.shardings(config, mesh, trials)
  abstract = train_state.abstract(config)
  if trials:
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((trials, *x.shape), x.dtype), abstract)
  train_step, _ = steps.compile_steps(config, mesh, state_shardings, steps.HYPERPARAMETERS if trials else None)
  state = _abstract(abstract, state_shardings)
  shape = (config.train.batch_size, config.data.seq_len + 1)
  batch = jax.ShapeDtypeStruct((trials, *shape) if trials else shape, "int32",
                               sharding=sharding.batch_sharding(mesh, config.mesh, trials=bool(trials)))
  hints = _hints(config, batch_per_chip, topo)
  if trials:
    per_run = jax.ShapeDtypeStruct((trials,), "float32", sharding=sharding.trial_sharding(mesh))
    active = jax.ShapeDtypeStruct((trials,), "bool", sharding=sharding.trial_sharding(mesh))
    lowered = train_step.lower(state, batch, {key: per_run for key in steps.HYPERPARAMETERS}, active)
  else:
    lowered = train_step.lower(state, batch)
  compiled = _compile(lowered, hints)
  memory = chip_bytes(compiled)
  if memory["peak"] > topo.chip.hbm_bytes:
    raise DoesNotFit(memory["peak"], topo.chip.hbm_bytes, hints)
  cost = compiled.cost_analysis()
  report = {
      "topology": topo.name, "cloud_name": topo.cloud_name, "chips": topo.chips,
      "mesh": dict(mesh.shape), "batch_per_chip": batch_per_chip, "trials": trials or 1,
      "global_batch": config.train.batch_size, "seq_len": config.data.seq_len,
      "dtype": config.model.dtype, "remat": config.model.remat, "placement": config.model.placement,
      "hbm_bytes": topo.chip.hbm_bytes, "bytes": memory, "fits": True,
      "xla_flops_per_chip": (cost or {}).get("flops"),  # the scanned layer counted once
      **roofline(config, topo, mesh, trials or 1), "probe_bytes": None,
  }
  if probes and config.probe.every:
    hints = [f"--config.probe.batch_size={max(1, config.probe.batch_size // 2)}",
             "--config.probe.power_iters=0"]
    if trials:  # a cell probes one run at a time, its slice laid out as a lone run's
      mesh = sharding.make_mesh(config.mesh, devices)
      state = _abstract(train_state.abstract(config), train_state.shardings(config, mesh))
    say(f"compiling the probe suite for {topo.cloud_name}...")
    report["probe_bytes"] = _probe_memory(config, mesh, state["params"], hints)
    if report["probe_bytes"]["peak"] > topo.chip.hbm_bytes:
      raise DoesNotFit(report["probe_bytes"]["peak"], topo.chip.hbm_bytes, hints)
  return report


def _probe_memory(config, mesh, params, hints) -> dict:
  """The probe suite as `nplace train` runs it: a replicated held-out batch."""
  rep = sharding.replicated(mesh)
  batch = jax.ShapeDtypeStruct((config.probe.batch_size, config.data.seq_len + 1), "int32", sharding=rep)
  key = jax.ShapeDtypeStruct((), jax.eval_shape(jax.random.key, 0).dtype, sharding=rep)
  return chip_bytes(_compile(suite.lower(config, params, batch, key, mesh), hints))

