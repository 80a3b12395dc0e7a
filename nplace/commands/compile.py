"""Compiles the real train step (and the probe suite, when probe.every > 0) ahead of time for a TPU
slice's abstract devices (libtpu, no TPU needed: pip install 'nplace[aot]') and reports per-chip
memory against the chip's HBM, and a roofline estimate of step time and MFU. Exit code 3, with
one line naming what to change, when the run does not fit."""
import json
import os
import re
import sys

import jax
from absl import flags

from nplace.commands.flags import Command
from nplace.errors import UsageError
from nplace.runtime import chips
from nplace.train.fit import GiB, DoesNotFit, check


def _define(fv):
  flags.DEFINE_string("topology", None, "TPU slice: libtpu name (v5e:4x4) or Cloud type (v5litepod-16) (required)",
                      flag_values=fv)
  flags.DEFINE_integer("batch_per_chip", 8, "sequences per chip per step (sets train.batch_size); "
                       "also spelled --batch-per-chip", flag_values=fv)
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
  lines.append(f"roofline: {r['step_s'] * 1e3:.0f} ms/step, {r['tokens_per_sec']:,.0f} tokens/s, "
               f"MFU {r['mfu']:.0%} (model FLOPs {r['model_flops_per_chip']:.3g}/chip/step)")
  lines.append(f"fits: {str(r['fits']).lower()}")
  return "\n".join(lines)


def main(argv):
  # the flag is spelled with dashes, as the other tools' (absl wants underscores)
  argv = [re.sub(r"^--batch-per-chip", "--batch_per_chip", arg) for arg in argv]
  fv, _ = COMMAND.parse(argv)
  if not fv.topology:
    raise UsageError("--topology is required (e.g. v5e:4x4 or v5litepod-16)")
  try:
    chips.resolve(fv.topology)
  except ValueError as e:
    raise UsageError(str(e)) from None
  if fv.batch_per_chip < 1 or fv.batch_per_chip % fv.config.train.grad_accum:
    raise UsageError(f"--batch-per-chip={fv.batch_per_chip}: must be positive and divisible by "
                     f"train.grad_accum={fv.config.train.grad_accum}")
  try:
    import libtpu  # noqa: F401  (optional: the `aot` extra; the abstract TPU devices come from it)
  except ImportError:
    raise UsageError("needs libtpu: pip install 'nplace[aot]'") from None
  # Compiling needs no TPU: stay off any local one (a TPU VM may be training), and let several
  # compiles load libtpu at once (it otherwise holds a machine-wide lock file).
  jax.config.update("jax_platforms", "cpu")
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  try:
    report = check(fv.config, fv.topology, fv.batch_per_chip, trials=fv.trials)
  except DoesNotFit as e:
    print(e, file=sys.stderr)
    sys.exit(3)
  print(json.dumps(report) if fv.json else _text(report))
