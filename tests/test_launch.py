"""launch/: the exact command sequences of --dry-run (golden strings), bad input as one line
+ exit code 2, and the resume loops run for real against a stand-in gcloud (and xpk) that
preempts the first attempt (nothing here reaches Google Cloud or a cluster)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def launch(script, *argv, stdin=None, env=None):
  return subprocess.run([sys.executable, str(ROOT / "launch" / script), *argv], input=stdin,
                        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)


WHERE = ["--project=my-proj", "--zone=us-west4-a"]
UP_1P5B = ["up", *WHERE, "--name=peri15b", "--accelerator=v5litepod-16",
           "--config=experiments/gpt2.py:1.5b,peri", "--workdir=gs://my-bucket/runs/peri15b"]
OVERRIDES = ["--", "--config.model.dtype=bfloat16", "--config.mesh.fsdp=16"]

INSTALL = ("""'--command=rm -rf ~/nplace && tar xzf ~/nplace-peri15b.tar.gz -C ~ && (test -x ~/.local/bin/uv """
           """|| curl -LsSf https://astral.sh/uv/install.sh | sh) && (test -x ~/nplace-venv/bin/pip || """
           """~/.local/bin/uv venv --seed --python 3.12 ~/nplace-venv) && ~/nplace-venv/bin/pip install """
           """--quiet "$HOME/nplace[tpu]"'""")
TRAIN_1P5B = ("""'--command=cd ~/nplace && nohup ~/nplace-venv/bin/nplace train --config experiments/gpt2.py:1.5b,peri """
              """--workdir gs://my-bucket/runs/peri15b --config.model.dtype=bfloat16 --config.mesh.fsdp=16 """
              """--config.distributed.initialize=True --config.train.batch_size=128 >> ~/nplace-train.log 2>&1; """
              """gcloud storage cp ~/nplace-train.log gs://my-bucket/runs/peri15b/logs/$(hostname).log'""")

GOLDEN_UP = f"""\
nplace compile --config experiments/gpt2.py:1.5b,peri --topology v5litepod-16 --batch-per-chip 8 --config.model.dtype=bfloat16 --config.mesh.fsdp=16
# a run that ends neither completed nor diverged on a slice that is not READY (preempted) repeats from here, at most 3 more times
gcloud compute tpus tpu-vm describe peri15b --zone=us-west4-a --project=my-proj '--format=value(state)'
gcloud compute tpus tpu-vm create peri15b --zone=us-west4-a --project=my-proj --accelerator-type=v5litepod-16 --version=v2-alpha-tpuv5-lite
git archive --format=tar.gz --prefix=nplace/ -o /tmp/nplace-peri15b.tar.gz HEAD
gcloud compute tpus tpu-vm scp /tmp/nplace-peri15b.tar.gz peri15b:nplace-peri15b.tar.gz --zone=us-west4-a --project=my-proj --worker=all
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all {INSTALL}
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all '--command=mkdir -p ~/.cache/nplace/data && gcloud storage rsync --recursive gs://my-bucket/nplace-data ~/.cache/nplace/data'
gcloud storage rm gs://my-bucket/runs/peri15b/summary.json
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all {TRAIN_1P5B}
gcloud storage cat gs://my-bucket/runs/peri15b/summary.json
gcloud compute tpus tpu-vm delete peri15b --zone=us-west4-a --project=my-proj --quiet
# peri15b: completed
"""

