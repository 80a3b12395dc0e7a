"""Shared fixtures: tiny model configs; a real probed training run and a TensorBoard server on it;
a real Cloud Storage server (`gcs`) for the `gs://` tests."""
import fcntl
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from unittest import mock

import jax
import pytest
from matplotlib.text import Text

import gcs_server
from nplace.runtime import cpu_split
from nplace.config import base_config

jax.config.update("jax_default_matmul_precision", "highest")
# In-process tests see one CPU device, whichever test first starts the backend (the trainer
# would otherwise split this host per core: nplace/runtime/cpu_split.py), unless a test's subprocess
# asked for fake devices. `nplace` subprocesses split.
if cpu_split.USER_FLAG not in os.environ.get("XLA_FLAGS", ""):
  jax.config.update("jax_num_cpu_devices", 1)
# Compiling is most of the suite: hundreds of small programs, each run for milliseconds. LLVM
# at -O0 compiles the test model's train step ~3x faster and runs it ~2.7x slower; XLA's HLO
# passes, and so what is computed, stay the same. Subprocesses inherit it (see xla_flags).
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()


def xla_flags(*flags: str) -> str:
  """XLA_FLAGS for a subprocess: the suite's own plus `flags`."""
  return " ".join([os.environ["XLA_FLAGS"], *flags])


def run_temp(tmp_path_factory) -> pathlib.Path:
  """The pytest run's own temporary directory, shared by its xdist workers (the parent of a
  worker's base temp)."""
  base = tmp_path_factory.getbasetemp()
  return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build) -> pathlib.Path:
  """The directory `build(path)` fills, built by the first xdist worker to ask for it and read
  by every other: one trained run per pytest run, not one per worker. Its readers must not
  write into it."""
  root = run_temp(tmp_path_factory)
  path = root / name
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if build fails
    if not (root / f"{name}.built").exists():
      shutil.rmtree(path, ignore_errors=True)
      build(path)
      (root / f"{name}.built").touch()
  return path


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
  """One persistent compilation cache for every `nplace` subprocess of the run, shared by the
  xdist workers: most of those runs compile the same tiny train step, eval step and probe
  suite. A size limit turns on the cache's file lock, so no process reads an entry another is
  still writing. Not used in-process, where writing every small compile to disk costs more
  than the few repeats save."""
  path = run_temp(tmp_path_factory) / "jax-cache"
  # Every compile, not only those over a second: at -O0 most take less, and a killed run's
  # relaunch repeats all of them (~0.6 s a tiny run).
  os.environ.update(JAX_COMPILATION_CACHE_DIR=str(path), JAX_COMPILATION_CACHE_MAX_SIZE=str(1 << 32),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


# The files that take a minute or more under `make test`, longest first. xdist's loadfile hands
# files out in collection order, so these start first and the short ones fill in at the end:
# alphabetically one worker ended ~40 s after the other.
LONGEST_FILES = ("test_cell.py", "test_multihost.py", "test_train.py", "test_cpu_split.py", "test_model.py",
                 "test_workdirs.py")


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The environment `nplace` subprocesses run in: the CPU, and a data cache of the module's own."""
  return dict(os.environ, NPLACE_CACHE=str(tmp_path_factory.mktemp("cache") / "data"), JAX_PLATFORMS="cpu")


def tiny_config(**model_overrides):
  """A 2-layer, d=32 model with random-looking weights, small enough for references."""
  c = base_config()
  c.model.update(vocab_size=61, max_len=16, n_layer=2, n_head=4, d_model=32, remat="none")
  c.model.update(**model_overrides)
  c.data.seq_len = 12
  return c


@pytest.fixture
def make_config():
  return tiny_config


def misplaced_texts(fig) -> list[str]:
  """What a draw of `fig` puts as text (titles, axis and colorbar labels, tick labels, legend
  entries, annotations) partly outside the figure or over another text: "'text' at [x0, y0,
  x1, y1]" in pixels, or "'a' over 'b'". Only the texts drawn: matplotlib keeps tick labels
  off the view, undrawn, at stale positions."""
  drawn, draw = [], Text.draw

  def record(text, renderer):
    draw(text, renderer)
    if text.get_visible() and text.get_text():
      drawn.append(text)

  with mock.patch.object(Text, "draw", record):  # Annotation.draw calls it too
    fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in drawn]
  inside = fig.bbox.padded(0.5)  # extents are rounded out to whole pixels
  outside = [f"{text!r} at {box.extents.round().tolist()}" for text, box in boxes
             if not (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1))]
  return outside + [f"{a!r} over {b!r}" for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
                    if box_a.padded(-0.5).overlaps(box_b.padded(-0.5))]


ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
PROBE_RUN = [  # tiny peri (LayerNorm) run, probed at every step: every probe kind in 2 steps; step 2 profiled
    "--config", str(ROOT / "experiments/tiny.py:peri"), "--config.train.steps=2",
    "--config.model.n_layer=2", "--config.model.d_model=32", "--config.data.seq_len=16",
    "--config.data.synthetic_tokens=65536", "--config.train.batch_size=8", "--config.train.log_every=1",
    "--config.train.eval_every=2", "--config.train.eval_batches=1", "--config.checkpoint.every=2",
    "--config.probe.every=1", "--config.probe.batch_size=2", "--config.probe.hutchinson_probes=2",
    "--config.probe.power_iters=0", "--config.train.profile_steps=2,2", "--config.model.attention_impl=dot_product",
]


