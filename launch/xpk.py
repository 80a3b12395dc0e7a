"""Run an experiment grid on a GKE cluster you already run, through xpk: one workload per trial
of `nplace sweep --list`, queued by the cluster's Kueue. From a machine with xpk, gcloud and
kubectl (and, for `sweep`, nplace itself: the compile check and the trial list). Python stdlib
only.

  python launch/xpk.py sweep --cluster CLUSTER --project P --zone Z --name stab \\
      --tpu-type v5litepod-16 --docker-image IMAGE \\
      --config experiments/stability.py:paper --workdir gs://BUCKET/sweeps/stability \\
      [--num-slices 1] [--priority medium] [--only REGEX] [--trials FILE] [--dry-run] \\
      [-- --config.KEY=VALUE ...]
  python launch/xpk.py status ...   (the same options)
  python launch/xpk.py wait ...     (the same options; --retries 3)

Commands: sweep (`nplace compile` for one slice, then `xpk workload create` for each trial that
has neither finished nor a workload), status (`xpk workload list` of the grid's workloads and
each trial's summary.json status), wait (until each workload finishes; a trial whose
summary.json says preempted is deleted and submitted again, and resumes from its bucket
workdir). IMAGE must hold nplace with the tpu extra. Workload names are NAME-TRIAL made
Kubernetes-safe, at most 40 characters (xpk's limit). --dry-run prints every command, one per
line, and runs none (lines starting with # say what happens between them). Exit codes: 2 bad
input, 3 the run does not fit the slice (nothing is submitted), 1 anything else that failed.
"""
import argparse
import hashlib
import shlex
import sys

import gcloud
from steps import (FINAL, Runner, UsageError, clear_summary, compile_check, on_slice, record_sweep, run_command,
                   summary_status)
from tpu import Parser, slice_name, trials  # the trial list and the names of launch/tpu.py sweep

NAME_MAX = 40  # xpk's --workload: [a-z]([-a-z0-9]*[a-z0-9])?, at most 40 characters


def workload_name(prefix: str, trial: str) -> str:
  """A valid, per-trial workload name: launch/tpu.py's slice name, shortened with the same hash
  when longer than xpk allows."""
  name = slice_name(prefix, trial)
  if len(name) > NAME_MAX:
    name = f"{name[:NAME_MAX - 9].rstrip('-')}-{hashlib.sha1(trial.encode()).hexdigest()[:8]}"
  return name


def grid(r: Runner, a) -> list[tuple[str, str, list[str], str]]:
  """(trial, workload, nplace argv, workdir) per trial of the grid, in its order."""
  out = []
  for name, args in trials(r, a):
    workdir = args[args.index("--workdir") + 1]
    if not workdir.startswith("gs://"):
      raise UsageError(f"trial {name}: workdir {workdir!r} is not on gs:// (a workload's disk goes "
                       "with its pods)")
    workload = workload_name(a.name, name)
    if any(workload == job[1] for job in out):
      raise UsageError(f"trial {name}: workload name {workload} is taken by another trial")
    out.append((name, workload, on_slice(a, args, chips=a.accel.chips * a.num_slices), workdir))
  return out


def xpk(a, verb: str, *argv: str) -> list[str]:
  return ["xpk", "workload", verb, f"--cluster={a.cluster}", f"--project={a.project}", f"--zone={a.zone}",
          *argv]


def container_command(a, args: list[str]) -> str:
  """What each pod of a workload runs: `nplace train ...` (after copying the prepared data
  from --data to the pod's disk, when given)."""
  train = shlex.join(["nplace", *args])
  if not a.data:
    return train
  return (f"mkdir -p {gcloud.CACHE} && gcloud storage rsync --recursive {shlex.quote(a.data)} "
          f"{gcloud.CACHE} && {train}")


def submit(r: Runner, a, workload: str, args: list[str], workdir: str):
  clear_summary(r, workdir)
  priority = [f"--priority={a.priority}"] if a.priority else []
  r.run(xpk(a, "create", f"--workload={workload}", f"--tpu-type={a.accel.type}",
            f"--num-slices={a.num_slices}", f"--docker-image={a.docker_image}", *priority,
            f"--command={container_command(a, args)}"))


def listed(r: Runner, a) -> set[str]:
  """The words of `xpk workload list` for the grid's prefix (the workloads that exist are
  among them); empty in a dry run."""
  return set((r.query(xpk(a, "list", f"--filter-by-job={a.name}-"), "") or "").split())


def cmd_sweep(r: Runner, a) -> int:
  jobs = grid(r, a)  # a bad trial list is refused before the compile's minutes
  compile_check(r, a)
  existing = listed(r, a)
  for name, workload, args, workdir in jobs:
    if workload in existing:
      r.note(f"{name}: workload {workload} exists: not submitted (`wait` resubmits it if it ends preempted)")
      continue
    status = summary_status(r, workdir, dry_result=None)
    if status in FINAL:
      r.note(f"{name}: {status} already ({workdir}/summary.json): not submitted")
      continue
    r.note(f"trial {name} as workload {workload}")
    submit(r, a, workload, args, workdir)
  r.note(f"{len(jobs)} trials; `python launch/xpk.py wait` (same options) follows them and "
         "resubmits the preempted")
  return 0


