"""`nplace sweep --config experiments/NAME.py:ARG [--config.x=y ...] --workdir DIR [--only REGEX]
[--list]`: a grid's trials (nplace/grid.py) one after another in this process, each in
DIR/<trial>/. Finished trials (completed, diverged) are skipped on a rerun, an interrupted one
resumes from its checkpoint, a failing one is recorded and the sweep goes on; DIR/sweep.json is
rewritten atomically after every trial."""
import json
import pathlib
import re
import sys
import time

from absl import flags

from nplace import grid, workdirs

FINISHED = ("completed", "diverged")


def _define(fv):
  flags.DEFINE_string("workdir", None, "sweep directory: one subdirectory per trial, and sweep.json",
                      flag_values=fv)
  flags.DEFINE_string("only", None, "run only the trials whose name matches this regex", flag_values=fv)
  flags.DEFINE_bool("list", False, "print each trial's name and `nplace train` command; run nothing",
                    flag_values=fv)


def _config_args(argv) -> tuple[str, list[str]]:
  """The `--config FILE[:ARG]` value and the `--config.k=v` overrides, as given."""
  spec, overrides = None, []
  for i, arg in enumerate(argv):
    if arg == "--config" and i + 1 < len(argv):
      spec = argv[i + 1]
    elif arg.startswith("--config="):
      spec = arg.removeprefix("--config=")
    elif arg.startswith("--config."):
      overrides.append(arg if "=" in arg or i + 1 == len(argv) else f"{arg}={argv[i + 1]}")
  return spec, overrides


def _summary(workdir: pathlib.Path) -> dict | None:
  """The trial's summary.json (written when a run ends: finished or preempted), if any."""
  path = workdir / "summary.json"
  return json.loads(path.read_text()) if path.exists() else None


def write_record(path: pathlib.Path, record: dict) -> None:
  """Atomically: a reader (or a killed sweep) never sees half a file."""
  workdirs.write_atomic(path, json.dumps(record, indent=1) + "\n")


def _duration(seconds: float) -> str:
  return time.strftime("%H:%M:%S", time.gmtime(max(seconds, 0)))


def _progress(entries, wall_times) -> str:
  done = [e for e in entries if e["status"] in (*FINISHED, "failed")]
  counts = ", ".join(f"{sum(e['status'] == s for e in done)} {s}" for s in (*FINISHED, "failed"))
  line = f"sweep: {len(done)}/{len(entries)} trials done ({counts})"
  if wall_times and len(done) < len(entries):
    line += f", eta {_duration(sum(wall_times) / len(wall_times) * (len(entries) - len(done)))}"
  return line


def _one_line(error: Exception) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0] if text else ''}"


def run(trials, workdir: pathlib.Path, record: dict, selected: list[int]) -> dict:
  """Runs the selected trials not yet finished; returns the final record."""
  import jax
  from nplace.train import train
  path, entries, wall_times = workdir / "sweep.json", record["trials"], []
  todo = [i for i in selected if entries[i]["status"] not in FINISHED]
  print(f"sweep: {len(selected)} trials, {len(selected) - len(todo)} already finished; record in {path}\n"
        f"  tensorboard --logdir {workdir}", flush=True)
  for k, i in enumerate(todo):
    trial, entry = trials[i], entries[i]
    entry.update(status="running", error=None)
    write_record(path, record)
    print(f"== sweep trial {k + 1}/{len(todo)}: {trial.name}", flush=True)
    start = time.perf_counter()
    try:
      summary = train(trial.config, workdir / trial.name)
      entry.update(status=summary["status"], summary=summary)
    except Exception as e:  # one trial's failure must not end the grid
      entry.update(status="failed", error=_one_line(e))
      print(f"sweep: trial {trial.name} failed: {entry['error']}", file=sys.stderr, flush=True)
    wall_times.append(time.perf_counter() - start)
    jax.clear_caches()  # each trial compiles its own steps; do not keep the previous ones
    write_record(path, record)
    print(_progress([entries[j] for j in selected], wall_times), flush=True)
    if entry["status"] == "preempted":
      print("sweep: preempted; rerun the same command to resume", flush=True)
      break
  return record


def main(argv):
  from nplace.cli import UsageError, parse_flags
  fv = parse_flags(argv, _define)
  if not fv.workdir:
    raise UsageError("--workdir is required")
  spec, cli_overrides = _config_args(argv)
  workdir = pathlib.Path(fv.workdir)
  try:
    trials = grid.expand(spec, fv.config, cli_overrides, workdir)
    only = re.compile(fv.only) if fv.only else None
  except grid.GridError as e:
    raise UsageError(str(e)) from None
  except re.error as e:
    raise UsageError(f"--only {fv.only!r}: {e}") from None
  selected = [i for i, t in enumerate(trials) if only is None or only.search(t.name)]
  if not selected:
    raise UsageError(f"--only {fv.only!r} matches none of the {len(trials)} trials")
  if fv.list:
    for i in selected:
      print(f"{trials[i].name}\t{trials[i].command}")
    return
  workdir.mkdir(parents=True, exist_ok=True)
  entries = []
  for t in trials:
    summary = _summary(workdir / t.name)
    entries.append({"name": t.name, "overrides": t.overrides, "workdir": t.name, "command": t.command,
                    "status": summary["status"] if summary else "pending", "error": None, "summary": summary})
  record = {"config": spec, "overrides": cli_overrides, "trials": entries}
  write_record(workdir / "sweep.json", record)
  run(trials, workdir, record, selected)