@pytest.fixture(scope="session")
def probe_run(tmp_path_factory):
  """The run directory of a real 2-step `nplace train` with the probes at steps 0, 1, 2 (one
  for the whole pytest run: its readers only read it)."""
  def build(tmp):
    env = dict(os.environ, NPLACE_CACHE=str(tmp / "cache"), JAX_PLATFORMS="cpu")
    done = subprocess.run([BIN / "nplace", "train", "--workdir", str(tmp / "run"), *PROBE_RUN], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
  return built_once(tmp_path_factory, "probe_run", build) / "run"


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="session")
def tensorboard_api(probe_run):
  """path -> parsed JSON (or bytes for images) from a real `tensorboard` server on the probe
  run, started with its default loader; waits (bounded) until it lists every scalar tag."""
  from nplace.logs import events
  want = set(events.read_scalars(probe_run))
  port = free_port()
  server = subprocess.Popen([BIN / "tensorboard", "--logdir", str(probe_run), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

  def get(path):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read()
    return body if body[:4] == b"\x89PNG" else json.loads(body)

  try:
    deadline = time.time() + 120
    while time.time() < deadline:  # past it the tests report what is missing
      assert server.poll() is None, "tensorboard exited"
      try:
        if want <= set(get("/data/plugin/scalars/tags").get(".", {})):
          break
      except OSError:
        pass
      time.sleep(0.5)
    yield get
  finally:
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
  """A real Cloud Storage JSON API (fake-gcs-server, from the test extra's wheel) on a free
  loopback port, for the test session; gcsfs/epath and tensorstore in this process and in
  every subprocess started with `dict(os.environ, ...)` talk to it. `gcs.create_bucket()`
  makes a bucket and returns its `gs://` URI and the local directory its objects land in. Skipped, with the
  reason, where the binary is missing or cannot run on this machine."""
  path, why = gcs_server.binary()
  if path is None:
    pytest.skip(why)
  server = gcs_server.Server(tmp_path_factory.mktemp("gcs"))
  try:
    server.start()
  except OSError as e:  # the binary exists but cannot execute here (another architecture, noexec)
    pytest.skip(f"fake-gcs-server cannot run here: {e}")
  previous = gcs_server.point_clients_here(server)
  try:
    yield server
  finally:
    gcs_server.restore(previous)
    server.stop()
