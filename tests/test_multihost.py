"""`nplace train` over two `jax.distributed` processes on this host (gloo collectives, as a
2-host pod slice runs it): the same losses as one process; SIGKILL to both after a checkpoint
and a relaunch of both, then SIGTERM to both (both save the same step, summary.json says
`preempted`) and a relaunch: the loss curve of the uninterrupted two-process run."""
import json
import signal
import time

import numpy as np
import pytest

from conftest import free_port, xla_flags
from test_train import start
from nplace.logs import events

CURVE = ["--config.train.steps=24", "--config.checkpoint.every=8"]  # the preemption tests' run


def start_two(workdir, *extra, env, second=()):
  """Both processes of a 2-process run (4 CPU devices each), coordinated on a fresh port; the
  second also given `second`."""
  four = dict(env, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4"))
  port = free_port()
  return [start(workdir, *extra, "--config.distributed.initialize=True",
                f"--config.distributed.coordinator_address=127.0.0.1:{port}",
                "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}",
                *(second if i else ()), env=four)
          for i in range(2)]


def kill(procs):
  for p in procs:
    if p.poll() is None:
      p.kill()
  for p in procs:
    p.wait()


def finish(procs, timeout=600) -> list[str]:
  try:
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
  finally:
    kill(procs)  # one that hangs (its peer died) must not outlive the test
  assert [p.returncode for p in procs] == [0] * len(procs), outs
  return outs


def losses(workdir) -> dict:
  steps, values = events.read_scalars(workdir)["train/loss"]
  return dict(zip(steps.tolist(), values.tolist()))


def wait_for_checkpoint(workdir, step, procs, timeout=300):
  path = workdir / "checkpoints" / str(step)  # orbax renames the temporary dir here once complete
  deadline = time.time() + timeout
  while not path.exists():
    assert all(p.poll() is None for p in procs) and time.time() < deadline, f"no checkpoint {step}"
    time.sleep(0.01)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env):
  """The uninterrupted 24-step run in one process (8 CPU devices) and in two (4 each)."""
  root = tmp_path_factory.mktemp("reference")
  one = dict(env, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=8"))
  finish([start(root / "single", *CURVE, env=one)])
  finish(start_two(root / "multi", *CURVE, env=env))
  return root


@pytest.mark.slow
def test_two_processes_match_one_process(reference):
  # The last step (24) is a checkpoint step and no eval step: the final eval must still run.
  single, multi = losses(reference / "single"), losses(reference / "multi")
  assert sorted(multi) == list(range(1, 25))
  assert events.read_scalars(reference / "single")["eval/loss"][0].tolist() == [0, 20, 24]
  np.testing.assert_allclose([multi[s] for s in sorted(single)], [single[s] for s in sorted(single)], rtol=1e-5)


@pytest.mark.slow
def test_processes_given_different_configs_both_stop_naming_the_key(tmp_path, env):
  """The second process trained on with its own train.steps; the run recorded the first's."""
  procs = start_two(tmp_path, *CURVE, env=env, second=["--config.train.steps=25"])
  try:
    outs = [p.communicate(timeout=300)[0] for p in procs]
  finally:
    kill(procs)
  assert [p.returncode for p in procs] == [2, 2], outs
  for out, steps in zip(outs, (24, 25)):
    assert out.splitlines()[-1] == (
        f"nplace train: config error: train.steps={steps}: the processes of this run were given different "
        "values: every process must run the same command (distributed.* aside)"), out


def wait_for_logged(workdir, step, procs, timeout=300):
  """Until the event file holds train/loss at `step` (tensorboardX writes in batches)."""
  deadline = time.time() + timeout
  while step not in losses(workdir):
    assert all(p.poll() is None for p in procs) and time.time() < deadline, f"step {step} not logged"
    time.sleep(0.01)


@pytest.mark.slow
def test_sigkill_then_sigterm_to_both_resume_the_same_curve(tmp_path, reference, env):
  """SIGKILL to both after checkpoint 8 and a relaunch; then SIGTERM to both, 0.3 s apart as a
  pod's workers get their notices (a few steps of this run): both stop at one step, save it
  and say `preempted`; the second relaunch ends on the uninterrupted run's curve, bit-equal."""
  procs = start_two(tmp_path, *CURVE, env=env)
  try:
    wait_for_checkpoint(tmp_path, 8, procs)
    wait_for_logged(tmp_path, 8, procs)  # the events up to the checkpoint are on disk with it
  finally:
    kill(procs)
  assert not (tmp_path / "summary.json").exists(), "the run ended before it was killed"
  procs = start_two(tmp_path, *CURVE, env=env)
  try:
    wait_for_checkpoint(tmp_path, 16, procs)
  except BaseException:
    kill(procs)
    raise
  procs[1].send_signal(signal.SIGTERM)
  time.sleep(0.3)
  procs[0].send_signal(signal.SIGTERM)
  outs = finish(procs, timeout=60)  # a preempted run saves and exits in ~2 s here
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["status"] == "preempted", outs
  step = summary["step"]
  # Both processes saved that step: each wrote its own data position into it.
  data = tmp_path / "checkpoints" / str(step) / "data"
  assert {"process_0-of-2.json", "process_1-of-2.json"} <= {p.name for p in data.iterdir()}, outs
  finish(start_two(tmp_path, *CURVE, env=env))
  if step < 24:  # the relaunch started from that checkpoint: its event file is named by its first step
    assert any(f".from{step + 1}" in p.name for p in events.event_files(tmp_path))
  assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
  assert losses(tmp_path) == losses(reference / "multi")  # steps 1..24, bit-equal


@pytest.mark.slow
def test_a_batch_not_split_over_the_processes_is_the_global_batch(tmp_path, env):
  """Tensor parallelism across the two processes: the batch is not split over them, so both
  load the same rows. Each loaded its own half, and the run trained on other data than one
  process does (its losses from step 0's eval on), silently."""
  tensor = ["--config.train.steps=4", "--config.train.eval_every=4", "--config.model.n_head=8",
            "--config.mesh.data=1", "--config.mesh.tensor=-1"]
  one = dict(env, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=8"))
  finish([start(tmp_path / "single", *tensor, env=one)])
  outs = finish(start_two(tmp_path / "multi", *tensor, env=env))
  assert "mesh {'data': 1, 'fsdp': 1, 'tensor': 8}" in outs[0], outs
  for tag in ("train/loss", "eval/loss"):
    (steps_one, single), (steps_two, multi) = (events.read_scalars(tmp_path / run)[tag] for run in ("single", "multi"))
    assert steps_one.tolist() == steps_two.tolist()
    np.testing.assert_allclose(multi, single, rtol=1e-5, err_msg=tag)
