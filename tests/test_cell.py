"""Batched trials (`nplace sweep --batch K`) as a user runs them: a cell of trials that differ in
every key a cell may vary trains and evaluates each trial as it does alone; a diverging trial stops alone; SIGKILL, then SIGTERM, mid-cell; each
trial stays a run of its own (eval, probe, report); which trials share a cell."""
import json
import math
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from nplace.commands import main, sweep as sweep_command
from nplace.config import experiment as load_experiment
from nplace.errors import ConfigError
from nplace.logs import events
from nplace.runtime import sharding
from nplace.studies import grid, sweep
from nplace.train import cell as cell_lib
from nplace.train.summary import Summary

NPLACE = pathlib.Path(sys.executable).parent / "nplace"


def main_command_config(spec):
  """The config `nplace sweep --config SPEC` parses."""
  return sweep_command.COMMAND.parse(["--config", spec])[0].config


# three trials apart in every key a cell may vary (cell.FREE): dt changes the eval's forward
# pass too (two values: each compiles its own probe suite). Three trials: a cell of 3 on 2
# devices takes one device for its trial axis.
KEYS = [{"seed": 0, "optim.lr": 2e-3, "optim.weight_decay": 0.1, "optim.b1": 0.9, "optim.b2": 0.95,
         "optim.eps": 1e-8, "optim.min_lr_ratio": 0.1, "model.dt": 1.0},
        {"seed": 1, "optim.lr": 3e-3, "optim.weight_decay": 0.0, "optim.b1": 0.8, "optim.b2": 0.99,
         "optim.eps": 1e-6, "optim.min_lr_ratio": 0.5, "model.dt": 0.1},
        {"seed": 2, "optim.lr": 1e-3, "optim.weight_decay": 0.3, "optim.b1": 0.95, "optim.b2": 0.9,
         "optim.eps": 1e-7, "optim.min_lr_ratio": 0.0, "model.dt": 1.0}]
NAMES = [grid.trial_name(t) for t in KEYS]
GRID = f"KEYS = {KEYS!r}\n" + '''
from nplace.config import experiment
from nplace.protocol import Grid


def get_config(arg="keys"):
  c = experiment("tiny", "pre")  # the tiny preset, smaller still: these tests compile and train it
  c.model.update(n_layer=2, d_model=64)
  c.data.update(seq_len=32, synthetic_tokens=1 << 17)
  c.train.update(steps={"pair": 40, "shared": 2}.get(arg, 20), batch_size=8, log_every=1, eval_every=10,
                 eval_batches=1)
  c.optim.warmup_steps = 5
  c.checkpoint.every = 10
  c.eval.rouge = arg == "keys"  # the keys cell compares every eval number, generated ROUGE too; the rest skip it
  return c


def get_sweep(arg="keys"):
  if arg == "keys":
    return KEYS
  if arg == "diverge":
    return [{"optim.lr": 2e-3, "seed": 0}, {"optim.lr": 1e30, "seed": 0}, {"optim.lr": 3e-3, "seed": 1}]
  if arg == "pair":
    return [{"optim.lr": 2e-3, "seed": 0}, {"optim.lr": 3e-3, "seed": 1}]
  if arg == "shared":  # two cells of one program at --batch 2, one varying lr, one weight decay and eps
    return [{"seed": 0, "optim.lr": 2e-3}, {"seed": 1, "optim.lr": 3e-3}, {"seed": 2, "optim.weight_decay": 0.0},
            {"seed": 3, "optim.eps": 1e-6}]
  return [{"model.placement": p, "model.dt": dt, "seed": s} for p in ("pre", "peri") for dt in (1.0, 0.5)
          for s in (0, 1)]


GRID = Grid(config=get_config, sweep=get_sweep)
'''


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
  path = tmp_path_factory.mktemp("experiments") / "cells.py"
  path.write_text(GRID)
  return path


