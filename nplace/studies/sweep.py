"""A grid's trials (nplace/studies/grid.py) run one after another in this process, each in
DIR/<trial>/ (`nplace sweep`). Finished trials (completed, diverged) are skipped on a rerun, an
interrupted one resumes from its checkpoint, a failing one is recorded and the sweep goes on;
DIR/sweep.json is rewritten atomically after every trial."""
import json
import pathlib
import sys
import time

import jax

from nplace.logs.progress import duration
from nplace.runtime import workdirs
from nplace.train.loop import train
from nplace.train.summary import Summary

FINISHED = ("completed", "diverged")


def trial_summary(workdir: pathlib.Path) -> Summary | None:
  """The trial's summary.json (written when a run ends: finished or preempted), if any;
  SummaryError when it does not read as one."""
  path = workdir / "summary.json"
  return Summary.read(path) if path.exists() else None


def new_record(spec: str, cli_overrides: list[str], trials, workdir: pathlib.Path) -> dict:
  """sweep.json's content for `trials`: each one's status read from its summary, if it has one."""
  entries = []
  for t in trials:
    summary = trial_summary(workdir / t.name)
    entries.append({"name": t.name, "overrides": t.overrides, "workdir": t.name, "command": t.command,
                    "status": summary.status if summary else "pending", "error": None,
                    "summary": summary.to_dict() if summary else None})
  return {"config": spec, "overrides": cli_overrides, "trials": entries}


def write_record(path: pathlib.Path, record: dict) -> None:
  """Atomically: a reader (or a killed sweep) never sees half a file."""
  workdirs.write_atomic(path, json.dumps(record, indent=1) + "\n")


def _progress(entries, wall_times) -> str:
  done = [e for e in entries if e["status"] in (*FINISHED, "failed")]
  counts = ", ".join(f"{sum(e['status'] == s for e in done)} {s}" for s in (*FINISHED, "failed"))
  line = f"sweep: {len(done)}/{len(entries)} trials done ({counts})"
  if wall_times and len(done) < len(entries):
    line += f", eta {duration(sum(wall_times) / len(wall_times) * (len(entries) - len(done)))}"
  return line


def _one_line(error: Exception) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0] if text else ''}"


def run(trials, workdir: pathlib.Path, record: dict, selected: list[int]) -> dict:
  """Runs the selected trials not yet finished; returns the final record."""
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
      entry.update(status=summary.status, summary=summary.to_dict())
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

