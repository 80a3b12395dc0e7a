"""Bucket workdirs (`gs://`) against a real Cloud Storage JSON API (fake-gcs-server, the `gcs`
fixture in conftest.py): event files, atomic JSON, the writability check; `nplace train`
killed with SIGKILL in a bucket and resumed ends where a local run does, with quiet output;
`nplace eval`, `probe`, `report`, `plot` and TensorBoard read the bucket run; `nplace sweep` killed
mid-trial in a bucket and rerun finishes its grid, and `--record` writes its record again."""
import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import PROBE_RUN, free_port
from nplace.errors import UsageError
from nplace.logs import events
from nplace.logs.writer import Writer
from nplace.runtime import workdirs

NPLACE = pathlib.Path(sys.executable).parent / "nplace"


def test_resolve_keeps_uris_and_makes_local_paths_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(workdirs.resolve("gs://b/run")) == "gs://b/run" and workdirs.is_remote(workdirs.resolve("gs://b/run"))
  assert workdirs.resolve("run") == tmp_path / "run" and not workdirs.is_remote(workdirs.resolve("run"))


def test_event_files_reach_a_bucket_and_a_resumed_run_keeps_its_history(gcs):
  uri, bucket = gcs.create_bucket()
  first = Writer(f"{uri}/run", purge_step=None, active=True)
  for step in (1, 2, 3):
    first.scalars(step, {"train/loss": 10.0 - step})
  first.sync()
  assert events.read_scalars(bucket / "run")["train/loss"][0].tolist() == [1, 2, 3]
  first.close()  # a run killed after step 3 was checkpointed at 2: the resume purges step 3

  uploaded = {p.name for p in events.event_files(bucket / "run")}
  assert len(uploaded) == 1  # nothing written after the sync: no empty next segment
  resumed = Writer(f"{uri}/run", purge_step=3, active=True)
  assert uploaded == {p.name for p in events.event_files(resumed.events.local)}  # history for the heatmaps
  resumed.scalars(3, {"train/loss": 0.5})
  resumed.close()
  steps, values = events.read_scalars(bucket / "run")["train/loss"]
  assert steps.tolist() == [1, 2, 3] and values.tolist() == [9.0, 8.0, 0.5]
  assert len(events.event_files(bucket / "run")) == len(uploaded) + 1 and not resumed.events.local.exists()


def test_write_atomic_replaces_the_object(gcs):
  uri, bucket = gcs.create_bucket()
  path = workdirs.resolve(f"{uri}/run/counters.json")
  workdirs.write_atomic(path, "{}")
  workdirs.write_atomic(path, '{"2": 1}')
  assert path.read_text() == '{"2": 1}' and (bucket / "run/counters.json").read_text() == '{"2": 1}'
  assert [p.name for p in (bucket / "run").iterdir()] == ["counters.json"]  # no temporary object left


class _Refusing(http.server.BaseHTTPRequestHandler):
  """A Cloud Storage endpoint that refuses everything with `code`: 403 as for an account without
  write access, 400 as for a bucket name Cloud Storage does not accept."""
  code, message = 403, "caller does not have storage.objects.create"

  def _refuse(self):
    body = json.dumps({"error": {"code": self.code, "message": self.message}})
    self.send_response(self.code)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body.encode())

  do_GET = do_POST = do_PUT = do_DELETE = _refuse

  def log_message(self, *_):
    pass


class _BadName(_Refusing):
  code, message = 400, "Invalid bucket name: 'Bad_Bucket'"


def _refused(handler, uri, monkeypatch) -> str:
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
  try:
    with pytest.raises(UsageError) as refused:
      workdirs.check_writable(workdirs.resolve(uri))
  finally:
    server.shutdown()
  return str(refused.value)


