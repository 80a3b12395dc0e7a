"""`nplace train` end to end, in subprocesses as a user runs it: resume after SIGKILL and
SIGTERM, divergence, TensorBoard event files and the TensorBoard server (two processes:
tests/test_multihost.py)."""
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import jax
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from conftest import free_port
from nplace.commands import main
from nplace.runtime import chips, workdirs

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPLACE = pathlib.Path(sys.executable).parent / "nplace"
SMALL = [  # the tiny preset, smaller still: a step takes milliseconds
    "--config", str(ROOT / "experiments/tiny.py:pre"),
    "--config.model.n_layer=2", "--config.model.d_model=32", "--config.model.remat=none",
    "--config.data.seq_len=16", "--config.data.synthetic_tokens=65536",
    "--config.train.batch_size=8", "--config.train.log_every=1", "--config.train.eval_every=20",
    "--config.train.eval_batches=2", "--config.checkpoint.every=20", "--config.optim.warmup_steps=5",
    "--config.train.peak_flops=2e11",
]
SCALARS = ["train/loss", "train/grad_norm", "train/lr", "eval/loss", "eval/perplexity",
           "data/frequency_loss", "data/entropy_rate", "perf/tokens_per_sec", "perf/step_time",
           "perf/mfu", "train/loss_spikes"]


def start(workdir, *extra, env):
  return subprocess.Popen([NPLACE, "train", "--workdir", str(workdir), *SMALL, *extra], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run(workdir, *extra, env, expect=0):
  proc = start(workdir, *extra, env=env)
  out, _ = proc.communicate(timeout=600)
  assert proc.returncode == expect, out
  return out


def summary(workdir):
  return json.loads((workdir / "summary.json").read_text())


def scalars(workdir, tag):
  return {e.step: e.value for e in logged(workdir, tag)}


def logged(workdir, tag):
  """The tag's events as TensorBoard reads them (a step logged twice is there twice)."""
  acc = event_accumulator.EventAccumulator(str(workdir), size_guidance={"scalars": 0})
  acc.Reload()
  return acc.Scalars(tag)


def wait_for_checkpoint(workdir, step, proc, timeout=300):
  path = workdir / "checkpoints" / str(step)  # orbax renames the temporary dir here once complete
  deadline = time.time() + timeout
  while not path.exists():
    assert proc.poll() is None and time.time() < deadline, f"no checkpoint {step}"
    time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env):
  """An uninterrupted 40-step run, probed at steps 0, 20 and 40 and, early, at 5 and 10."""
  workdir = tmp_path_factory.mktemp("reference")
  run(workdir, "--config.train.steps=40", "--config.probe.every=20", "--config.probe.early_every=5",
      "--config.probe.early_until=10", "--config.probe.batch_size=2", env=env)
  return workdir


@pytest.mark.slow
def test_run_completes_with_summary_and_scalars(reference):
  s = summary(reference)
  assert s["status"] == "completed" and s["step"] == 40 and s["diverged_at"] is None
  assert s["entropy_rate"] < s["frequency_loss"]
  evals = scalars(reference, "eval/loss")
  assert s["val_loss"] == pytest.approx(evals[40]) and evals[40] < evals[0] - 0.3
  assert s["tokens_per_sec"] > 0
  acc = event_accumulator.EventAccumulator(str(reference), size_guidance={"scalars": 0})
  acc.Reload()
  assert set(SCALARS) <= set(acc.Tags()["scalars"])
  assert sorted(scalars(reference, "train/loss")) == list(range(1, 41))
  assert sorted(scalars(reference, "eval/loss")) == [0, 20, 40]
  assert "config/text_summary" in acc.Tags()["tensors"]
  assert s["collapsed"] is False


@pytest.mark.slow
def test_probes_run_at_init_every_n_steps_and_on_the_early_schedule(reference):
  """The early steps (5, 10) are probed but draw no images."""
  acc = event_accumulator.EventAccumulator(str(reference), size_guidance={"scalars": 0, "images": 0})
  acc.Reload()
  for name, first in (("similarity", "layer_001"), ("grad_h", "layer_001"), ("jacobian_frobenius", "layer_000"),
                      ("norm_backward", "attn_001")):
    assert [e.step for e in acc.Scalars(f"probe/{name}/{first}")] == [0, 5, 10, 20, 40], name
    assert [e.step for e in acc.Images(f"probe_profile/{name}")] == [0, 20, 40]
  assert [e.step for e in acc.Images("probe_heatmap/similarity")] == [0, 20, 40]
  assert "probe_hist/similarity" in acc.Tags()["histograms"]


