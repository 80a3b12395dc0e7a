"""The steps of a run on a TPU slice, each a few commands printed as shell lines and then
run (or only printed, in a dry run); and the loop that reruns them after a preemption."""
import json
import pathlib
import shlex
import subprocess
import sys
import time

import gcloud

ROOT = pathlib.Path(__file__).resolve().parent.parent  # local commands run here
FINAL = ("completed", "diverged")  # a run that ended so is not rerun
POLL_S = 60  # seconds between state queries while a queued resource waits for capacity


class UsageError(Exception):
  """Bad input: one line, exit code 2."""


class LaunchError(Exception):
  """A step failed: one line, exit code `code`."""

  def __init__(self, message, code=1):
    super().__init__(message)
    self.code = code


class Runner:
  """Prints each command as one shell line, then runs it (unless dry_run)."""

  def __init__(self, dry_run: bool, out=None):
    self.dry_run = dry_run
    self.out = out or sys.stdout  # commands, notes and the commands' own output

  def note(self, text: str):
    print(f"# {text}", file=self.out, flush=True)

  def run(self, argv, check=True) -> int:
    print(shlex.join(argv), file=self.out, flush=True)
    if self.dry_run:
      return 0
    code = subprocess.run(argv, cwd=ROOT, stdout=self.out, stderr=self.out).returncode
    if check and code:
      raise LaunchError(f"exit code {code}: {shlex.join(argv)}")
    return code

  def query(self, argv, dry_result: str | None, echo=True) -> str | None:
    """argv's stdout, stripped (None when it fails); in a dry run, dry_result."""
    if echo:
      print(shlex.join(argv), file=self.out, flush=True)
    if self.dry_run:
      return dry_result
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


# ---- the steps (each one a few commands) ----

def run_command(script: str, parse, commands: dict, argv: list[str]) -> int:
  """A launcher's main: its subcommand's exit code; 2 and one line for a usage error; a
  LaunchError's line and code; 130 on Ctrl-C (what runs remotely goes on)."""
  try:
    a = parse(argv)
    code = commands[a.command][1](Runner(a.dry_run), a)
    return code if isinstance(code, int) else 0
  except UsageError as e:
    print(f"{script}: {e}", file=sys.stderr)
    return 2
  except LaunchError as e:
    print(f"{script}: {e}", file=sys.stderr)
    return e.code
  except KeyboardInterrupt:
    return 130

def shipped_config(spec: str):
  """Refuses a --config FILE[:ARG] that `setup` would not ship (it ships this checkout's committed
  HEAD): the compile check would read one file and the slice train on another, or on none."""
  file = spec.partition(":")[0]
  path = (ROOT / file).resolve()  # the commands run in ROOT, as nplace compile reads it here
  git = lambda *argv: subprocess.run(["git", *argv], cwd=ROOT, capture_output=True).returncode
  if not path.is_relative_to(ROOT) or git("ls-files", "--error-unmatch", str(path)):
    raise UsageError(f"--config {file}: not a file committed in {ROOT} (a slice gets only its HEAD)")
  if git("diff", "--quiet", "HEAD", "--", str(path)):
    raise UsageError(f"--config {file}: differs from its committed version (a slice gets only HEAD): commit it first")


def compile_check(r: Runner, a):
  code = r.run([a.nplace, "compile", "--config", a.config, "--topology", a.accel.type,
                "--batch-per-chip", str(a.batch_per_chip), *a.overrides], check=False)
  if code == 3:
    raise LaunchError(f"{a.config} does not fit {a.accel.type}; nothing was created", 3)
  if code:
    raise LaunchError(f"nplace compile failed (exit code {code})")


def create(r: Runner, s: gcloud.Slice, a):
  r.run(s.create(a.accel, a.spot))
  if s.queued:
    r.note(f"repeated every {POLL_S} s until it prints ACTIVE:")
    state = r.query(s.state(), "ACTIVE")
    while state != "ACTIVE":
      if state in (None, "FAILED", "SUSPENDED"):
        raise LaunchError(f"queued resource {s.name}: state {state}")
      time.sleep(POLL_S)
      state = r.query(s.state(), "ACTIVE", echo=False)


def ensure_slice(r: Runner, s: gcloud.Slice, a):
  """Reuses a healthy slice of that name; replaces one that is not (e.g. preempted)."""
  state = r.query(s.state(), None)
  if state == s.healthy:
    r.note(f"{s.name} is {state}: reusing it")
    return
  if state is not None:
    r.run(s.delete())
  create(r, s, a)


def setup(r: Runner, s: gcloud.Slice):
  """Installs the committed HEAD of this checkout on every worker."""
  tarball = f"nplace-{s.name}.tar.gz"
  r.run(["git", "archive", "--format=tar.gz", "--prefix=nplace/", "-o", f"/tmp/{tarball}", "HEAD"])
  r.run(s.scp(f"/tmp/{tarball}", tarball))
  r.run(s.ssh(gcloud.install_command(tarball)))


