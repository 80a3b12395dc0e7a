"""`nplace sweep` as a user runs it: a 3-trial grid (one diverges), killed mid-trial with SIGKILL
and rerun; `--list`; grids it must refuse before running anything."""
import json
import math
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import ml_collections
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from nplace.commands import main, train as train_command
from nplace.config import base_config
from nplace.studies import grid, runs
from nplace.train import checkpoint
from nplace.train.summary import Summary

NPLACE = pathlib.Path(sys.executable).parent / "nplace"
EXPERIMENT = '''
from nplace.config import base_config
from nplace.protocol import Grid


def get_config(arg="small"):
  c = base_config()
  c.model.update(vocab_size=256, max_len=16, n_layer=2, n_head=4, d_model=32, remat="none")
  c.data.update(seq_len=16, synthetic_tokens=65536)
  c.train.update(steps=60, batch_size=8, log_every=1, eval_every=30, eval_batches=2)
  c.optim.warmup_steps = 5
  c.checkpoint.every = 10
  return c


def get_sweep(arg="small"):
  huge = {"optim.lr": 1e30, "optim.clip_norm": 0.0, "optim.warmup_steps": 0}
  return [huge, {"seed": 0}, {"seed": 1}]


GRID = Grid(config=get_config, sweep=get_sweep)
'''
NAMES = ["lr=1e+30,clip_norm=0,warmup_steps=0", "seed=0", "seed=1"]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
  path = tmp_path_factory.mktemp("experiments") / "grid.py"
  path.write_text(EXPERIMENT)
  return path


def sweep(experiment, workdir, *extra):
  return [NPLACE, "sweep", "--config", f"{experiment}:small", "--workdir", str(workdir),
          "--config.eval.rouge=False", *extra]


def files_and_mtimes(directory):
  return {p.name: p.stat().st_mtime_ns for p in directory.iterdir() if p.is_file()}


def train_losses(workdir):
  acc = event_accumulator.EventAccumulator(str(workdir), size_guidance={"scalars": 0})
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars("train/loss")}


