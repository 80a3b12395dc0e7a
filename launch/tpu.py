"""Run nplace on a Cloud TPU slice from a machine that has gcloud (and, for `up` and
`sweep`, nplace itself, for the compile check and the trial list). Python stdlib only.

  python launch/tpu.py up --project P --zone Z --name peri15b --accelerator v5litepod-16 \\
      --config experiments/gpt2.py:1.5b,peri --workdir gs://BUCKET/runs/peri15b \\
      [--spot] [--queued] [--data gs://BUCKET/nplace-data [--prepare]] [--dry-run] \\
      [-- --config.model.dtype=bfloat16 ...]

Commands: create, setup, stage-data, train, logs, delete, up (all of them in order, with
`nplace compile` first and auto-resume after preemption), sweep (one slice per trial of
`nplace sweep --list`). --dry-run prints every command, one per line, and runs none
(lines starting with # say what happens between them). Exit codes: 2 bad input, 3 the run
does not fit the slice (nothing is created), 1 anything else that failed.
"""
import argparse
import concurrent.futures
import hashlib
import pathlib
import re
import shlex
import subprocess
import sys

import gcloud
from steps import (FINAL, ROOT, LaunchError, Runner, UsageError, compile_check, create, record_sweep, run_command,
                   on_slice, shipped_config, run_to_end, setup, stage_data, sweep_command, train)


def single_run(a) -> list[str]:
  return ["train", "--config", a.config, "--workdir", a.workdir, *a.overrides]


def cmd_up(r: Runner, a) -> int:
  s = a.slice
  compile_check(r, a)
  try:
    status = run_to_end(r, s, a, on_slice(a, single_run(a)), a.workdir)
  finally:
    if not a.keep:
      r.run(s.delete(), check=False)
  r.note(f"{s.name}: {status}")
  return 0


def trials(r: Runner, a) -> list[tuple[str, list[str]]]:
  """(name, nplace train args) per line of `nplace sweep --list` (run here, also in a dry run:
  it only prints) or of the --trials file."""
  if a.trials:
    text = sys.stdin.read() if a.trials == "-" else pathlib.Path(a.trials).read_text()
  else:
    argv = sweep_command(a, *a.overrides, "--list")
    print(shlex.join(argv), file=r.out, flush=True)
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
      raise LaunchError(f"nplace sweep --list failed: {done.stderr.strip()}", done.returncode)
    text = done.stdout
  out = []
  for i, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    name, tab, command = line.partition("\t")
    argv = shlex.split(command)
    if not tab or argv[:2] != ["nplace", "train"] or "--workdir" not in argv:
      raise UsageError(f"trial list line {i}: expected NAME<TAB>nplace train ... --workdir DIR, "
                       f"got {line[:80]!r}")
    out.append((name, argv[1:]))
  if not out:
    raise UsageError("the trial list is empty")
  return out


def slice_name(prefix: str, trial: str) -> str:
  """A valid TPU node id for one trial: prefix-trial, shortened with a hash when too long."""
  name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", f"{prefix}-{trial}".lower())).strip("-")
  if len(name) > 63:
    name = f"{name[:54].rstrip('-')}-{hashlib.sha1(trial.encode()).hexdigest()[:8]}"
  return name


def cmd_sweep(r: Runner, a) -> int:
  jobs = []
  for name, args in trials(r, a):
    workdir = args[args.index("--workdir") + 1]
    if not workdir.startswith("gs://"):
      raise UsageError(f"trial {name}: workdir {workdir!r} is not on gs://")
    s = gcloud.Slice(slice_name(a.name, name), a.project, a.zone, a.queued)
    if any(s == job[1] for job in jobs):
      raise UsageError(f"trial {name}: slice name {s.name} is taken by another trial")
    jobs.append((name, s, on_slice(a, args), workdir))
  compile_check(r, a)  # after the trial list: a bad one is refused before the compile's minutes

  def one(job, runner):
    name, s, args, workdir = job
    if runner is None:  # a parallel trial: its commands and output go to its own file
      with open(ROOT / "launch-logs" / f"{s.name}.log", "a") as log:
        return one(job, Runner(False, log))
    runner.note(f"trial {name} on slice {s.name}")
    try:
      return run_to_end(runner, s, a, args, workdir)
    except LaunchError as e:
      runner.note(str(e))
      return "failed"
    finally:
      runner.run(s.delete(), check=False)

  if r.dry_run or a.parallel == 1:
    results = [one(job, r) for job in jobs]
  else:
    (ROOT / "launch-logs").mkdir(exist_ok=True)
    r.note(f"{len(jobs)} trials, {a.parallel} at a time; output in launch-logs/SLICE.log")
    with concurrent.futures.ThreadPoolExecutor(a.parallel) as pool:
      results = list(pool.map(lambda job: one(job, None), jobs))
  for (name, s, _, _), status in zip(jobs, results):
    r.note(f"{name}\t{s.name}\t{status}")
  record_sweep(r, a)
  return 0 if all(st in FINAL for st in results) else 1


def cmd_train(r: Runner, a) -> int:
  status = train(r, a.slice, on_slice(a, single_run(a)), a.workdir)
  r.note(f"{a.name}: {status}")
  return 0 if status in FINAL else 1