def test_check_writable_is_one_line_naming_the_workdir(gcs, tmp_path, monkeypatch, caplog):
  uri, bucket = gcs.create_bucket()
  workdirs.check_writable(workdirs.resolve(f"{uri}/run"))  # a bucket that is there: fine,
  assert [p for p in bucket.rglob("*") if p.is_file()] == []  # and no object stays behind
  with pytest.raises(UsageError) as missing:
    workdirs.check_writable(workdirs.resolve("gs://no-such-bucket/run"))
  assert str(missing.value) == "--workdir gs://no-such-bucket/run: the bucket 'no-such-bucket' does not exist"

  message = _refused(_Refusing, f"{uri}/run", monkeypatch)
  assert message.startswith(f"--workdir {uri}/run: cannot write there (") and "Forbidden" in message
  assert "\n" not in message
  # gcsfs logged a 400 with its traceback (and a network failure after its retries) before the line
  message = _refused(_BadName, "gs://Bad_Bucket/run", monkeypatch)
  assert message.startswith("--workdir gs://Bad_Bucket/run: cannot write there (") and "Invalid bucket name" in message
  assert [r for r in caplog.records if r.name.startswith("gcsfs")] == []

  (tmp_path / "file").write_text("")
  with pytest.raises(UsageError, match="is a file, not a directory"):
    workdirs.check_writable(workdirs.resolve(tmp_path / "file" / "run"))
  workdirs.check_writable(workdirs.resolve(tmp_path / "new" / "run"))
  assert not (tmp_path / "new").exists()


def test_train_into_a_missing_bucket_is_one_line_before_anything_starts(gcs, tmp_path, capsys):
  from nplace.commands import main
  code = main.main(["train", "--workdir", "gs://no-such-bucket/run", *PROBE_RUN,
                    f"--config.data.cache_dir={tmp_path}"])
  err = capsys.readouterr().err
  assert code == 2 and err == ("nplace train: --workdir gs://no-such-bucket/run: the bucket "
                               "'no-such-bucket' does not exist\n")
  assert list(tmp_path.iterdir()) == []  # no data prepared, nothing compiled


ROOT = pathlib.Path(__file__).resolve().parent.parent
# One CPU device each: the fixture runs two trainings side by side beside the other xdist worker,
# and split into a device per core their all-reduces waited on a starved device thread past XLA
# CPU's 40 s rendezvous limit, aborting a run (twice in 14-minute suites). The split is tested
# in test_cpu_split.py; what these tests check, the bucket, is the same on one device.
RUN = [  # tiny peri, 8 steps: checkpoints at 4 and 8, eval at 0, 4, 8, probes (with images) at 0 and 8
    "--config", str(ROOT / "experiments/tiny.py:peri"), "--config.train.steps=8",
    "--config.model.n_layer=2", "--config.model.d_model=32", "--config.data.seq_len=16",
    "--config.data.synthetic_tokens=65536", "--config.train.batch_size=8", "--config.train.log_every=1",
    "--config.train.eval_every=4", "--config.train.eval_batches=1", "--config.checkpoint.every=4",
    "--config.probe.every=8", "--config.probe.batch_size=2", "--config.probe.hutchinson_probes=2",
    "--config.probe.power_iters=0", "--config.model.attention_impl=dot_product", "--config.train.cpu_devices=1",
]
GCSFS_NOISE = ("Could not determine bucket type", "WARNING:gcsfs", "ERROR:gcsfs")


@pytest.fixture(scope="module")
def env(gcs, tmp_path_factory):
  """nplace subprocesses' environment: the server's variables (set by `gcs`), a data cache,
  and a temporary directory of their own (a killed run leaves its event staging there)."""
  tmp = tmp_path_factory.mktemp("nplace-tmp")
  return dict(os.environ, NPLACE_CACHE=str(tmp / "cache"), JAX_PLATFORMS="cpu", TMPDIR=str(tmp))


