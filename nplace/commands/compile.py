"""Compiles the real train step (and the probe suite, when probe.every > 0) ahead of time for a TPU
slice's abstract devices (libtpu, no TPU needed: pip install 'nplace[aot]') and reports per-chip
memory against the chip's HBM, and a roofline bound on step time (nothing runs: no time is
measured), with the MFU where traffic between chips bounds it. It prints each stage as it starts
(on stderr with --json); libtpu's complaints about the TPU it does not need are dropped. Exit
code 3, with one line naming what to change, when the run does not fit."""
import functools
import json
import sys

import jax
from absl import flags

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.logs.progress import stage
from nplace.runtime import chips
from nplace.train.fit import GiB, DoesNotFit, check


def _define(fv):
  flags.DEFINE_string("topology", None, "TPU slice: libtpu name (v5e:4x4) or Cloud type (v5litepod-16) (required)",
                      flag_values=fv)
  # spelled with dashes, as the launcher's and the docs' (absl takes the name as written)
  flags.DEFINE_integer("batch-per-chip", 8, "sequences per chip per step (sets train.batch_size)", flag_values=fv)
  flags.DEFINE_integer("trials", None, "check a cell of this many runs trained as one program (nplace sweep "
                       "--batch): the per-chip memory of its stacked states", lower_bound=2, flag_values=fv)
  flags.DEFINE_bool("json", False, "print JSON", flag_values=fv)


COMMAND = Command("nplace compile --config FILE[:ARG] --topology NAME [--batch-per-chip N] [--trials K] [--json]",
                  __doc__, _define)


def _text(r: dict) -> str:
  gib = lambda b: f"{b / GiB:.2f} GiB"
  cell = f", a cell of {r['trials']} runs" if r["trials"] > 1 else ""
  lines = [f"{r['cloud_name']} ({r['topology']}, {r['chips']} chips){cell}, mesh {r['mesh']}, "
           f"{r['batch_per_chip']} x {r['seq_len']} tokens per chip, {r['dtype']}, remat {r['remat']}",
           f"train step per chip: peak {gib(r['bytes']['peak'])} of {gib(r['hbm_bytes'])} "
           f"(arguments {gib(r['bytes']['arguments'])}, outputs {gib(r['bytes']['outputs'])}, "
           f"temporaries {gib(r['bytes']['temporaries'])})"]
  lines.append(f"probe suite per chip: peak {gib(r['probe_bytes']['peak'])}" if r["probe_bytes"] else
               "probe suite: not compiled (probe.every=0; --config.probe.every=N checks it too)")
  lines.append(_roofline(r))
  lines.append(f"fits: {str(r['fits']).lower()}")
  return "\n".join(lines)


def _roofline(r: dict) -> str:
  """The roofline as the bound it is: nothing ran, so no time was measured. Compute-bound, its
  MFU is 1 / remat's recompute by construction (a cell on a trial-only mesh has no traffic):
  printed only where traffic bounds the step, the one case it says something."""
  bound = (f"traffic over ICI bounds it: MFU at most {r['mfu']:.0%}" if r["comm_s"] > r["compute_s"]
           else "compute-bound at the chip's peak FLOP/s")
  return (f"roofline (a bound, not measured): at least {r['step_s'] * 1e3:.3g} ms/step, at most "
          f"{r['tokens_per_sec']:,.0f} tokens/s; {bound} (model FLOPs {r['model_flops_per_chip']:.3g}/chip/step)")


def main(argv):
  fv, _ = COMMAND.parse(argv)
  batch_per_chip = fv["batch-per-chip"].value
  if not fv.topology:
    raise UsageError("--topology is required (e.g. v5e:4x4 or v5litepod-16)")
  try:
    chips.resolve(fv.topology)
  except ValueError as e:
    raise UsageError(str(e)) from None
  if batch_per_chip < 1 or batch_per_chip % fv.config.train.grad_accum:
    raise UsageError(f"--batch-per-chip={batch_per_chip}: must be positive and divisible by "
                     f"train.grad_accum={fv.config.train.grad_accum}")
  try:
    import libtpu  # noqa: F401  (optional: the `aot` extra; the abstract TPU devices come from it)
  except ImportError:
    raise UsageError("needs libtpu: pip install 'nplace[aot]'") from None
  # Compiling needs no TPU: stay off any local one (a TPU VM may be training).
  jax.config.update("jax_platforms", "cpu")
  # the stages on stdout, as a run's progress, unless it holds the JSON answer
  say = functools.partial(stage, stream=sys.stderr if fv.json else None)
  try:
    report = check(fv.config, fv.topology, batch_per_chip, trials=fv.trials, say=say)
  except DoesNotFit as e:
    print(e, file=sys.stderr)
    sys.exit(3)
  print(json.dumps(report) if fv.json else _text(report))