def nplace(*args, env):
  done = subprocess.run([NPLACE, *map(str, args)], env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return done


@pytest.fixture(scope="module")
def keys(experiment, env, tmp_path_factory):
  """The KEYS grid as one cell (probed every 10 steps) and one trial after another."""
  root = tmp_path_factory.mktemp("keys")
  cell = nplace("sweep", "--config", f"{experiment}:keys", "--workdir", root / "cell", "--batch", 3,
                "--config.probe.every=10", "--config.probe.power_iters=0", env=env)
  nplace("sweep", "--config", f"{experiment}:keys", "--workdir", root / "alone", env=env)
  return root, cell.stdout


def scalars(run_dir, tag):
  return events.read_scalars(run_dir)[tag]


@pytest.mark.slow
def test_a_cell_trains_and_evaluates_each_trial_as_it_does_alone(keys):
  """Every logged train loss and eval loss (and the summary's val loss) of each trial, in the
  cell against alone, for trials apart in every free key. rtol 1e-5: float32 rounding only (the
  cell's batched matmuls and the lone run's all-reduce over the two devices sum in other
  orders); measured ~2e-7 after 20 AdamW steps. The text scores of argmaxes, the generated
  continuations' (decoded at each trial's own model.dt) among them, are the same."""
  root, stdout = keys
  assert (f"cell: 3 runs in one program ({', '.join(NAMES)}), differing in "
          f"{', '.join(cell_lib.steps.HYPERPARAMETERS)}") in stdout
  for name in NAMES:
    in_cell, alone = (Summary.read(root / which / name / "summary.json") for which in ("cell", "alone"))
    assert in_cell.val_loss == pytest.approx(alone.val_loss, rel=1e-5), name
    assert in_cell.gen_decoding == alone.gen_decoding == "greedy, prompt 16 tokens, 16 generated, 4 sequences"
    for key in ("rouge1", "rougeL", "copy_rougeL", "gen_rouge1", "gen_rouge2", "gen_rougeL"):
      assert getattr(in_cell, key) == pytest.approx(getattr(alone, key), rel=1e-6), (name, key)
    for tag in ("train/loss", "eval/loss", "eval/gen_rougeL"):
      (cell_steps, in_cell), (alone_steps, alone) = scalars(root / "cell" / name, tag), scalars(root / "alone" / name, tag)
      assert cell_steps.tolist() == alone_steps.tolist() and len(cell_steps) >= 3
      np.testing.assert_allclose(in_cell, alone, rtol=1e-5, err_msg=f"{name} {tag}")
  first = [scalars(root / "cell" / name, "train/loss")[1][0] for name in NAMES]
  assert len(set(first)) == 3  # each its own init and data
  record = json.loads((root / "cell" / "sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["completed"] * 3


@pytest.mark.slow
def test_each_trial_of_a_cell_is_a_run_of_its_own(keys, experiment, env, tmp_path):
  """Its own checkpoints, probes and summary: `nplace eval` and `nplace probe` read it alone."""
  root, _ = keys
  run = root / "cell" / NAMES[1]
  summary = Summary.read(run / "summary.json")
  saved = lambda d: sorted(int(p.name) for p in (d / "checkpoints").iterdir())
  assert saved(run) == saved(root / "alone" / NAMES[1]) and saved(run)[-2:] == [10, 20]
  nplace("eval", "--workdir", run, "--json", tmp_path / "eval.json", env=env)
  evaluated = json.loads((tmp_path / "eval.json").read_text())
  assert evaluated["val_loss"] == pytest.approx(summary.val_loss, rel=1e-6)
  assert evaluated["gen_rougeL"] == pytest.approx(summary.gen_rougeL, rel=1e-6)  # its own dt (0.1) alone
  similarity = {name: scalars(root / "cell" / name, "probe/similarity/layer_002") for name in NAMES}
  assert all(s[0].tolist() == [0, 10, 20] for s in similarity.values())
  assert len({float(s[1][-1]) for s in similarity.values()}) == 3  # each probed on its own slice
  trial = [f"--config.{key}={value}" for key, value in KEYS[1].items()]
  nplace("probe", "--config", f"{experiment}:keys", *trial, "--config.probe.power_iters=0",
         "--workdir", run, "--json", tmp_path / "probe.json", env=env)
  probed = json.loads((tmp_path / "probe.json").read_text())
  assert probed["step"] == 20 and probed["similarity"][-1] == pytest.approx(float(similarity[NAMES[1]][1][-1]), rel=1e-4)


@pytest.mark.slow
def test_report_gives_the_batched_grid_the_table_of_the_unbatched_one(keys, env, tmp_path):
  root, _ = keys
  tables = {}
  for which in ("cell", "alone"):
    nplace("report", root / which, "--out", tmp_path / which, env=env)
    text = (tmp_path / which / "report.md").read_text()
    rows = [re.sub(r"\]\([^)]*\)", "]", line) for line in text.splitlines() if line.startswith("| [seed=")]
    tables[which] = [row.split("|")[1:6] for row in rows]  # run (its link's text), status, outcome, step, val loss
  assert len(tables["cell"]) == 3
  for cell_row, alone_row in zip(tables["cell"], tables["alone"]):
    assert cell_row[:4] == alone_row[:4]  # run, status, outcome, step
    assert float(cell_row[4]) == pytest.approx(float(alone_row[4]), abs=2e-4)  # val loss, 4 decimals


@pytest.mark.slow
@pytest.mark.parametrize("mode,guard", [("stop", "select"), ("skip", "cond")])  # cond: a select under the cell's vmap
def test_a_diverging_trial_stops_alone_while_the_others_train_on(experiment, tmp_path, monkeypatch, mode, guard):
  monkeypatch.setenv("NPLACE_CACHE", str(tmp_path / "cache"))
  assert main.main(["sweep", "--config", f"{experiment}:diverge", "--workdir", str(tmp_path), "--batch", "3",
                    f"--config.train.on_divergence={mode}", f"--config.train.update_guard={guard}"]) == 0
  summaries = {name: Summary.read(tmp_path / name / "summary.json")
               for name in ("lr=0.002,seed=0", "lr=1e+30,seed=0", "lr=0.003,seed=1")}
  huge = summaries.pop("lr=1e+30,seed=0")
  if mode == "stop":
    assert huge.status == "diverged" and huge.diverged_at is not None and huge.diverged_at <= 5
  else:
    assert huge.status == "completed" and huge.skipped_steps > 10
  for name, s in summaries.items():
    assert s.status == "completed" and s.step == 20 and s.skipped_steps == 0 and math.isfinite(s.val_loss), name
    steps_logged, losses = scalars(tmp_path / name, "train/loss")
    assert steps_logged.tolist() == list(range(1, 21)) and np.isfinite(losses).all()
  if mode == "stop":  # killed after the divergence, before the cell's end: the diverged trial's summary is kept
    workdir, env = tmp_path / "killed", dict(os.environ, NPLACE_CACHE=str(tmp_path / "cache"))
    argv = [NPLACE, "sweep", "--config", f"{experiment}:diverge", "--workdir", str(workdir), "--batch", "3",
            "--config.checkpoint.keep=1"]  # step 1's checkpoint, its only one, dropped by its partners
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(proc, workdir / "lr=0.002,seed=0" / "checkpoints" / "10")
    proc.kill()
    proc.wait()
    assert Summary.read(workdir / "lr=1e+30,seed=0" / "summary.json").status == "diverged"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "(2 completed, 1 diverged, 0 failed)" in done.stdout, done.stdout[-3000:]


def pair(experiment, workdir):
  return [NPLACE, "sweep", "--config", f"{experiment}:pair", "--workdir", str(workdir), "--batch", "2"]


def wait_for(proc, path, timeout=300):
  deadline = time.time() + timeout
  while not path.exists():
    assert proc.poll() is None and time.time() < deadline, proc.communicate()[0]
    time.sleep(0.01)


@pytest.mark.slow
def test_a_cell_killed_then_preempted_resumes_every_trial_exactly(experiment, env, tmp_path):
  """Two runs over the two CPU devices (the trial axis: no all-reduce), 40 steps. SIGKILL after
  the step-20 checkpoints and a rerun; SIGTERM after step 30's: every run saves one step and
  says `preempted`; a second rerun ends with every train loss equal to the uninterrupted cell's."""
  names = ["lr=0.002,seed=0", "lr=0.003,seed=1"]
  subprocess.run(pair(experiment, tmp_path / "whole"), env=env, check=True, capture_output=True, timeout=600)
  workdir = tmp_path / "interrupted"
  proc = subprocess.Popen(pair(experiment, workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  wait_for(proc, workdir / names[1] / "checkpoints" / "20")
  proc.kill()
  proc.wait()
  assert not (workdir / names[0] / "summary.json").exists()
  proc = subprocess.Popen(pair(experiment, workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  wait_for(proc, workdir / names[0] / "checkpoints" / "30")
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=300)
  assert proc.returncode == 0 and "sweep: preempted; rerun the same command to resume" in out, out[-2000:]
  assert "'trial': 2" in out  # one run per device
  summaries = [Summary.read(workdir / name / "summary.json") for name in names]
  assert {s.status for s in summaries} == {"preempted"} and summaries[0].step == summaries[1].step < 40
  for name in names:
    assert (workdir / name / "checkpoints" / str(summaries[0].step)).is_dir()
  done = subprocess.run(pair(experiment, workdir), env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0 and "2 completed" in done.stdout, done.stdout[-3000:]
  for name in names:
    whole, resumed = scalars(tmp_path / "whole" / name, "train/loss"), scalars(workdir / name, "train/loss")
    assert whole[0].tolist() == resumed[0].tolist() == list(range(1, 41))
    np.testing.assert_array_equal(whole[1], resumed[1], err_msg=name)


def test_trials_share_a_cell_only_where_one_program_serves_them(experiment):
  base = main_command_config(f"{experiment}:mixed")
  trials = grid.expand(f"{experiment}:mixed", base, [], pathlib.Path("w"))  # pre, peri x dt 1, 0.5 x 2 seeds
  placement = lambda i: trials[i].config.model.placement
  cells = sweep.cells(trials, list(range(8)), 4)
  assert [[placement(i) for i in c] for c in cells] == [["pre"] * 4, ["peri"] * 4]
  assert [len(c) for c in sweep.cells(trials, list(range(8)), 3)] == [3, 1, 3, 1]
  assert sweep.cells(trials, list(range(8)), 1) == [[i] for i in range(8)]
  assert cell_lib.varying([trials[i].config for i in cells[0]]) == ("model.dt",)
  with pytest.raises(ConfigError, match="model.placement"):
    cell_lib.varying([trials[0].config, trials[4].config])


@pytest.mark.slow
def test_list_prints_one_runnable_command_per_cell(experiment, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("NPLACE_CACHE", str(tmp_path / "cache"))
  argv = ["sweep", "--config", f"{experiment}:mixed", "--workdir", str(tmp_path), "--batch", "3"]
  assert main.main([*argv, "--list"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split("\t")[0] for line in lines] == ["cell-000", "cell-001", "cell-002", "cell-003"]
  command = shlex.split(lines[3].split("\t")[1])
  assert command[:2] == ["nplace", "sweep"] and command[-1] == "--cell=3" and "--list" not in command
  assert main.main([*command[1:], "--config.train.steps=2"]) == 0  # cell 3: peri's fourth trial alone
  record = json.loads((tmp_path / "sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["pending"] * 7 + ["completed"]
  assert main.main([*argv, "--cell", "4"]) == 2
  assert "--cell 4: --batch 3 makes 4 cells" in capsys.readouterr().err


@pytest.mark.parametrize("trials,devices,ways", [(8, 2, 2), (3, 2, 1), (4, 8, 4), (16, 8, 8), (6, 4, 2)])
def test_the_trial_axis_takes_the_devices_that_divide_the_cell(trials, devices, ways):
  assert sharding.trial_ways(load_experiment("tiny").mesh, devices, trials) == ways


@pytest.mark.slow
def test_cells_of_one_program_compile_it_once(experiment, tmp_path, monkeypatch):
  """Two cells of one shape and placement, one varying lr and the other weight decay and eps (each
  cell's step takes all three as arguments, steps.ALWAYS_TRACED): the second cell reads every
  program the first compiled from the sweep's persistent compilation cache (DIR/.jax_cache).
  jax.monitoring's events, in-process."""
  monkeypatch.setenv("NPLACE_CACHE", str(tmp_path / "cache"))
  compiles, hit = [], []  # (function, whether the persistent cache had it) per backend compile

  def on_event(event, **_):
    if event == "/jax/compilation_cache/cache_hits" and threading.current_thread() is threading.main_thread():
      hit.append(True)  # recorded inside the backend compile it answers, before its duration

  def on_duration(event, seconds, fun_name=None, **_):
    if event == "/jax/core/compile/backend_compile_duration" and threading.current_thread() is threading.main_thread():
      compiles.append((fun_name, bool(hit)))
      hit.clear()

  jax.monitoring.register_event_listener(on_event)
  jax.monitoring.register_event_duration_secs_listener(on_duration)
  try:
    assert main.main(["sweep", "--config", f"{experiment}:shared", "--workdir", str(tmp_path / "sw"),
                      "--batch", "2"]) == 0
  finally:
    jax.monitoring.unregister_event_listener(on_event)
    jax.monitoring.unregister_event_duration_listener(on_duration)
  record = json.loads((tmp_path / "sw" / "sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["completed"] * 4
  first, second = compiles[:len(compiles) // 2], compiles[len(compiles) // 2:]
  assert [name for name, _ in first] == [name for name, _ in second], compiles
  assert not any(cached for _, cached in first) and all(cached for _, cached in second), compiles
  assert any((tmp_path / "sw" / ".jax_cache").iterdir())
  assert jax.config.jax_compilation_cache_dir is None  # the sweep's cache is the sweep's only