def cmd_status(r: Runner, a) -> int:
  jobs = grid(r, a)
  r.run(xpk(a, "list", f"--filter-by-job={a.name}-"), check=False)
  for name, workload, _, workdir in jobs:
    r.note(f"{name}\t{workload}\t{summary_status(r, workdir, dry_result=None) or 'no summary.json yet'}")
  return 0


def cmd_wait(r: Runner, a) -> int:
  """Each trial in turn: until its workload finishes, then its summary.json; a preempted run
  is submitted again (at most --retries times), which resumes from its newest checkpoint."""
  results, jobs = [], grid(r, a)
  r.note(f"a trial whose summary.json then says preempted is deleted and submitted again, at most "
         f"{a.retries} more times")
  for name, workload, args, workdir in jobs:
    for attempt in range(a.retries + 1):
      code = r.run(xpk(a, "list", f"--wait-for-job-completion={workload}"), check=False)
      status = summary_status(r, workdir)
      if status != "preempted" or attempt == a.retries:
        break
      r.note(f"{name}: preempted; submitting {workload} again (attempt {attempt + 2} of {a.retries + 1})")
      r.run(xpk(a, "delete", f"--workload={workload}"))
      submit(r, a, workload, args, workdir)
    if status is None:
      status = f"failed (xpk exit code {code}, no summary.json: see the workload's logs)"
    results.append((name, workload, status))
  for name, workload, status in results:
    r.note(f"{name}\t{workload}\t{status}")
  record_sweep(r, a, chips=a.accel.chips * a.num_slices)
  return 0 if all(status in FINAL for _, _, status in results) else 1


COMMANDS = {  # name -> (what it does, the function)
    "sweep": ("compile check, then one xpk workload per trial of the grid not finished or submitted yet",
              cmd_sweep),
    "status": ("the grid's workloads (xpk workload list) and each trial's summary.json status", cmd_status),
    "wait": ("wait for every trial's workload; submit the preempted again (they resume)", cmd_wait),
}


def parser() -> argparse.ArgumentParser:
  p = Parser(prog="launch/xpk.py", description=__doc__.split("\n\n")[0])
  sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
  for name, (doc, _) in COMMANDS.items():
    c = sub.add_parser(name, help=doc, description=doc)
    c.add_argument("--cluster", required=True, help="the GKE cluster (made by xpk cluster create, or yours)")
    c.add_argument("--project", required=True, help="Google Cloud project")
    c.add_argument("--zone", required=True, help="the cluster's zone, e.g. us-west4-a")
    c.add_argument("--name", required=True, help="prefix of every trial's workload name")
    c.add_argument("--tpu-type", required=True, help="one slice's TPU type, e.g. v5litepod-16")
    c.add_argument("--num-slices", type=int, default=1,
                   help="slices per workload (xpk --num-slices; one nplace mesh over all their chips)")
    c.add_argument("--docker-image", required=name != "status",
                   help="image with nplace[tpu] installed, run by every pod")
    c.add_argument("--priority", help="Kueue priority of the workloads (xpk --priority: very-low .. very-high)")
    c.add_argument("--data", help="gs:// copy of the prepared-data cache, copied to each pod's disk first")
    c.add_argument("--batch-per-chip", type=int, default=8,
                   help="sequences per chip: config.train.batch_size = this x chips (unless a trial sets it)")
    c.add_argument("--config", required=True, help="the grid, FILE[:ARG], e.g. experiments/stability.py:paper")
    c.add_argument("--workdir", required=True, help="gs:// sweep directory (one run directory per trial)")
    c.add_argument("--only", help="regex: only trials whose name matches (nplace sweep --only)")
    c.add_argument("--trials", help="a saved `nplace sweep --list` output (- = stdin) instead of running it")
    c.add_argument("--nplace", default="nplace", help="the local nplace (compile, sweep --list)")
    if name == "wait":
      c.add_argument("--retries", type=int, default=3, help="resubmissions per trial after preemption")
    c.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    c.add_argument("overrides", nargs="*", help="after --: --config.KEY=VALUE for compile and every trial")
  return p


def parse(argv) -> argparse.Namespace:
  a = parser().parse_args(argv)
  if not gcloud.NAME.fullmatch(a.name) or len(a.name) > NAME_MAX - 9:
    raise UsageError(f"--name {a.name!r}: lowercase letters, digits and -, starting with a letter, "
                     f"at most {NAME_MAX - 9} characters")
  try:
    a.accel = gcloud.accelerator(a.tpu_type)
  except ValueError as e:
    raise UsageError(str(e)) from None
  for flag in ("workdir", "data"):
    value = getattr(a, flag)
    if value and not value.startswith("gs://"):
      raise UsageError(f"--{flag} {value!r}: must be a gs:// path (a workload's disk goes with its pods)")
  for x in a.overrides:
    if not x.startswith("--config."):
      raise UsageError(f"override {x!r}: expected --config.KEY=VALUE after --")
    if x.startswith("--config.train.batch_size="):
      raise UsageError(f"{x}: set the batch with --batch-per-chip (compile and train both get it)")
  if a.num_slices < 1 or a.batch_per_chip < 1 or getattr(a, "retries", 0) < 0:
    raise UsageError("--num-slices and --batch-per-chip must be >= 1, --retries >= 0")
  return a


def main(argv=None) -> int:
  return run_command("launch/xpk.py", parse, COMMANDS, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
  sys.exit(main())
