"""A grid's trials (nplace/studies/grid.py) run in this process (`nplace sweep`), each in
DIR/<trial>/: one after another, or in cells of up to K trials that one program trains together
(`--batch K`: trials whose configs differ only in nplace.train.cell.FREE). Finished trials
(completed, diverged) are skipped on a rerun, an interrupted one resumes from its checkpoint, a
failing one is recorded and the sweep goes on; DIR/sweep.json is rewritten atomically after
every trial or cell."""
import json
import sys
import time

import jax
from etils import epath

from nplace.logs.progress import duration
from nplace.runtime import workdirs
from nplace.train.cell import program
from nplace.train.loop import train_cell
from nplace.train.summary import Summary, SummaryError

FINISHED = ("completed", "diverged")


def trial_summary(workdir: epath.Path) -> Summary | None:
  """The trial's summary.json (written when a run ends: finished or preempted), if any;
  SummaryError when it does not read as one."""
  path = workdir / workdirs.SUMMARY
  return Summary.read(path) if path.exists() else None


def status_of(summary: Summary | None) -> str:
  return summary.status if summary else "pending"


def _status_on_disk(trial_dir: epath.Path) -> str:
  try:
    return status_of(trial_summary(trial_dir))
  except SummaryError:  # reported when the record is next made; an interrupt must not be masked
    return "pending"


def recorded(path: epath.Path) -> list[dict]:
  """The trial entries of the sweep.json at `path`; [] where there is none, or it is not one."""
  try:
    entries = json.loads(path.read_text())["trials"]
    return entries if all(isinstance(e, dict) and "name" in e for e in entries) else []
  except (FileNotFoundError, ValueError, KeyError, TypeError):
    return []


def new_record(spec: str, cli_overrides: list[str], trials, workdir: epath.Path) -> dict:
  """sweep.json's content for `trials`: each one's status read from its summary, if it has one;
  a trial without one that the record on disk says failed stays failed, with its error."""
  failures = {e["name"]: e.get("error") for e in recorded(workdir / workdirs.SWEEP_RECORD)
              if e.get("status") == "failed"}
  entries = []
  for t in trials:
    summary = trial_summary(workdir / t.name)
    failed = summary is None and t.name in failures
    entries.append({"name": t.name, "overrides": t.overrides, "workdir": t.name, "command": t.command,
                    "status": "failed" if failed else status_of(summary),
                    "error": failures[t.name] if failed else None,
                    "summary": summary.to_dict() if summary else None})
  return {"config": spec, "overrides": cli_overrides, "trials": entries}


def write_record(path: epath.Path, record: dict) -> None:
  """Atomically: a reader (or a killed sweep) never sees half a file."""
  workdirs.write_atomic(path, json.dumps(record, indent=1) + "\n")


def _write_keeping_others(path: epath.Path, record: dict, own: set[int]) -> None:
  """write_record, with the entries of trials this process does not run as the file now holds
  them: cells run at once on one workdir (`--cell N` each) must not undo each other's."""
  on_disk = recorded(path)  # none yet, or not a record of this grid: this one replaces it
  same_grid = [e["name"] for e in on_disk] == [e["name"] for e in record["trials"]]
  for i in range(len(record["trials"]) if same_grid else 0):
    if i not in own:
      record["trials"][i] = on_disk[i]
  write_record(path, record)


def progress_line(entries, wall_times) -> str:
  done = [e for e in entries if e["status"] in (*FINISHED, "failed")]
  counts = ", ".join(f"{sum(e['status'] == s for e in done)} {s}" for s in (*FINISHED, "failed"))
  line = f"sweep: {len(done)}/{len(entries)} trials done ({counts})"
  if wall_times and len(done) < len(entries):
    line += f", eta {duration(sum(wall_times) / len(wall_times) * (len(entries) - len(done)))}"
  return line


def _one_line(error: Exception) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0] if text else ''}"


def cells(trials, selected: list[int], batch: int) -> list[list[int]]:
  """The selected trials (indices) in cells of up to `batch` trials that can share a program,
  in grid order (a cell fills before the next of its kind opens); batch 1: one trial each."""
  open_cells, out = {}, []
  for i in selected:
    key = json.dumps(program(trials[i].config), sort_keys=True, default=str)
    cell = open_cells.get(key)
    if cell is None or len(cell) == batch:
      cell = open_cells[key] = []
      out.append(cell)
    cell.append(i)
  return out


def run(trials, workdir: epath.Path, record: dict, groups: list[list[int]]) -> dict:
  """Runs the trials of `groups` (cells of trial indices) not yet finished, a cell at a time;
  returns the final record."""
  path, entries, wall_times = workdir / workdirs.SWEEP_RECORD, record["trials"], []
  selected = [i for cell in groups for i in cell]
  own = set(selected)
  todo = [c for c in ([i for i in cell if entries[i]["status"] not in FINISHED] for cell in groups) if c]
  cells_note = f" in {len(todo)} cell{'s' * (len(todo) != 1)}" if any(len(c) > 1 for c in todo) else ""
  print(f"sweep: {len(selected)} trials, {len(selected) - sum(map(len, todo))} already finished{cells_note}; "
        f"record in {path}\n  tensorboard --logdir {workdir}", flush=True)
  for k, cell in enumerate(todo):
    names = ", ".join(trials[i].name for i in cell)
    label = "trial" if len(cell) == 1 else f"cell of {len(cell)} trials"
    for i in cell:
      entries[i].update(status="running", error=None)
    _write_keeping_others(path, record, own)
    print(f"== sweep {label} {k + 1}/{len(todo)}: {names}", flush=True)
    start = time.perf_counter()
    try:
      summaries = train_cell({trials[i].name: trials[i].config for i in cell},
                             {trials[i].name: workdir / trials[i].name for i in cell})
      for i, summary in zip(cell, summaries):
        entries[i].update(status=summary.status, summary=summary.to_dict())
    except Exception as e:  # one trial's (or cell's) failure must not end the grid
      for i in cell:
        entries[i].update(status="failed", error=_one_line(e))
      print(f"sweep: {label} {names} failed: {entries[cell[0]]['error']}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # the record says what a rerun finds, not "running"
      for i in cell:
        entries[i].update(status=_status_on_disk(workdir / trials[i].name))
      _write_keeping_others(path, record, own)
      raise
    wall_times += [(time.perf_counter() - start) / len(cell)] * len(cell)
    jax.clear_caches()  # each trial compiles its own steps; do not keep the previous ones
    _write_keeping_others(path, record, own)
    print(progress_line([entries[j] for j in selected], wall_times), flush=True)
    if any(entries[i]["status"] == "preempted" for i in cell):
      print("sweep: preempted; rerun the same command to resume", flush=True)
      break
  return record