@pytest.mark.slow
def test_probe_command_reads_a_checkpoint(reference, tmp_path, env):
  out = tmp_path / "probe.json"
  done = subprocess.run([NPLACE, "probe", "--workdir", str(reference), "--step", "20", "--json", str(out),
                         *SMALL, "--config.probe.batch_size=2"], env=env, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  result = json.loads(out.read_text())
  assert result["step"] == 20 and result["n_layer"] == 2 and len(result["similarity"]) == 2
  # The same probes at the same checkpoint on the same batch as training logged at step 20.
  logged = scalars(reference, "probe/similarity/layer_002")[20]
  assert result["similarity"][1] == pytest.approx(logged, rel=1e-4)


@pytest.mark.slow
def test_probe_reads_the_checkpoints_config_and_says_what_it_does(reference, tmp_path, capsys):
  # no --config: the run's own (2 layers x 32, not tiny.py's), as `nplace eval` reads it
  out = tmp_path / "probe.json"
  assert main.main(["probe", "--workdir", str(reference), "--step", "20", "--json", str(out),
                    "--config.probe.batch_size=2"]) == 0
  result = json.loads(out.read_text())
  assert (result["placement"], result["n_layer"], result["step"]) == ("pre", 2, 20)
  assert result["similarity"][1] == pytest.approx(scalars(reference, "probe/similarity/layer_002")[20], rel=1e-4)
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == f"probing pre (2 x 32) {reference} at step 20: compiling the suite, then running it..."
  assert lines[-1].startswith(f"wrote {out} (")


@pytest.mark.slow
def test_sigkill_after_checkpoint_resumes_exactly(tmp_path, reference, env):
  proc = start(tmp_path, "--config.train.steps=40", env=env)
  wait_for_checkpoint(tmp_path, 20, proc)
  proc.kill()
  proc.wait()
  assert not (tmp_path / "summary.json").exists()
  out = run(tmp_path, "--config.train.steps=40", env=env)
  assert f"resumed from step 20 (checkpoint {tmp_path / 'checkpoints' / '20'})" in out
  resumed, uninterrupted = scalars(tmp_path, "train/loss"), scalars(reference, "train/loss")
  assert sorted(resumed) == list(range(1, 41))  # nothing the killed run wrote past 20 survives twice
  assert [resumed[s] for s in range(21, 41)] == [uninterrupted[s] for s in range(21, 41)]
  assert summary(tmp_path)["status"] == "completed"


class Killed(BaseException):
  """The process killed in the middle of a step's hooks."""


@pytest.mark.slow
def test_a_run_killed_during_an_eval_redoes_it_on_resume(tmp_path, capsys, monkeypatch):
  from nplace.train import cell
  evaluate, calls = cell.Cell.evaluate, []

  def killed_at_the_second_eval(self, *args):  # step 0's eval, then step 20's: killed there
    calls.append(1)
    if len(calls) == 2:
      raise Killed()
    return evaluate(self, *args)
  monkeypatch.setattr(cell.Cell, "evaluate", killed_at_the_second_eval)
  args = ["train", "--workdir", str(tmp_path), *SMALL, "--config.train.steps=40", "--config.checkpoint.every=10"]
  with pytest.raises(Killed):
    main.main(args)
  monkeypatch.setattr(cell.Cell, "evaluate", evaluate)
  assert main.main([*args, "--config.optim.lr=4e-3"]) == 0  # accepted, as MaxText does: a rate changed mid-run
  assert "resumed from step 10 " in capsys.readouterr().out  # step 20's checkpoint waits for its eval
  assert sorted(scalars(tmp_path, "eval/loss")) == [0, 20, 40]
  acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
  acc.Reload()
  shown = {e.step: json.loads(e.tensor_proto.string_val[0].decode().strip("`\n"))["optim"]["lr"]
           for e in acc.Tensors("config/text_summary")}
  assert shown == {0: 2e-3, 11: 4e-3}  # each start shows the config it trains on


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_landed_shows_each_step_once(tmp_path, reference, env):
  """Its event files stay; the rerun starts at step 0 and logs steps 1, 2, ... again, which
  TensorBoard showed twice (a line running back from the last step to the first)."""
  workdir = tmp_path / "run"
  shutil.copytree(reference, workdir)
  shutil.rmtree(workdir / "checkpoints")
  (workdir / "summary.json").unlink()
  run(workdir, "--config.train.steps=10", env=env)
  assert [e.step for e in logged(workdir, "train/loss")] == list(range(1, 11))
  assert [e.step for e in logged(workdir, "eval/loss")] == [0, 10]


@pytest.mark.slow
def test_a_run_resumed_at_its_last_step_ends_as_it_had(tmp_path, capsys):
  """Its summary.json lost (a kill between its last checkpoint and the summary, or SIGTERM at that
  step): the rerun trains and evaluates nothing. Its summary had null losses, and the last eval,
  off the eval grid, ran after the checkpoint and was run again (eval/* logged twice)."""
  args = ["train", "--workdir", str(tmp_path), *SMALL, "--config.train.steps=30", "--config.checkpoint.every=10"]
  assert main.main(args) == 0
  first = summary(tmp_path)
  (tmp_path / "summary.json").unlink()
  assert main.main(args) == 0
  assert "resumed from step 30 " in capsys.readouterr().out
  assert {k: v for k, v in summary(tmp_path).items() if k != "tokens_per_sec"} == {
      k: v for k, v in first.items() if k != "tokens_per_sec"}
  assert [e.step for e in logged(tmp_path, "eval/loss")] == [0, 20, 30]


@pytest.mark.slow
def test_a_kill_while_summary_json_is_written_leaves_none(tmp_path, monkeypatch):
  """Half a summary.json made the rerun refuse the run; none makes it resume (then finish)."""
  args = ["train", "--workdir", str(tmp_path), *SMALL, "--config.train.steps=10"]
  path_type = type(workdirs.resolve(tmp_path))
  write_bytes = path_type.write_bytes
  write_text = path_type.write_text

  def killed_midway(write):
    def half(self, data, *args, **kwargs):
      if self.name.startswith("summary.json"):
        write(self, data[:len(data) // 2])
        raise Killed()
      return write(self, data, *args, **kwargs)
    return half
  monkeypatch.setattr(path_type, "write_bytes", killed_midway(write_bytes))
  monkeypatch.setattr(path_type, "write_text", killed_midway(write_text))
  with pytest.raises(Killed):
    main.main(args)
  assert not (tmp_path / "summary.json").exists()
  monkeypatch.undo()
  assert main.main(args) == 0 and summary(tmp_path)["status"] == "completed"


@pytest.mark.slow
def test_a_finished_run_is_left_as_it_is_and_another_train_steps_needs_extend(tmp_path, reference, capsys):
  """Another model is refused as on resuming (it printed "finished" and exited 0)."""
  workdir = tmp_path / "run"
  shutil.copytree(reference, workdir)
  kept = (workdir / "summary.json").read_bytes()
  train = lambda *extra: main.main(["train", "--workdir", str(workdir), *SMALL, *extra])
  assert train("--config.train.steps=40") == 0
  assert f"{workdir}: finished, completed at step 40 (summary.json kept" in capsys.readouterr().out
  assert train("--config.train.steps=40", "--config.model.placement=post") == 2
  assert capsys.readouterr().err == ("nplace train: config error: model.placement='post': the checkpoint at step 40 "
                                     "holds a model with placement='pre'\n")
  assert (workdir / "summary.json").read_bytes() == kept
  assert train("--config.train.steps=50") == 2
  err = capsys.readouterr().err
  assert err.startswith("nplace train: config error: train.steps=50: ") and err.count("\n") == 1, err
  assert "started with train.steps=40 (checkpoint at step 40)" in err and "--extend" in err
  assert (workdir / "summary.json").read_bytes() == kept
  assert train("--config.train.steps=50", "--extend") == 0
  assert "resumed from step 40" in capsys.readouterr().out
  assert summary(workdir)["step"] == 50 and summary(workdir)["status"] == "completed"
  # TensorBoard's text tab shows the config each segment trained with, at its first step
  acc = event_accumulator.EventAccumulator(str(workdir), size_guidance={"tensors": 0})
  acc.Reload()
  configs = {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors("config/text_summary")}
  assert sorted(configs) == [0, 41] and '"steps": 50' in configs[41] and '"steps": 40' in configs[0]


@pytest.mark.slow
def test_sigterm_saves_reports_preempted_and_resumes(tmp_path, reference, env):
  proc = start(tmp_path, "--config.train.steps=40", "--config.checkpoint.every=10", env=env)
  wait_for_checkpoint(tmp_path, 10, proc)
  t0 = time.time()
  proc.send_signal(signal.SIGTERM)
  proc.communicate(timeout=60)
  assert proc.returncode == 0 and time.time() - t0 < 30
  s = summary(tmp_path)
  assert s["status"] == "preempted" and str(s["step"]) in os.listdir(tmp_path / "checkpoints")
  if s["step"] < 40:
    run(tmp_path, "--config.train.steps=40", "--config.checkpoint.every=10", env=env)
  assert summary(tmp_path)["status"] == "completed"
  resumed, uninterrupted = scalars(tmp_path, "train/loss"), scalars(reference, "train/loss")
  assert [resumed[s] for s in range(1, 41)] == [uninterrupted[s] for s in range(1, 41)]


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_the_rerun_resumes(tmp_path, reference, env):
  proc = start(tmp_path, "--config.train.steps=40", "--config.checkpoint.every=10", env=env)
  wait_for_checkpoint(tmp_path, 10, proc)
  proc.send_signal(signal.SIGINT)
  out, _ = proc.communicate(timeout=60)
  assert proc.returncode == 128 + signal.SIGINT and "Traceback" not in out, out
  assert out.endswith("nplace train: interrupted; rerun the same command to resume from the last checkpoint\n"), out
  assert "resumed from step" in run(tmp_path, "--config.train.steps=40", "--config.checkpoint.every=10", env=env)
  resumed, uninterrupted = scalars(tmp_path, "train/loss"), scalars(reference, "train/loss")
  assert [resumed[s] for s in range(1, 41)] == [uninterrupted[s] for s in range(1, 41)]


@pytest.mark.slow
def test_a_ctrl_c_a_library_swallows_still_stops_the_run(tmp_path, capsys, monkeypatch):
  """orbax's wait on a save catches BaseException: a Ctrl-C landing there was lost and the run
  trained on to its end (the fresh-clone suite under load saw it)."""
  from nplace.train import checkpoint
  save = checkpoint.save

  def save_swallowing_ctrl_c(mngr, step, *args, **kwargs):
    if step == 10:
      try:  # as orbax's wait_until_finished, joining a save's thread
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
      except BaseException:  # noqa: BLE001 - the library's, not ours
        pass
    return save(mngr, step, *args, **kwargs)
  monkeypatch.setattr(checkpoint, "save", save_swallowing_ctrl_c)
  args = ["train", "--workdir", str(tmp_path), *SMALL, "--config.train.steps=40", "--config.checkpoint.every=10"]
  assert main.main(args) == main.INTERRUPTED
  assert capsys.readouterr().err.endswith("nplace train: interrupted; rerun the same command to resume from the "
                                          "last checkpoint\n")
  assert not (tmp_path / "summary.json").exists()


@pytest.mark.slow
def test_a_truncated_checkpoint_file_is_one_line_naming_it_and_train_falls_back(tmp_path, reference, env, capsys):
  workdir = tmp_path / "run"
  shutil.copytree(reference, workdir)
  largest = max((p for p in (workdir / "checkpoints" / "40").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  largest.write_bytes(largest.read_bytes()[:1000])
  for argv in (["eval", "--workdir", str(workdir)],
               ["probe", "--workdir", str(workdir), *SMALL, "--json", str(tmp_path / "probe.json")]):
    assert main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nplace {argv[0]}: checkpoint 40 under {workdir / 'checkpoints'}: its state does not "
                          "restore (")
    assert f'local file "{workdir / "checkpoints" / "40"}' in err and err.endswith("an older one: --step 20\n"), err
  (workdir / "checkpoints" / "40" / "config" / "metadata").write_text("")  # its config emptied too
  for argv in (["eval", "--workdir", str(workdir)], ["convert", "--to-hf", "--workdir", str(workdir),
                                                      "--out", str(tmp_path / "hf")]):
    assert main.main(argv) == 2
    assert capsys.readouterr().err == (f"nplace {argv[0]}: checkpoint 40 under {workdir / 'checkpoints'}: its config "
                                       "does not restore (JSONDecodeError: Expecting value: line 1 column 1 (char 0)); "
                                       "an older one: --step 20\n")
  (workdir / "summary.json").unlink()
  out = run(workdir, "--config.train.steps=40", env=env)
  assert "warning: checkpoint 40 failed to restore (JSONDecodeError: Expecting value" in out and "resumed from step 20" in out
  # orbax's other reads of the broken checkpoint end after it has failed: none of them prints
  assert not re.search("Traceback|Exception ignored|Event loop is closed|never retrieved", out), out[:3000]


@pytest.mark.slow
def test_huge_learning_rate_diverges_and_keeps_a_checkpoint(tmp_path, env):
  run(tmp_path, "--config.train.steps=40", "--config.optim.lr=1e30", "--config.optim.warmup_steps=0",
      "--config.optim.clip_norm=0", "--config.checkpoint.every=1", env=env)
  s = summary(tmp_path)
  assert s["status"] == "diverged" and s["diverged_at"] == s["step"] and 1 <= s["step"] < 40
  assert max(scalars(tmp_path, "train/loss")) <= s["step"]
  from nplace.train import checkpoint
  from nplace.config import experiment
  config = experiment("tiny", "pre")
  config.model.update(n_layer=2, d_model=32)
  params, step = checkpoint.restore_params(config, tmp_path)
  assert step <= s["step"] and all(np.isfinite(x).all() for x in jax.tree.leaves(params))


@pytest.mark.slow
def test_tensorboard_server_serves_the_scalars(reference):
  port = free_port()
  server = subprocess.Popen([pathlib.Path(sys.executable).parent / "tensorboard", "--logdir", str(reference),
                             "--host", "127.0.0.1", "--port", str(port), "--load_fast=false"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  base = f"http://127.0.0.1:{port}/data/plugin/scalars"
  try:
    deadline, tags = time.time() + 120, {}
    while "train/loss" not in tags.get(".", {}):
      assert time.time() < deadline and server.poll() is None, "tensorboard did not serve the run"
      try:
        tags = json.loads(urllib.request.urlopen(f"{base}/tags", timeout=5).read())
      except OSError:
        time.sleep(0.5)
    assert set(SCALARS) <= set(tags["."])
    points = json.loads(urllib.request.urlopen(f"{base}/scalars?run=.&tag=train/loss", timeout=5).read())
    served = {step: value for _, step, value in points}
    want = scalars(reference, "train/loss")
    assert served.keys() == want.keys()
    np.testing.assert_allclose([served[s] for s in want], list(want.values()), rtol=1e-6)
  finally:
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize("override,key", [
    ("--config.mesh.data=3", "mesh"),
    ("--config.train.eval_batches=100000", "train.eval_batches"),
    ("--config.train.grad_accum=3", "train.grad_accum"),
    ("--config.train.on_divergence=ignore", "train.on_divergence"),
    ("--config.probe.every=2 --config.probe.batch_size=100000", "probe.batch_size"),  # refused after init, files left
])
def test_bad_training_config_is_one_line_before_compiling(tmp_path, capsys, override, key):
  from nplace.commands import main
  code = main.main(["train", "--workdir", str(tmp_path / "run"), *SMALL, f"--config.data.cache_dir={tmp_path}",
                   *override.split()])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1 and key in err, err
  assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_train_state_larger_than_the_devices_memory_is_one_line_before_anything_is_built(tmp_path, capsys):
  code = main.main(["train", "--workdir", str(tmp_path / "run"), *SMALL, f"--config.data.cache_dir={tmp_path}",
                    "--config.model.n_layer=100000000"])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert re.fullmatch(r"nplace train: config error: model: model.n_layer=100000000, model.d_model=32, "
                      r"model.vocab_size=\d+, model.max_len=\d+: the train state \(parameters and AdamW moments\) "
                      r"needs [\d,]+ bytes, more than the [\d,]+ bytes of memory of the \d+ cpu devices it would "
                      r"train on together: make the model smaller\n", err), err
  assert not (tmp_path / "run" / "checkpoints").exists() and not list(tmp_path.rglob("meta.json"))


def test_device_memory_is_the_accelerators_limits_or_the_hosts_and_unknown_is_none(monkeypatch):
  class Device:
    def __init__(self, platform, stats, process_index=0):
      self.platform, self.stats, self.process_index = platform, stats, process_index

    def memory_stats(self):
      return self.stats

  gpus = [Device("gpu", {"bytes_limit": 80}), Device("gpu", {"bytes_limit": 80})]
  assert chips.memory_bytes(gpus) == 160
  assert chips.memory_bytes(gpus + [Device("gpu", {"bytes_limit": 80}, process_index=1)]) == 240  # counted as ours
  assert chips.memory_bytes(gpus + [Device("gpu", None)]) is None
  monkeypatch.setattr(chips, "_host_bytes", lambda: 1000)
  assert chips.memory_bytes([Device("cpu", None), Device("cpu", None)]) == 1000  # one host's, shared
  assert chips.memory_bytes([Device("cpu", None), Device("cpu", None, process_index=1)]) == 2000


@pytest.mark.parametrize("override", ["--config.data.val_fraction=0.5", "--config.data.seq_len=8"])
def test_a_resume_on_another_split_or_window_is_refused(tmp_path, capsys, override):
  """A resume with another data.val_fraction trained on, and evaluated on, tokens its first steps
  had held out or trained on (the tokens' hash is the same): it said "resumed from step N"."""
  import orbax.checkpoint as ocp
  from nplace.commands import train
  from nplace.train import checkpoint
  argv = ["--workdir", str(tmp_path / "run"), *SMALL, f"--config.data.cache_dir={tmp_path}", "--config.train.steps=4"]
  config = train.config_of(shlex.join(["nplace", "train", *argv]))
  mngr = checkpoint.manager(tmp_path / "run", config.checkpoint)  # a checkpoint's config is what the check reads
  mngr.save(2, args=ocp.args.Composite(config=ocp.args.JsonSave(config.to_dict())))
  mngr.wait_until_finished()
  mngr.close()
  before = sorted((p, p.read_bytes() if p.is_file() else None) for p in (tmp_path / "run").rglob("*"))
  key, _, value = override.removeprefix("--config.").partition("=")
  assert main.main(["train", *argv, override]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"nplace train: config error: {key}={float(value) if '.' in value else int(value)!r}: "
                        f"{tmp_path / 'run'} holds a run trained with {key}=") and err.count("\n") == 1, err
  assert sorted((p, p.read_bytes() if p.is_file() else None) for p in (tmp_path / "run").rglob("*")) == before


def test_train_needs_a_workdir(capsys):
  from nplace.commands import main
  assert main.main(["train", *SMALL]) == 2 and "--workdir" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_whose_corpus_changed_is_not_resumed_on_the_new_tokens(tmp_path, capsys):
  """A resume reads the corpus anew: a file changed under a stopped run trained it on other
  data, unannounced (its frequency loss moved mid-run)."""
  from nplace.commands import main
  corpus, rng = tmp_path / "corpus.txt", np.random.default_rng(0)
  corpus.write_text("".join(rng.choice(list("abcdefgh \n"), 20000)))
  argv = ["train", "--workdir", str(tmp_path / "run"), *SMALL, f"--config.data.source=text:{corpus}",
          "--config.data.tokenizer=byte", "--config.model.vocab_size=257", f"--config.data.cache_dir={tmp_path}",
          "--config.data.val_fraction=0.1", "--config.checkpoint.every=2"]
  assert main.main([*argv, "--config.train.steps=2"]) == 0
  recorded = json.loads((tmp_path / "run" / "data.json").read_text())
  kept = corpus.read_text()
  corpus.write_text(kept[::-1])  # the same bytes, in another order
  capsys.readouterr()
  assert main.main([*argv, "--config.train.steps=4", "--extend"]) == 2
  assert capsys.readouterr().err.startswith(f"nplace train: {tmp_path / 'run'} was trained on other tokens of "
                                            f"text:{corpus} (sha256 {recorded['tokens_sha256'][:12]}..., now ")
  corpus.write_text(kept)
  assert main.main([*argv, "--config.train.steps=4", "--extend"]) == 0
  assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 4