@pytest.mark.slow
def test_killed_sweep_reruns_to_the_end_without_redoing_finished_trials(experiment, tmp_path, env, capsys):
  proc = subprocess.Popen(sweep(experiment, tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  killed_trial = tmp_path / NAMES[1]
  deadline = time.time() + 300
  while not (killed_trial / "checkpoints" / "10").exists():  # trial 2 of 3 is under way
    assert proc.poll() is None and time.time() < deadline, proc.communicate()[0]
    time.sleep(0.01)
  proc.kill()
  proc.wait()
  record = json.loads((tmp_path / "sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["diverged", "running", "pending"]
  assert not (killed_trial / "summary.json").exists()
  diverged = files_and_mtimes(tmp_path / NAMES[0])

  done = subprocess.run(sweep(experiment, tmp_path), env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout + done.stderr
  assert "sweep: 3/3 trials done (2 completed, 1 diverged, 0 failed)" in done.stdout
  # each trial's lines carry its place in the grid, not its name, at most 20 of them (every 3rd of 60 steps)
  lines = done.stdout.splitlines()
  assert f"[3/3] logs: {tmp_path / NAMES[2]}" in lines and "[3/3] step 60/60 loss" in done.stdout
  steps = [int(line.split()[2].split("/")[0]) for line in lines if line.startswith("[3/3] step ") and "eval" not in line]
  assert steps == list(range(3, 61, 3)), lines
  record = json.loads((tmp_path / "sweep.json").read_text())
  assert record["config"] == f"{experiment}:small" and record["overrides"] == ["--config.eval.rouge=False"]
  assert [t["name"] for t in record["trials"]] == NAMES
  assert [t["status"] for t in record["trials"]] == ["diverged", "completed", "completed"]
  for trial in record["trials"]:
    assert trial["summary"] == json.loads((tmp_path / trial["workdir"] / "summary.json").read_text())
  assert files_and_mtimes(tmp_path / NAMES[0]) == diverged  # the diverged trial was not rerun
  # The interrupted trial resumed from a checkpoint (its new event file starts past step 10)
  # and logged every step exactly once.
  starts = sorted({int(name.rsplit(".from", 1)[1].split(".")[0])  # events.out.tfevents.<time>.<host>.from<step>[.<segment>]
                   for name in os.listdir(killed_trial) if ".from" in name})
  assert starts[0] == 0 and starts[1] > 10
  assert sorted(train_losses(killed_trial)) == list(range(1, 61))
  assert record["trials"][2]["summary"]["step"] == 60
  # The resumed trial's counters went on from its checkpoint: the largest loss after warmup
  # (early in training, before the kill) is the one its event files hold.
  worst, at = max((v, s) for s, v in train_losses(killed_trial).items() if s > 5)
  assert at <= 10 and record["trials"][1]["summary"]["max_train_loss"] == pytest.approx(worst)

  # --record (trials run elsewhere) rewrites the record from the trials, and refuses a command that
  # gives them another config than their checkpoints hold
  (tmp_path / "sweep.json").unlink()
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--record")[2:])]) == 0
  assert json.loads((tmp_path / "sweep.json").read_text())["trials"] == record["trials"]
  (tmp_path / "sweep.json").unlink()
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--record", "--config.train.steps=90")[2:])]) == 2
  assert re.fullmatch(r"nplace sweep: --record: trial (.+)'s checkpoint (\d+) was trained with train.steps=60, and this "
                      r"command gives 90: give the overrides its slices ran with\n", capsys.readouterr().err)
  assert not (tmp_path / "sweep.json").exists()  # a refused record is not written: filing would read it


def test_list_prints_a_runnable_train_command_per_trial(experiment, tmp_path, capsys):
  assert main.main(["sweep", "--config", f"{experiment}:small", "--workdir", str(tmp_path),
                   "--config.train.steps=7", "--config.seed=5", "--only", "seed", "--list"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split("\t")[0] for line in lines] == NAMES[1:]
  args = shlex.split(lines[1].split("\t")[1])
  assert args[:2] == ["nplace", "train"] and args[args.index("--workdir") + 1] == str(tmp_path / NAMES[2])
  config = train_command.COMMAND.parse(args[2:])[0].config
  assert (config.train.steps, config.seed) == (7, 1)  # the trial's seed wins over --config.seed=5
  assert not (tmp_path / "sweep.json").exists()


def test_a_rerun_that_would_change_a_finished_trial_is_refused_in_one_line(experiment, tmp_path, capsys,
                                                                          monkeypatch):
  """It said "already finished" and rewrote sweep.json: the new command beside the old summary."""
  ran = []
  monkeypatch.setattr("nplace.studies.sweep.run", lambda *args: ran.append(args) or args[2])
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--list")[2:])]) == 0
  trials = [{"name": name, "overrides": {}, "workdir": name, "command": command, "status": "completed",
             "error": None, "summary": None} for name, command in
            (line.split("\t") for line in capsys.readouterr().out.splitlines())]
  record = json.dumps({"config": f"{experiment}:small", "overrides": [], "trials": trials})
  (tmp_path / "sweep.json").write_text(record)
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--config.train.steps=90")[2:])]) == 2
  assert capsys.readouterr().err == (
      f"nplace sweep: --workdir {tmp_path}: trial {NAMES[0]} finished with train.steps=60, and this command gives "
      "90: a finished trial is not rerun, and its record would then describe it by this command; use another "
      "--workdir\n")
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--config.train.steps=90", "--record")[2:])]) == 2
  assert capsys.readouterr().err.endswith("its record would then describe it by this command; give the overrides its "
                                          "slices ran with\n")  # --record reruns nothing: another workdir is no help
  assert (tmp_path / "sweep.json").read_text() == record and not ran
  monkeypatch.chdir(tmp_path.parent)  # the same trials, their workdir spelled otherwise: the commands differ
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path.name)[2:])]) == 0 and ran
  stale = json.loads(record)
  stale["trials"][0]["command"] += " --config.model.dt=-1"  # a config that no longer validates is let be
  (tmp_path / "sweep.json").write_text(json.dumps(stale))
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path.name)[2:])]) == 0 and len(ran) == 2