COMMANDS = {  # name -> (what it does, the function, the option groups it takes)
    "create": ("create the slice (queued: and wait until ACTIVE)",
               lambda r, a: create(r, a.slice, a), {"accel", "spot"}),
    "setup": ("install this checkout's HEAD with the tpu extra on every worker",
              lambda r, a: setup(r, a.slice), set()),
    "stage-data": ("copy the prepared data from --data to every worker's disk",
                   lambda r, a: stage_data(r, a.slice, a, a.prepare),
                   {"data", "prepare", "config"}),
    "train": ("run nplace train on every worker (jax.distributed) and read its summary.json",
              cmd_train, {"accel", "batch", "run", "config"}),
    "logs": ("stream a worker's training log",
             lambda r, a: r.run(a.slice.ssh(f"tail -n 100 -F {gcloud.LOG}", worker=a.worker)),
             {"worker"}),
    "delete": ("delete the slice", lambda r, a: r.run(a.slice.delete()), set()),
    "up": ("compile check, create, setup, stage-data, train with auto-resume, delete",
           cmd_up, {"accel", "spot", "batch", "data", "prepare", "run", "config", "loop"}),
    "sweep": ("one slice per trial of an experiment's sweep (nplace sweep --list)",
              cmd_sweep, {"accel", "spot", "batch", "data", "run", "config", "loop", "sweep"}),
}


class Parser(argparse.ArgumentParser):
  def error(self, message):
    raise UsageError(message)


def parser() -> argparse.ArgumentParser:
  p = Parser(prog="launch/tpu.py", description=__doc__.split("\n\n")[0])
  sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
  for name, (doc, _, groups) in COMMANDS.items():
    c = sub.add_parser(name, help=doc, description=doc)
    c.add_argument("--project", required=True, help="Google Cloud project")
    c.add_argument("--zone", required=True, help="zone of the slice, e.g. us-west4-a")
    c.add_argument("--name", required=True,
                   help="the slice (sweep: the prefix of each trial's slice)")
    c.add_argument("--queued", action="store_true", help="a queued resource, not a plain TPU VM")
    c.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    if "accel" in groups:
      c.add_argument("--accelerator", required=True,
                     help="Cloud accelerator type, e.g. v5litepod-16")
    if "spot" in groups:
      c.add_argument("--spot", action="store_true",
                     help="Spot capacity (preemptible; auto-resumed)")
    if "batch" in groups:
      c.add_argument("--batch-per-chip", type=int, default=8,
                     help="sequences per chip: config.train.batch_size = this x chips")
    if "config" in groups:
      c.add_argument("--config", required=name != "stage-data",
                     help="FILE[:ARG], e.g. experiments/gpt2.py:1.5b,peri")
      c.add_argument("overrides", nargs="*",
                     help="after --: --config.KEY=VALUE for compile and train")
    if "data" in groups:
      c.add_argument("--data", help="gs:// copy of the prepared-data cache to stage on each worker")
    if "prepare" in groups:  # not for sweep: each trial's fresh slice would prepare it again
      c.add_argument("--prepare", action="store_true",
                     help="worker 0 prepares the data into --data first")
    if "run" in groups:
      c.add_argument("--workdir", required=True,
                     help="gs:// run directory (checkpoints, logs, summary)")
      c.add_argument("--nplace", default="nplace", help="the local nplace (compile, sweep --list)")
    if "loop" in groups:
      c.add_argument("--retries", type=int, default=3, help="reruns after preemption")
    if name == "up":
      c.add_argument("--keep", action="store_true", help="keep the slice when the run ends")
    if "sweep" in groups:
      c.add_argument("--only", help="regex: only trials whose name matches (nplace sweep --only)")
      c.add_argument("--trials",
                     help="a saved `nplace sweep --list` output (- = stdin) instead of running it")
      c.add_argument("--parallel", type=int, default=1, help="slices at a time")
    if "worker" in groups:
      c.add_argument("--worker", default="0", help="which worker's log")
  return p


def parse(argv) -> argparse.Namespace:
  a = parser().parse_args(argv)
  if not gcloud.NAME.fullmatch(a.name):
    raise UsageError(f"--name {a.name!r}: lowercase letters, digits and -, starting with a letter")
  a.slice = gcloud.Slice(a.name, a.project, a.zone, a.queued)
  if getattr(a, "accelerator", None):
    try:
      a.accel = gcloud.accelerator(a.accelerator)
    except ValueError as e:
      raise UsageError(str(e)) from None
  if getattr(a, "batch_per_chip", 1) < 1:
    raise UsageError(f"--batch-per-chip {a.batch_per_chip}: must be positive")
  for flag in ("workdir", "data"):
    value = getattr(a, flag, None)
    if value and not value.startswith("gs://"):
      raise UsageError(f"--{flag} {value!r}: must be a gs:// path "
                       f"(a slice's disks go when it does)")
  for x in getattr(a, "overrides", []):
    if not x.startswith("--config."):
      raise UsageError(f"override {x!r}: expected --config.KEY=VALUE after --")
    if a.command in ("up", "sweep") and x.startswith("--config.train.batch_size="):
      raise UsageError(f"{x}: set the batch with --batch-per-chip (compile and train both get it)")
  if (a.command == "stage-data" or getattr(a, "prepare", False)) and not a.data:
    raise UsageError("--data gs://... is required (where the prepared data is, or goes)")
  if getattr(a, "prepare", False) and not a.config:
    raise UsageError("--prepare needs --config (the data to prepare)")
  if getattr(a, "parallel", 1) < 1 or getattr(a, "retries", 0) < 0:
    raise UsageError("--parallel must be >= 1 and --retries >= 0")
  if getattr(a, "config", None):
    shipped_config(a.config)
  return a


def main(argv=None) -> int:
  return run_command("launch/tpu.py", parse, COMMANDS, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
  sys.exit(main())