GOLDEN_UP_SPOT_QUEUED = f"""\
nplace compile --config experiments/gpt2.py:1.5b,peri --topology v5litepod-16 --batch-per-chip 8 --config.model.dtype=bfloat16 --config.mesh.fsdp=16
# a run that ends neither completed nor diverged on a slice that is not ACTIVE (preempted) repeats from here, at most 5 more times
gcloud compute tpus queued-resources describe peri15b --zone=us-west4-a --project=my-proj '--format=value(state.state)'
gcloud compute tpus queued-resources create peri15b --node-id=peri15b --zone=us-west4-a --project=my-proj --accelerator-type=v5litepod-16 --runtime-version=v2-alpha-tpuv5-lite --spot
# repeated every 60 s until it prints ACTIVE:
gcloud compute tpus queued-resources describe peri15b --zone=us-west4-a --project=my-proj '--format=value(state.state)'
git archive --format=tar.gz --prefix=nplace/ -o /tmp/nplace-peri15b.tar.gz HEAD
gcloud compute tpus tpu-vm scp /tmp/nplace-peri15b.tar.gz peri15b:nplace-peri15b.tar.gz --zone=us-west4-a --project=my-proj --worker=all
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all {INSTALL}
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=0 '--command=cd ~/nplace && ~/nplace-venv/bin/nplace prepare --config experiments/gpt2.py:1.5b,peri --config.model.dtype=bfloat16 --config.mesh.fsdp=16 && gcloud storage rsync --recursive ~/.cache/nplace/data gs://my-bucket/nplace-data'
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all '--command=mkdir -p ~/.cache/nplace/data && gcloud storage rsync --recursive gs://my-bucket/nplace-data ~/.cache/nplace/data'
gcloud storage rm gs://my-bucket/runs/peri15b/summary.json
gcloud compute tpus tpu-vm ssh peri15b --zone=us-west4-a --project=my-proj --worker=all {TRAIN_1P5B}
gcloud storage cat gs://my-bucket/runs/peri15b/summary.json
gcloud compute tpus queued-resources delete peri15b --zone=us-west4-a --project=my-proj --force --quiet
# peri15b: completed
"""


def test_up_dry_run_prints_the_whole_v5e16_peri_1p5b_run():
  done = launch("tpu.py", *UP_1P5B, "--data=gs://my-bucket/nplace-data", "--dry-run", *OVERRIDES)
  assert (done.returncode, done.stderr) == (0, "")
  assert done.stdout == GOLDEN_UP


def test_up_dry_run_spot_queued_resource_prepares_data_once():
  done = launch("tpu.py", *UP_1P5B, "--spot", "--queued", "--retries=5",
                "--data=gs://my-bucket/nplace-data", "--prepare", "--dry-run", *OVERRIDES)
  assert (done.returncode, done.stderr) == (0, "")
  assert done.stdout == GOLDEN_UP_SPOT_QUEUED


TRIALS = """\
peri_dt=0.1\tnplace train --config experiments/gpt2.py:124m --workdir gs://b/sw/peri_dt=0.1 --config.model.placement=peri --config.model.dt=0.1
pre_dt=1.0\tnplace train --config experiments/gpt2.py:124m --workdir gs://b/sw/pre_dt=1.0 --config.model.placement=pre --config.train.batch_size=16
"""
SWEEP_INSTALL = ("""'--command=rm -rf ~/nplace && tar xzf ~/nplace-{0}.tar.gz -C ~ && (test -x ~/.local/bin/uv """
                 """|| curl -LsSf https://astral.sh/uv/install.sh | sh) && (test -x ~/nplace-venv/bin/pip || """
                 """~/.local/bin/uv venv --seed --python 3.12 ~/nplace-venv) && ~/nplace-venv/bin/pip install """
                 """--quiet "$HOME/nplace[tpu]"'""")