def test_a_cell_whose_trials_hold_no_common_checkpoint_is_refused_before_anything_runs(experiment, tmp_path,
                                                                                        capsys, monkeypatch):
  """Started at --batch 1 and rerun at --batch 2, a cell failed once reached, exit 0, its
  unstarted trial recorded failed with it."""
  ran = []
  monkeypatch.setattr("nplace.studies.sweep.run", lambda *args: ran.append(args) or args[2])
  (tmp_path / "seed=0" / "checkpoints" / "10").mkdir(parents=True)
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--batch", "2")[2:])]) == 2
  assert capsys.readouterr().err == (
      "nplace sweep: --batch 2: the trials of one cell hold checkpoints at no common step (newest: seed=0 at 10, "
      "seed=1 at none), so they cannot resume together: rerun with the --batch (and --only) they were started "
      "with, or --batch 1 to resume each alone\n")
  assert not ran
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--batch", "1")[2:])]) == 0 and ran


def test_a_failing_trial_is_recorded_the_sweep_goes_on_and_exits_1_and_ctrl_c_leaves_it_pending(
    experiment, tmp_path, capsys, monkeypatch):
  """It exited 0: `nplace sweep && nplace report` went on to file a grid with failed trials; after
  Ctrl-C, sweep.json said "running"; --record then made the failed trial pending and lost its error."""
  def train_cell(configs, workdirs):
    if "seed=0" in configs:
      raise RuntimeError("out of memory\nallocating 3 GiB")
    return [Summary(status="completed", step=60) for _ in configs]
  monkeypatch.setattr("nplace.studies.sweep.train_cell", train_cell)
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path)[2:])]) == 1
  assert capsys.readouterr().err.splitlines()[-2:] == [
      "sweep: trial seed=0 failed: RuntimeError: out of memory",
      f"nplace sweep: 1 of 3 trials failed (seed=0: their errors are in {tmp_path / 'sweep.json'}); rerun the same "
      "command to retry them"]
  entries = json.loads((tmp_path / "sweep.json").read_text())["trials"]
  assert [e["status"] for e in entries] == ["completed", "failed", "completed"]
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--record")[2:])]) == 0
  entries = json.loads((tmp_path / "sweep.json").read_text())["trials"]  # it read "pending", its error gone
  assert [(e["status"], e["error"]) for e in entries] == [("pending", None), ("failed", "RuntimeError: out of memory"),
                                                          ("pending", None)]  # no trial wrote a summary here
  monkeypatch.setattr("nplace.studies.sweep.train_cell", lambda *args: exec("raise KeyboardInterrupt"))
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path)[2:])]) == 130  # Ctrl-C: it said "running"
  entries = json.loads((tmp_path / "sweep.json").read_text())["trials"]
  assert [e["status"] for e in entries] == ["pending", "failed", "pending"]  # interrupted in the first trial


def test_cells_run_at_once_on_one_workdir_keep_each_others_record(experiment, tmp_path, capsys, monkeypatch):
  """Two `--cell N` workers on one host each rewrote sweep.json from what they read at start:
  the last writer's view won, and the other's finished trials read pending."""
  def train_cell(configs, workdirs):  # meanwhile, another worker finishes seed=1
    record = json.loads((tmp_path / "sweep.json").read_text())
    record["trials"][2].update(status="completed", summary=Summary(step=60).to_dict())
    (tmp_path / "sweep.json").write_text(json.dumps(record))
    return [Summary(status="completed", step=60) for _ in configs]
  monkeypatch.setattr("nplace.studies.sweep.train_cell", train_cell)
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--only", "seed=0")[2:])]) == 0
  entries = json.loads((tmp_path / "sweep.json").read_text())["trials"]
  assert [e["status"] for e in entries] == ["pending", "completed", "completed"]


def test_record_makes_trials_run_elsewhere_a_sweep_and_runs_nothing(experiment, tmp_path, capsys, monkeypatch):
  """launch/tpu.py sweep trains each trial on a slice of its own, which wrote no sweep.json:
  report refused to file the directory ("not a sweep")."""
  monkeypatch.setattr("nplace.studies.sweep.run", lambda *args: pytest.fail("ran"))
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--list")[2:])]) == 0
  saved = train_command.config_of(dict(line.split("\t") for line in capsys.readouterr().out.splitlines())[NAMES[1]])
  saved = saved.to_dict()
  del saved["train"]["steps"]  # as if nplace added the key after the trial ran: not compared, though read as 1000
  mngr = checkpoint.manager(tmp_path / NAMES[1], base_config().checkpoint)
  checkpoint.save(mngr, 60, {"x": np.zeros(2)}, None, ml_collections.ConfigDict(saved), force=True)
  mngr.wait_until_finished()
  (tmp_path / NAMES[1] / "summary.json").write_text(Summary(step=60, frequency_loss=4.5).to_json())
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--record")[2:])]) == 0
  assert capsys.readouterr().out == (f"sweep: 1/3 trials done (1 completed, 0 diverged, 0 failed); "
                                     f"record in {tmp_path / 'sweep.json'}\n")
  source = runs.load(tmp_path)
  assert source.config == f"{experiment}:small"
  assert [(run.name, run.status) for run in source.runs] == [(NAMES[0], "pending"), (NAMES[1], "completed"),
                                                             (NAMES[2], "pending")]
  assert main.main(["sweep", *map(str, sweep(experiment, tmp_path, "--record", "--list")[2:])]) == 2
  assert capsys.readouterr().err == "nplace sweep: --list and --record: give one\n"