def nplace(*argv, env):
  return subprocess.Popen([NPLACE, *map(str, argv)], env=env, cwd=env["TMPDIR"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def finish(proc, expect=0) -> str:
  out, _ = proc.communicate(timeout=600)
  assert proc.returncode == expect, out
  return out


def wait_for(path: pathlib.Path, proc, timeout=300):
  deadline = time.time() + timeout
  while not path.exists():
    if proc.poll() is not None:
      pytest.fail(f"it ended before writing {path}: {proc.communicate()[0]}")
    assert time.time() < deadline, f"no {path} after {timeout} s"
    time.sleep(0.01)


@pytest.fixture(scope="module")
def runs(gcs, env, tmp_path_factory):
  """A local 8-step run and the same run in a bucket, SIGKILLed once checkpoint 4 is there and
  rerun: {"local": its dir, "uri": the bucket run, "bucket": where its objects lie,
  "outputs": [killed run's output, resumed run's output]}."""
  local = tmp_path_factory.mktemp("local") / "run"
  uri, bucket = gcs.create_bucket()
  uri, bucket = f"{uri}/run", bucket / "run"
  reference = nplace("train", "--workdir", local, *RUN, env=env)  # side by side: 2 cores
  killed = nplace("train", "--workdir", uri, *RUN, env=env)
  try:
    wait_for(bucket / "checkpoints/4/commit_success.txt", killed)  # orbax's last write of a GCS step
    killed.kill()
    first = killed.communicate()[0]
    assert not (bucket / "summary.json").exists(), "the run ended before it was killed"
    finish(reference)
  finally:
    for proc in (reference, killed):
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  second = finish(nplace("train", "--workdir", uri, *RUN, env=env))
  return {"local": local, "uri": uri, "bucket": bucket, "outputs": [first, second]}


@pytest.mark.slow
def test_a_killed_bucket_run_resumes_to_the_local_runs_losses(runs):
  bucket, local = events.read_scalars(runs["bucket"]), events.read_scalars(runs["local"])
  steps, losses = bucket["train/loss"]
  assert steps.tolist() == list(range(1, 9))  # nothing the killed run logged past 4 is there twice
  assert any(p.name.endswith(".from5") for p in events.event_files(runs["bucket"]))  # resumed from 4
  assert losses.tolist() == local["train/loss"][1].tolist()  # every train loss, bit-equal
  # The eval at 4 ran after checkpoint 4's upload, so it died with the killed run.
  assert {0, 8} <= set(bucket["eval/loss"][0].tolist()) <= {0, 4, 8}
  summary = json.loads((runs["bucket"] / "summary.json").read_text())
  assert summary["status"] == "completed" and summary["step"] == 8
  assert summary["val_loss"] == json.loads((runs["local"] / "summary.json").read_text())["val_loss"]


@pytest.mark.slow
def test_a_bucket_runs_output_holds_no_gcsfs_warning(runs):
  for out in runs["outputs"]:
    noise = [line for line in out.splitlines() if any(n in line for n in GCSFS_NOISE)]
    assert noise == [], "\n".join(noise)
  assert "completed at step 8" in runs["outputs"][1]


@pytest.mark.slow
def test_eval_and_probe_read_a_bucket_run_and_write_into_a_bucket(runs, env, tmp_path):
  evaluated = nplace("eval", "--workdir", runs["uri"], "--json", f"{runs['uri']}/evals/eval.json", env=env)
  probed = nplace("probe", "--workdir", runs["uri"], "--step", "8", "--json", tmp_path / "probe.json", *RUN,
                  env=env)  # side by side
  outs = [finish(evaluated), finish(probed)]
  evaluation = json.loads((runs["bucket"] / "evals/eval.json").read_text())
  summary = json.loads((runs["bucket"] / "summary.json").read_text())
  assert evaluation["step"] == 8 and evaluation["val_loss"] == pytest.approx(summary["val_loss"], rel=1e-5)
  result = json.loads((tmp_path / "probe.json").read_text())
  logged = events.read_scalars(runs["local"])["probe/similarity/layer_002"]  # what training logged at 8
  assert result["step"] == 8 and result["similarity"][1] == pytest.approx(logged[1][logged[0].tolist().index(8)],
                                                                           rel=1e-4)
  assert not [line for out in outs for line in out.splitlines() if any(n in line for n in GCSFS_NOISE)]


@pytest.mark.slow
def test_report_and_plot_read_a_bucket_run(runs, env, tmp_path):
  reported = nplace("report", runs["uri"], "--out", tmp_path / "report", env=env)
  plotted = nplace("plot", runs["uri"], "--probe", "similarity", "--out", f"{runs['uri']}/plots/similarity.png",
                   env=env)  # side by side
  out = finish(reported)
  finish(plotted)
  assert "report:" in out and "completed" in (tmp_path / "report/report.md").read_text()
  assert (runs["bucket"] / "plots/similarity.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_tensorboard_lists_a_bucket_runs_scalars_and_images(runs, env):
  """`--load_fast=false`: TensorBoard's Python loader reads gs:// through fsspec, so gcsfs and
  STORAGE_EMULATOR_HOST. The default Rust data server (tensorboard-data-server, `--load_fast=auto`)
  has a GCS client of its own, fixed on https://storage.googleapis.com with Google credentials
  (gcp_auth): it cannot be pointed at a server on localhost, and without credentials its
  loader thread panics in TokenStore::authenticate and the run never appears."""
  want = set(events.read_scalars(runs["bucket"]))
  port = free_port()
  server = subprocess.Popen([NPLACE.parent / "tensorboard", "--logdir", runs["uri"], "--host", "127.0.0.1",
                             "--port", str(port), "--load_fast=false"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

  def get(path):
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read()).get(".", {})

  try:
    deadline, scalars = time.time() + 120, {}
    while not want <= set(scalars):
      assert server.poll() is None and time.time() < deadline, f"tensorboard lists {sorted(scalars)}"
      try:
        scalars = get("/data/plugin/scalars/tags")
      except OSError:
        time.sleep(0.2)
    assert {"train/loss", "eval/loss", "probe/similarity/layer_001"} <= set(scalars)
    images = get("/data/plugin/images/tags")
    assert {"probe_profile/similarity", "probe_heatmap/similarity"} <= set(images)
    assert images["probe_profile/similarity"]["samples"] >= 1
  finally:
    server.terminate()
    server.wait(timeout=30)


GRID = '''
from nplace.config import base_config
from nplace.protocol import Grid


def get_config(arg=""):
  c = base_config()
  c.model.update(vocab_size=256, max_len=16, n_layer=2, n_head=4, d_model=32, remat="none")
  c.data.update(seq_len=16, synthetic_tokens=65536)
  c.train.update(steps=8, batch_size=8, log_every=1, eval_every=8, eval_batches=1)
  c.optim.warmup_steps = 2
  c.checkpoint.every = 4
  c.eval.rouge = False
  c.train.cpu_devices = 1
  return c


def get_sweep(arg=""):
  return [{"seed": 0}, {"seed": 1}]


GRID = Grid(config=get_config, sweep=get_sweep)
'''


@pytest.mark.slow
def test_a_sweep_killed_mid_trial_in_a_bucket_reruns_to_the_end(gcs, env, tmp_path):
  (tmp_path / "grid.py").write_text(GRID)
  uri, bucket = gcs.create_bucket()
  argv = ["sweep", "--config", tmp_path / "grid.py", "--workdir", f"{uri}/sweep"]
  killed = nplace(*argv, env=env)
  wait_for(bucket / "sweep/seed=0/checkpoints/4/commit_success.txt", killed)
  killed.kill()
  killed.wait()
  record = json.loads((bucket / "sweep/sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["running", "pending"]
  out = finish(nplace(*argv, env=env))
  assert "sweep: 2/2 trials done (2 completed, 0 diverged, 0 failed)" in out, out
  record = json.loads((bucket / "sweep/sweep.json").read_text())
  assert [t["status"] for t in record["trials"]] == ["completed", "completed"]
  assert events.read_scalars(bucket / "sweep/seed=0")["train/loss"][0].tolist() == list(range(1, 9))
  assert not [line for line in out.splitlines() if any(n in line for n in GCSFS_NOISE)]
  workdirs.resolve(f"{uri}/sweep/sweep.json").unlink()  # as trials run a slice each leave their grid
  finish(nplace(*argv, "--record", env=env))
  assert json.loads((bucket / "sweep/sweep.json").read_text()) == record