GOLDEN_SWEEP = f"""\
nplace compile --config experiments/gpt2.py:124m --topology v5litepod-4 --batch-per-chip 8
# trial peri_dt=0.1 on slice sw-peri-dt-0-1
# a run that ends neither completed nor diverged on a slice that is not READY (preempted) repeats from here, at most 3 more times
gcloud compute tpus tpu-vm describe sw-peri-dt-0-1 --zone=z --project=p '--format=value(state)'
gcloud compute tpus tpu-vm create sw-peri-dt-0-1 --zone=z --project=p --accelerator-type=v5litepod-4 --version=v2-alpha-tpuv5-lite --spot
git archive --format=tar.gz --prefix=nplace/ -o /tmp/nplace-sw-peri-dt-0-1.tar.gz HEAD
gcloud compute tpus tpu-vm scp /tmp/nplace-sw-peri-dt-0-1.tar.gz sw-peri-dt-0-1:nplace-sw-peri-dt-0-1.tar.gz --zone=z --project=p --worker=all
gcloud compute tpus tpu-vm ssh sw-peri-dt-0-1 --zone=z --project=p --worker=all {SWEEP_INSTALL.format("sw-peri-dt-0-1")}
gcloud storage rm gs://b/sw/peri_dt=0.1/summary.json
gcloud compute tpus tpu-vm ssh sw-peri-dt-0-1 --zone=z --project=p --worker=all '--command=cd ~/nplace && nohup ~/nplace-venv/bin/nplace train --config experiments/gpt2.py:124m --workdir gs://b/sw/peri_dt=0.1 --config.model.placement=peri --config.model.dt=0.1 --config.distributed.initialize=True --config.train.batch_size=32 >> ~/nplace-train.log 2>&1; gcloud storage cp ~/nplace-train.log gs://b/sw/peri_dt=0.1/logs/$(hostname).log'
gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json
gcloud compute tpus tpu-vm delete sw-peri-dt-0-1 --zone=z --project=p --quiet
# trial pre_dt=1.0 on slice sw-pre-dt-1-0
# a run that ends neither completed nor diverged on a slice that is not READY (preempted) repeats from here, at most 3 more times
gcloud compute tpus tpu-vm describe sw-pre-dt-1-0 --zone=z --project=p '--format=value(state)'
gcloud compute tpus tpu-vm create sw-pre-dt-1-0 --zone=z --project=p --accelerator-type=v5litepod-4 --version=v2-alpha-tpuv5-lite --spot
git archive --format=tar.gz --prefix=nplace/ -o /tmp/nplace-sw-pre-dt-1-0.tar.gz HEAD
gcloud compute tpus tpu-vm scp /tmp/nplace-sw-pre-dt-1-0.tar.gz sw-pre-dt-1-0:nplace-sw-pre-dt-1-0.tar.gz --zone=z --project=p --worker=all
gcloud compute tpus tpu-vm ssh sw-pre-dt-1-0 --zone=z --project=p --worker=all {SWEEP_INSTALL.format("sw-pre-dt-1-0")}
gcloud storage rm gs://b/sw/pre_dt=1.0/summary.json
gcloud compute tpus tpu-vm ssh sw-pre-dt-1-0 --zone=z --project=p --worker=all '--command=cd ~/nplace && nohup ~/nplace-venv/bin/nplace train --config experiments/gpt2.py:124m --workdir gs://b/sw/pre_dt=1.0 --config.model.placement=pre --config.train.batch_size=16 --config.distributed.initialize=True >> ~/nplace-train.log 2>&1; gcloud storage cp ~/nplace-train.log gs://b/sw/pre_dt=1.0/logs/$(hostname).log'
gcloud storage cat gs://b/sw/pre_dt=1.0/summary.json
gcloud compute tpus tpu-vm delete sw-pre-dt-1-0 --zone=z --project=p --quiet
# peri_dt=0.1\tsw-peri-dt-0-1\tcompleted
# pre_dt=1.0\tsw-pre-dt-1-0\tcompleted
nplace sweep --config experiments/gpt2.py:124m --workdir gs://b/sw --config.distributed.initialize=True --config.train.batch_size=32 --record
"""

SWEEP = ["sweep", "--project=p", "--zone=z", "--name=sw", "--accelerator=v5litepod-4", "--spot",
         "--config=experiments/gpt2.py:124m", "--workdir=gs://b/sw", "--trials=-", "--dry-run"]


def test_sweep_fans_out_one_slice_per_trial_of_the_list():
  """Trial overrides win (pre_dt=1.0 keeps its own batch size); each trial gets its own slice."""
  done = launch("tpu.py", *SWEEP, stdin=TRIALS)
  assert (done.returncode, done.stderr) == (0, "")
  assert done.stdout == GOLDEN_SWEEP