@pytest.mark.parametrize("sweep_source,message", [
    ("def get_sweep(arg):\n  return [{'model.depth': 3}]\nGRID = Grid(get_config, get_sweep)\n",
     "trial depth=3: no such config key 'model.depth'"),
    ("def get_sweep(arg):\n  return [{'seed': 1}, {'model.n_head': 5}]\nGRID = Grid(get_config, get_sweep)\n",
     "trial n_head=5: config error: model"),
    ("", "declares no GRID"),
    ("def get_sweep(arg):\n  return [{'model': {'placement': 'peri'}}]\nGRID = Grid(get_config, get_sweep)\n",
     "'model' is a section: name its keys, dotted (model.KEY)"),
    ("def get_sweep(arg):\n  return [{1: 3}]\nGRID = Grid(get_config, get_sweep)\n",
     "get_sweep must return a non-empty list of dicts (dotted key -> value)"),
    ("def get_sweep(arg):\n  return ({'seed': s} for s in range(2))\nGRID = Grid(get_config, get_sweep)\n",
     "get_sweep must return a non-empty list of dicts (dotted key -> value)"),
    ("def get_sweep(arg):\n  return [{'train.steps': True}]\nGRID = Grid(get_config, get_sweep)\n",
     "trial steps=True: config error: train.steps=True: must be int, not a bool"),
    ("def get_sweep(arg):\n  return [{'seed': 1}\nGRID = Grid(get_config, get_sweep)\n",
     "bad.py, line 17: SyntaxError: '[' was never closed"),
])
def test_bad_grids_are_refused_in_one_line_before_any_trial_runs(tmp_path, capsys, sweep_source, message):
  path = tmp_path / "bad.py"
  path.write_text(EXPERIMENT.split("def get_sweep")[0] + sweep_source)
  assert main.main(["sweep", "--config", f"{path}:small", "--workdir", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message in err, err
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("grid,trials,cells", [
    ("stability.py:cpu", 350, 24), ("stability.py:cpu_wide", 100, 8), ("stability.py:gpu", 350, 24),
    ("stability.py:paper,350m", 175, 12),
    ("growth.py:v3_cpu", 60, 10), ("growth.py:v3_gpu", 60, 10),
    ("collapse.py:cpu", 18, 6), ("collapse.py:v3_cpu", 18, 6), ("collapse.py:gpu", 30, 6),
    ("collapse.py:paper", 18, 6)])
def test_each_tier_of_a_protocol_lists_its_trials_and_cells(grid, trials, cells, tmp_path, capsys):
  """The grid dry, through the console script's entry point: `--list` prints every trial (or
  cell of up to 15) it runs, and runs nothing; cpu_wide's are the 100 of its 450 that are not
  cpu's."""
  spec = f"{pathlib.Path(__file__).resolve().parent.parent}/experiments/{grid}"
  listed = []
  for batch in ([], ["--batch", "15"]):
    assert main.main(["sweep", "--config", spec, "--workdir", str(tmp_path / "sw"), "--list", *batch]) == 0
    listed.append(capsys.readouterr().out.splitlines())
  assert [len(lines) for lines in listed] == [trials, cells]
  assert all(line.split("\t")[1].startswith("nplace train") for line in listed[0])
  assert not (tmp_path / "sw").exists()


def test_a_dry_list_needs_no_workdir_and_a_run_does(capsys):
  """`--list` alone lists the ladder's gpu rungs, widths 512 and 768, with commands that write to
  WORKDIR; without --list, a missing --workdir is refused before anything runs."""
  spec = f"{pathlib.Path(__file__).resolve().parent.parent}/experiments/ladder.py:gpu"
  assert main.main(["sweep", "--config", spec, "--list"]) == 0
  commands = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()]
  assert {re.search(r"d_model=(\d+)", c).group(1) for c in commands} == {"512", "768"}
  assert all("--workdir WORKDIR/" in c for c in commands)
  assert main.main(["sweep", "--config", spec]) == 2
  assert "--workdir is required" in capsys.readouterr().err


def test_a_widened_grid_runs_only_the_trials_it_does_not_reuse(tmp_path, capsys):
  """stability.py:cpu_wide lists 450 trials, 350 of them cpu's (same names and config, filed
  as cpu's): it runs the other 100, the two new rates, says what it skipped, and refuses a
  selection of reused trials only."""
  experiments = pathlib.Path(__file__).resolve().parent.parent / "experiments"
  spec = f"{experiments}/stability.py:cpu_wide"
  assert len(grid.load_sweep(spec)) == 450
  assert main.main(["sweep", "--config", spec, "--workdir", str(tmp_path / "sw"), "--list"]) == 0
  out, err = capsys.readouterr()
  lrs = {re.search(r"--config.optim.lr=([0-9.e-]+)", line).group(1) for line in out.splitlines()}
  assert len(out.splitlines()) == 100 and {float(lr) for lr in lrs} == {10 ** 0.5, 10.0}
  assert f"350 of the selected trials are {experiments}/stability.py:cpu's" in err
  assert main.main(["sweep", "--config", spec, "--workdir", str(tmp_path / "sw"), "--only", "lr=0.001,"]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "run them with --config" in err and err.endswith("stability.py:cpu")
  assert not (tmp_path / "sw").exists()


def test_collapse_lists_its_matched_control_probed_densely_early(tmp_path, capsys):
  """The control arm (attention output at the declared fraction of its init, softmax kept) is in
  the cpu tier's listing, and that tier probes every 25 steps up to step 500."""
  spec = f"{pathlib.Path(__file__).resolve().parent.parent}/experiments/collapse.py:cpu"
  assert main.main(["sweep", "--config", spec, "--workdir", str(tmp_path / "sw"), "--list"]) == 0
  control = [line for line in capsys.readouterr().out.splitlines() if "attn_out_scale=0.23" in line]
  assert len(control) == 3
  assert all("--config.model.attn_out_scale=0.23" in line and "attention=softmax" in line for line in control)
  collapse = grid.load_module(spec.partition(":")[0])
  config = collapse.get_config("cpu")
  assert (config.probe.every, config.probe.early_every, config.probe.early_until) == (250, 25, 500)


def test_stability_protocol_2_sweeps_into_the_failure_region_long_enough_to_train(tmp_path, capsys):
  """What protocol 2's cpu tier lists: >= 3 decades of half-decade steps up to >= 3e-1, weight
  decay 0.1 and 0 for Pre-LN and Peri-LN, 5 seeds, >= 1M tokens a trial, every step logged
  and an evaluation at each quarter (its horizons)."""
  spec = f"{pathlib.Path(__file__).resolve().parent.parent}/experiments/stability.py:cpu"
  assert main.main(["sweep", "--config", spec, "--workdir", str(tmp_path), "--list"]) == 0
  commands = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()]
  lrs = sorted({float(re.search(r"--config.optim.lr=([0-9.e-]+)", c).group(1)) for c in commands})
  assert lrs[0] <= 1e-3 and lrs[-1] >= 3e-1 and math.log10(lrs[-1] / lrs[0]) >= 3
  np.testing.assert_allclose(np.diff(np.log10(lrs)), 0.5)
  for placement in ("pre", "peri"):
    decays = {re.search(r"weight_decay=([0-9.]+)", c).group(1) for c in commands
              if f"placement={placement}" in c}
    assert {float(d) for d in decays} == {0.0, 0.1}, placement
  assert {re.search(r"--config.seed=(\d+)", c).group(1) for c in commands} == set("01234")
  config = train_command.COMMAND.parse(["--config", spec])[0].config
  assert config.train.steps >= 1000 and config.train.steps * config.train.batch_size * config.data.seq_len >= 1_000_000
  assert config.train.log_every == 1 and config.train.eval_every == config.train.steps // 4