def stage_data(r: Runner, s: gcloud.Slice, a, prepare: bool):
  """Copies the prepared-data cache from a.data (gs://) to every worker's disk; with
  prepare, worker 0 first prepares the config's data and uploads it there."""
  if not a.data:
    return
  if prepare:
    prepare_argv = ["prepare", "--config", a.config, *a.overrides]
    upload = f"gcloud storage rsync --recursive {gcloud.CACHE} {shlex.quote(a.data)}"
    r.run(s.ssh(f"{gcloud.nplace_command(prepare_argv)} && {upload}", worker="0"))
  r.run(s.ssh(f"mkdir -p {gcloud.CACHE} && "
              f"gcloud storage rsync --recursive {shlex.quote(a.data)} {gcloud.CACHE}"))


def clear_summary(r: Runner, workdir: str):
  """Deletes WORKDIR/summary.json before an attempt: a stale one would hide a crash."""
  r.run(["gcloud", "storage", "rm", f"{workdir}/summary.json"], check=False)


def summary_status(r: Runner, workdir: str, dry_result: str | None = "completed") -> str | None:
  """The status in WORKDIR/summary.json (None: none there, or unreadable); `dry_result` in a
  dry run."""
  text = r.query(["gcloud", "storage", "cat", f"{workdir}/summary.json"],
                 None if dry_result is None else json.dumps({"status": dry_result}))
  try:
    return json.loads(text)["status"] if text else None
  except (ValueError, KeyError, TypeError):
    return None


def train(r: Runner, s: gcloud.Slice, args: list[str], workdir: str) -> str | None:
  """Runs `nplace train ARGS` on every worker until it ends; the status its summary.json gives."""
  clear_summary(r, workdir)
  r.run(s.ssh(gcloud.train_command(args, workdir)), check=False)  # the summary tells
  return summary_status(r, workdir)


def run_to_end(r: Runner, s: gcloud.Slice, a, args: list[str], workdir: str) -> str:
  """ensure_slice, setup, stage-data, train; after a preemption all again, at most a.retries
  more times. Returns the final status; raises LaunchError when the run cannot finish."""
  r.note(f"a run that ends neither {' nor '.join(FINAL)} on a slice that is not {s.healthy} "
         f"(preempted) repeats from here, at most {a.retries} more times")
  for attempt in range(a.retries + 1):
    if attempt:
      r.note(f"{s.name}: attempt {attempt + 1} of {a.retries + 1}")
    error = None
    try:
      ensure_slice(r, s, a)
      setup(r, s)
      stage_data(r, s, a, prepare=getattr(a, "prepare", False) and attempt == 0)
      status = train(r, s, args, workdir)
    except LaunchError as e:  # e.g. ssh cut off by the preemption
      status, error = None, e
    if status in FINAL:
      return status
    state = r.query(s.state(), s.healthy)
    if state == s.healthy and status != "preempted":
      raise error or LaunchError(f"{s.name}: nplace train stopped with status {status} on a "
                                 f"healthy slice; logs in {workdir}/logs/")
    r.note(f"{s.name}: status {status}, slice {state}: resuming")
  raise LaunchError(f"{s.name}: still not finished after {a.retries} retries")


def sweep_command(a, *tail: str) -> list[str]:
  """`nplace sweep` over the grid's trials (--only), run here: `--list`, or `--record` with the
  overrides each trial ran with on its slice."""
  only = ["--only", a.only] if a.only else []
  return [a.nplace, "sweep", "--config", a.config, "--workdir", a.workdir, *only, *tail]


def record_sweep(r: Runner, a, chips: int | None = None):
  """The grid's sweep.json, written into its bucket from each trial's summary.json (`nplace sweep
  --record`): its trials ran on slices of their own, and `nplace report` files a sweep."""
  code = r.run(sweep_command(a, *on_slice(a, list(a.overrides), chips), "--record"), check=False)
  if code:
    r.note(f"no sweep.json written (exit code {code}); the command above writes it once it can")


def on_slice(a, args: list[str], chips: int | None = None) -> list[str]:
  """`nplace train` ARGS plus what every run on a slice needs: jax.distributed on all workers,
  and the global batch from --batch-per-chip unless ARGS set one (a sweep trial may). `chips`:
  all the run's chips where that is more than one slice's (launch/xpk.py --num-slices)."""
  batch = [] if any(x.startswith("--config.train.batch_size=") for x in args) else [
      f"--config.train.batch_size={a.batch_per_chip * (chips or a.accel.chips)}"]
  return [*args, "--config.distributed.initialize=True", *batch]