@pytest.mark.parametrize("argv,message", [
    (["up", *WHERE, "--name=n", "--accelerator=v5e-16", "--config=c", "--workdir=gs://b/w"],
     "unknown accelerator type 'v5e-16'"),
    (["up", *WHERE, "--name=n", "--accelerator=v5litepod-12", "--config=c", "--workdir=gs://b/w"],
     "unknown accelerator type 'v5litepod-12'"),
    (["up", "--zone=z", "--name=n", "--accelerator=v4-8", "--config=c", "--workdir=gs://b/w"],
     "the following arguments are required: --project"),
    (["delete", "--project=p", "--name=n"], "the following arguments are required: --zone"),
    (["up", *WHERE, "--name=n", "--accelerator=v4-8", "--config=c", "--workdir=runs/x"],
     "--workdir 'runs/x': must be a gs:// path"),
    (["create", *WHERE, "--name=My_TPU", "--accelerator=v4-8"], "--name 'My_TPU'"),
    (["up", *WHERE, "--name=n", "--accelerator=v4-8", "--config=c", "--workdir=gs://b/w", "--",
      "--config.train.batch_size=64"], "set the batch with --batch-per-chip"),
    (["stage-data", *WHERE, "--name=n"], "--data gs://... is required"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
  done = launch("tpu.py", *argv, "--dry-run")
  assert done.returncode == 2 and done.stdout == ""
  assert done.stderr.startswith("launch/tpu.py: ") and message in done.stderr
  assert done.stderr.count("\n") == 1


def test_a_bad_trial_list_is_exit_2():
  done = launch("tpu.py", *SWEEP, stdin="t1\tpython train.py --workdir gs://b/t1\n")
  assert done.returncode == 2 and "trial list line 1: expected NAME<TAB>nplace train" in done.stderr
  same_slice = "".join(f"{name}\tnplace train --config c --workdir gs://b/{name}\n" for name in ("dt=1", "dt-1"))
  done = launch("tpu.py", *SWEEP, stdin=same_slice)
  assert done.returncode == 2 and "trial dt-1: slice name sw-dt-1 is taken" in done.stderr
  assert "nplace compile" not in done.stdout  # refused before the compile's minutes
  xpk_same = "".join(f"{name}\tnplace train --config c --workdir gs://b/{name}\n" for name in ("a", "A"))
  done = launch("xpk.py", "sweep", *XPK, "--dry-run", stdin=xpk_same)
  assert done.returncode == 2 and "workload name sw-a is taken" in done.stderr and "nplace compile" not in done.stdout


def test_a_slice_runs_only_a_committed_config(tmp_path):
  """`setup` ships the checkout's HEAD: a config outside it, untracked or changed since would be
  compiled here and then trained on the slice as another file, or as none."""
  repo = tmp_path / "repo"
  shutil.copytree(ROOT / "launch", repo / "launch")
  (repo / "c.py").write_text("x = 1\n")
  (repo / "new.py").write_text("")
  git = lambda *argv: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=repo,
                                     check=True, capture_output=True)
  git("init", "-q")
  git("add", "c.py", "launch")
  git("commit", "-qm", "c")
  up = ["up", *WHERE, "--name=n", "--accelerator=v4-8", "--workdir=gs://b/w", "--dry-run"]
  run = lambda config: subprocess.run([sys.executable, str(repo / "launch/tpu.py"), *up, f"--config={config}"],
                                      capture_output=True, text=True, timeout=60)
  assert run("c.py:x").returncode == 0
  for config, message in ((f"{ROOT}/experiments/tiny.py:pre", "not a file committed in"), ("new.py", "not a file committed"),
                          ("c.py", None)):
    if message is None:
      (repo / "c.py").write_text("x = 2\n")
      message = "--config c.py: differs from its committed version"
    done = run(config)
    assert done.returncode == 2 and done.stdout == "" and message in done.stderr, done.stderr


FAKE_GCLOUD = """\
#!{python}
# Stands in for gcloud: a slice whose state lives in state.json; the first `nplace train`
# over ssh is cut off by a preemption, the second completes and writes summary.json.
import json, pathlib, shlex, sys
here = pathlib.Path(__file__).parent
state = json.loads((here / "state.json").read_text())
args = sys.argv[1:]
with open(here / "calls.log", "a") as f:
  f.write(shlex.join(["gcloud", *args]) + "\\n")
def save(): (here / "state.json").write_text(json.dumps(state))
verb = args[3] if args[:2] == ["compute", "tpus"] else args[1]
if verb == "describe":
  if state.get("node") is None: sys.exit("ERROR: NOT_FOUND")
  print(state["node"])
elif verb == "create": state["node"] = "READY"
elif verb == "delete": state["node"] = None
elif verb == "ssh" and "nplace train" in args[-1]:
  state["trains"] = state.get("trains", 0) + 1
  if state["trains"] == 1:
    state["node"] = "PREEMPTED"; save(); sys.exit(255)
  state["summary"] = {{"status": "completed", "step": 1000}}
elif verb == "rm": state.pop("summary", None)
elif verb == "cat":
  if "summary" not in state: sys.exit("ERROR: not found")
  print(json.dumps(state["summary"]))
save()
"""


@pytest.fixture
def fake_cloud(tmp_path):
  """A PATH whose gcloud is FAKE_GCLOUD, and nplace stand-ins for `compile` exiting 0 or 3."""
  (tmp_path / "state.json").write_text("{}")
  gcloud = tmp_path / "gcloud"
  gcloud.write_text(FAKE_GCLOUD.format(python=sys.executable))
  for name, code in (("fits", 0), ("too-big", 3)):
    (tmp_path / name).write_text(f"#!/bin/sh\necho \"nplace $*\" >> {tmp_path}/calls.log\nexit {code}\n")
  for f in tmp_path.iterdir():
    f.chmod(0o755)
  env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
  return tmp_path, env


def calls(tmp_path):
  return [line.split(" --")[0] for line in (tmp_path / "calls.log").read_text().splitlines()]


@pytest.mark.slow
def test_up_resumes_after_a_preemption_then_deletes_the_slice(fake_cloud):
  tmp_path, env = fake_cloud
  done = launch("tpu.py", "up", *WHERE, "--name=resume-test", "--accelerator=v5litepod-16",
                "--config=experiments/gpt2.py:1.5b,peri", "--workdir=gs://b/runs/r",
                f"--nplace={tmp_path / 'fits'}", env=env)
  assert done.returncode == 0, done.stderr
  assert calls(tmp_path) == [
      "nplace compile",
      "gcloud compute tpus tpu-vm describe resume-test",  # absent
      "gcloud compute tpus tpu-vm create resume-test",
      "gcloud compute tpus tpu-vm scp /tmp/nplace-resume-test.tar.gz resume-test:nplace-resume-test.tar.gz",
      "gcloud compute tpus tpu-vm ssh resume-test",  # install
      "gcloud storage rm gs://b/runs/r/summary.json",
      "gcloud compute tpus tpu-vm ssh resume-test",  # train: cut off by the preemption
      "gcloud storage cat gs://b/runs/r/summary.json",  # none written
      "gcloud compute tpus tpu-vm describe resume-test",  # PREEMPTED
      "gcloud compute tpus tpu-vm describe resume-test",  # attempt 2: still PREEMPTED
      "gcloud compute tpus tpu-vm delete resume-test",
      "gcloud compute tpus tpu-vm create resume-test",
      "gcloud compute tpus tpu-vm scp /tmp/nplace-resume-test.tar.gz resume-test:nplace-resume-test.tar.gz",
      "gcloud compute tpus tpu-vm ssh resume-test",
      "gcloud storage rm gs://b/runs/r/summary.json",
      "gcloud compute tpus tpu-vm ssh resume-test",  # the same train command again: resumes
      "gcloud storage cat gs://b/runs/r/summary.json",
      "gcloud compute tpus tpu-vm delete resume-test",
  ]
  trains = [c for c in (tmp_path / "calls.log").read_text().splitlines() if "nplace train" in c]
  assert len(trains) == 2 and trains[0] == trains[1]
  assert done.stdout.rstrip().endswith("# resume-test: completed")


def test_up_refuses_to_create_when_compile_says_it_does_not_fit(fake_cloud):
  tmp_path, env = fake_cloud
  done = launch("tpu.py", *UP_1P5B, f"--nplace={tmp_path / 'too-big'}", env=env)
  assert done.returncode == 3
  assert "does not fit v5litepod-16; nothing was created" in done.stderr
  assert calls(tmp_path) == ["nplace compile"]


GOLDEN_GPU = """\
python3 -m venv .venv
.venv/bin/python -m pip install -e '.[cuda]'
env XLA_CLIENT_MEM_FRACTION=.90 .venv/bin/nplace train --config experiments/gpt2.py:124m,peri --workdir runs/gpu-peri --config.model.dtype=bfloat16 --config.train.batch_size=64 --config.train.grad_accum=8 --config.train.steps=5000
"""


def test_gpu_recipe_dry_run():
  done = launch("gpu.py", "--workdir=runs/gpu-peri", "--dry-run", "--", "--config.train.steps=5000")
  assert (done.returncode, done.stderr) == (0, "")
  assert done.stdout == GOLDEN_GPU
  for flag, message in (("--microbatch=7", "--microbatch 7: must divide --batch-size 64"),
                        ("--batch-size=0", "--batch-size 0: must be positive")):
    bad = launch("gpu.py", flag, "--dry-run")
    assert bad.returncode == 2 and bad.stderr == f"launch/gpu.py: {message}\n"


def test_gpu_recipe_reads_relative_paths_from_where_it_runs(tmp_path):
  (tmp_path / "mine.py").write_text("")
  done = subprocess.run([sys.executable, str(ROOT / "launch/gpu.py"), "--workdir=run", "--config=mine.py:pre",
                         "--dry-run"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
  assert done.returncode == 0 and f"--config {tmp_path}/mine.py:pre --workdir {tmp_path}/run " in done.stdout, done


XPK = ["--cluster=gke", "--project=p", "--zone=z", "--name=sw", "--tpu-type=v5litepod-4",
       "--docker-image=us-docker.pkg.dev/p/nplace/nplace:1", "--config=experiments/gpt2.py:124m",
       "--workdir=gs://b/sw", "--trials=-"]
XPK_CREATE = ("xpk workload create --cluster=gke --project=p --zone=z --workload={0} --tpu-type=v5litepod-4 "
              "--num-slices={1} --docker-image=us-docker.pkg.dev/p/nplace/nplace:1 {2}'--command=nplace train "
              "--config experiments/gpt2.py:124m --workdir gs://b/sw/{3}'")
PERI = ("--config.model.placement=peri --config.model.dt=0.1 --config.distributed.initialize=True "
        "--config.train.batch_size={0}")
PRE = "--config.model.placement=pre --config.train.batch_size=16 --config.distributed.initialize=True"

GOLDEN_XPK_SWEEP = f"""\
nplace compile --config experiments/gpt2.py:124m --topology v5litepod-4 --batch-per-chip 8 --config.model.dtype=bfloat16
xpk workload list --cluster=gke --project=p --zone=z --filter-by-job=sw-
gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json
# trial peri_dt=0.1 as workload sw-peri-dt-0-1
gcloud storage rm gs://b/sw/peri_dt=0.1/summary.json
{XPK_CREATE.format("sw-peri-dt-0-1", 1, "", "peri_dt=0.1 " + PERI.format(32))}
gcloud storage cat gs://b/sw/pre_dt=1.0/summary.json
# trial pre_dt=1.0 as workload sw-pre-dt-1-0
gcloud storage rm gs://b/sw/pre_dt=1.0/summary.json
{XPK_CREATE.format("sw-pre-dt-1-0", 1, "", "pre_dt=1.0 " + PRE)}
# 2 trials; `python launch/xpk.py wait` (same options) follows them and resubmits the preempted
"""

GOLDEN_XPK_WAIT = """\
# a trial whose summary.json then says preempted is deleted and submitted again, at most 2 more times
xpk workload list --cluster=gke --project=p --zone=z --wait-for-job-completion=sw-peri-dt-0-1
gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json
xpk workload list --cluster=gke --project=p --zone=z --wait-for-job-completion=sw-pre-dt-1-0
gcloud storage cat gs://b/sw/pre_dt=1.0/summary.json
# peri_dt=0.1\tsw-peri-dt-0-1\tcompleted
# pre_dt=1.0\tsw-pre-dt-1-0\tcompleted
nplace sweep --config experiments/gpt2.py:124m --workdir gs://b/sw --config.distributed.initialize=True --config.train.batch_size=32 --record
"""

GOLDEN_XPK_STATUS = """\
xpk workload list --cluster=gke --project=p --zone=z --filter-by-job=sw-
gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json
# peri_dt=0.1\tsw-peri-dt-0-1\tno summary.json yet
gcloud storage cat gs://b/sw/pre_dt=1.0/summary.json
# pre_dt=1.0\tsw-pre-dt-1-0\tno summary.json yet
"""


def test_xpk_sweep_dry_run_submits_one_workload_per_trial():
  done = launch("xpk.py", "sweep", *XPK, "--dry-run", "--", "--config.model.dtype=bfloat16", stdin=TRIALS)
  assert (done.returncode, done.stderr) == (0, "")
  assert done.stdout == GOLDEN_XPK_SWEEP


def test_xpk_wait_and_status_dry_runs():
  done = launch("xpk.py", "wait", *XPK, "--retries=2", "--dry-run", stdin=TRIALS)
  assert (done.returncode, done.stderr, done.stdout) == (0, "", GOLDEN_XPK_WAIT)
  done = launch("xpk.py", "status", *XPK, "--dry-run", stdin=TRIALS)
  assert (done.returncode, done.stderr, done.stdout) == (0, "", GOLDEN_XPK_STATUS)


def test_xpk_workload_names_are_kubernetes_names_unique_per_trial():
  """The paper grid's names (55 characters and more)."""
  names = [f"placement=pre,dt=1,embed_norm=False,weight_decay=0.1,seed={i}" for i in range(3)]
  stdin = "".join(f"{n}\tnplace train --config c --workdir gs://b/sw/{n}\n" for n in names)
  done = launch("xpk.py", "sweep", *XPK, "--name=stability-paper", "--dry-run", stdin=stdin)
  assert done.returncode == 0, done.stderr
  workloads = re.findall(r"--workload=(\S+)", done.stdout)
  assert len(set(workloads)) == 3 and all(re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", w) for w in workloads)
  assert all(len(w) <= 40 and w.startswith("stability-paper-placement-pre") for w in workloads)
  assert done.stdout.count("'--command=nplace train --config c --workdir gs://b/sw/placement=pre,") == 3


@pytest.mark.parametrize("argv,message", [
    (["sweep", *XPK[:-2], "--workdir=runs/sw"], "--workdir 'runs/sw': must be a gs:// path"),
    (["sweep", *XPK[1:]], "the following arguments are required: --cluster"),
    (["sweep", *XPK, "--tpu-type=v5e-16"], "unknown accelerator type 'v5e-16'"),
    (["sweep", *XPK, "--name=Stab"], "--name 'Stab'"),
    (["sweep", *XPK, "--", "--config.train.batch_size=64"], "set the batch with --batch-per-chip"),
])
def test_xpk_bad_input_is_one_line_and_exit_2(argv, message):
  done = launch("xpk.py", *argv, "--dry-run", stdin=TRIALS)
  assert done.returncode == 2 and done.stdout == ""
  assert done.stderr.startswith("launch/xpk.py: ") and message in done.stderr
  assert done.stderr.count("\n") == 1


def test_xpk_help():
  done = launch("xpk.py", "--help")
  assert done.returncode == 0 and "{sweep,status,wait}" in done.stdout
  done = launch("xpk.py", "wait", "--help")
  assert done.returncode == 0 and "--retries" in done.stdout and "--docker-image" in done.stdout


FAKE_XPK = """\
#!{python}
# Stands in for xpk and gcloud (by the name it is called under): workloads and summary.json
# files live in state.json. A workload "runs" when it is waited for: sw-peri-dt-0-1's first
# run is preempted (its summary says so), every other run completes.
import json, pathlib, re, shlex, sys
here = pathlib.Path(__file__).parent
state = json.loads((here / "state.json").read_text())
tool, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(here / "calls.log", "a") as f:
  f.write(shlex.join([tool, *args]) + "\\n")
opt = lambda name: next((a.split("=", 1)[1] for a in args if a.startswith(f"--{{name}}=")), None)
summaries, workloads = state.setdefault("summaries", {{}}), state.setdefault("workloads", {{}})
if tool == "gcloud" and args[1] == "cat":
  if args[2] not in summaries: sys.exit("ERROR: not found")
  print(json.dumps(summaries[args[2]]))
elif tool == "gcloud" and args[1] == "rm": summaries.pop(args[2], None)
elif args[1] == "create":
  workdir = re.search(r"--workdir (\\S+)", opt("command")).group(1)
  workloads[opt("workload")] = {{"workdir": workdir, "finished": False}}
elif args[1] == "delete": workloads.pop(opt("workload"))
elif args[1] == "list" and opt("filter-by-job"):
  print("Jobset Name   Status"); [print(w, "   Running") for w in workloads]
elif args[1] == "list":
  w = workloads.get(opt("wait-for-job-completion"))
  if w is None: sys.exit(1)
  if not w["finished"]:
    state["runs"] = state.get("runs", 0) + 1
    first = opt("wait-for-job-completion") == "sw-peri-dt-0-1" and not state.get("preempted")
    state["preempted"] = state.get("preempted") or first
    summaries[w["workdir"] + "/summary.json"] = {{"status": "preempted" if first else "completed"}}
    w["finished"] = True
(here / "state.json").write_text(json.dumps(state))
"""


def test_xpk_sweep_then_wait_resubmits_the_preempted_trial(tmp_path):
  """sweep skips a trial whose workload exists; wait finds the other preempted, deletes and
  submits it again with the same command, which completes."""
  (tmp_path / "state.json").write_text(json.dumps({"workloads": {"sw-pre-dt-1-0": {
      "workdir": "gs://b/sw/pre_dt=1.0", "finished": False}}}))
  for tool in ("xpk", "gcloud"):
    (tmp_path / tool).write_text(FAKE_XPK.format(python=sys.executable))
    (tmp_path / tool).chmod(0o755)
  (tmp_path / "fits").write_text(f"#!/bin/sh\necho \"nplace $*\" >> {tmp_path}/calls.log\n")
  (tmp_path / "fits").chmod(0o755)
  env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
  options = [*XPK, f"--nplace={tmp_path / 'fits'}", "--num-slices=2", "--priority=high"]
  done = launch("xpk.py", "sweep", *options, stdin=TRIALS, env=env)
  assert done.returncode == 0, done.stderr
  assert "# pre_dt=1.0: workload sw-pre-dt-1-0 exists: not submitted" in done.stdout
  done = launch("xpk.py", "wait", *options, stdin=TRIALS, env=env)
  assert done.returncode == 0, done.stdout + done.stderr
  assert done.stdout.endswith("# peri_dt=0.1\tsw-peri-dt-0-1\tcompleted\n# pre_dt=1.0\tsw-pre-dt-1-0\tcompleted\n"
                              f"{tmp_path / 'fits'} sweep --config experiments/gpt2.py:124m --workdir gs://b/sw "
                              "--config.distributed.initialize=True --config.train.batch_size=64 --record\n")
  log = (tmp_path / "calls.log").read_text().splitlines()
  create = XPK_CREATE.format("sw-peri-dt-0-1", 2, "--priority=high ", "peri_dt=0.1 " + PERI.format(64))
  assert [line.split(" --")[0] if line.startswith(("nplace", "xpk workload list")) else line for line in log] == [
      "nplace compile",
      "xpk workload list",  # the workloads there: pre_dt=1.0's
      "gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json",  # none
      "gcloud storage rm gs://b/sw/peri_dt=0.1/summary.json",
      create,
      "xpk workload list",  # wait: peri_dt=0.1 ends
      "gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json",  # preempted
      "xpk workload delete --cluster=gke --project=p --zone=z --workload=sw-peri-dt-0-1",
      "gcloud storage rm gs://b/sw/peri_dt=0.1/summary.json",
      create,  # the same command: it resumes from gs://b/sw/peri_dt=0.1
      "xpk workload list",
      "gcloud storage cat gs://b/sw/peri_dt=0.1/summary.json",  # completed
      "xpk workload list",  # pre_dt=1.0 ends
      "gcloud storage cat gs://b/sw/pre_dt=1.0/summary.json",
      "nplace sweep",  # sweep.json, from the trials' summaries: a sweep nplace report files
  ]
