"""Run directories on local disk or in a bucket (`gs://...`), through etils.epath.

Orbax writes checkpoints to either (tensorstore for arrays, epath for metadata); the small
JSON files go through epath here. TensorBoard event files are appended to many times a
second, which object stores do not support: for a bucket workdir they are written to a local
staging directory and copied up (`EventSync.push`) at each checkpoint and at the end.
`check_writable` turns a missing or read-only workdir or output file (a bucket that does not
exist, no write permission) into one line before anything is built.
"""
import contextlib
import logging
import os
import shutil
import socket
import tempfile

from etils import epath

from nplace.errors import UsageError

# gcsfs (epath's way to gs://) serves every filesystem through its "experimental"
# ExtendedGcsFileSystem unless this is false. That class asks the Storage Control API (gRPC)
# whether the bucket is zonal or has a hierarchical namespace before nearly every call (open,
# list, copy, move, delete) and does not cache a failed answer: wherever that API cannot
# answer (no credentials for it, an account not allowed to read the bucket's layout, an
# emulator) every call repeats the request and logs "Could not determine bucket type ...
# falling back to GCSFileSystem". nplace uses neither kind of bucket's extras (orbax writes
# arrays through tensorstore's own client), and the plain GCSFileSystem it falls back to is
# what serves it anyway. gcsfs reads this at import, before the first gs:// path is opened;
# a value the user set wins.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def resolve(workdir) -> epath.Path:
  """The run directory as an epath: a bucket URI as given, a local path made absolute."""
  path = epath.Path(workdir)
  return path if is_remote(path) else path.absolute()


def is_remote(path) -> bool:
  return "://" in str(path)  # epath's schemes: gs, s3, az, hf


def write_atomic(path: epath.Path, content: str | bytes) -> None:
  """Readers never see half a file: locally a rename; in a bucket one object upload, which is
  atomic by itself (readers see the old object until the new one is complete), where a
  temporary object and a rename would be a copy and a delete more. Local directories missing
  on the way are created: `check_writable` passed an output file on its nearest existing one."""
  data = content.encode() if isinstance(content, str) else content
  if is_remote(path):
    path.write_bytes(data)
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.parent / (path.name + ".tmp")
  tmp.write_bytes(data)
  tmp.replace(path)


# The files nplace keeps in a run directory (one holding checkpoints/) or a sweep's (sweep.json)
# beside its checkpoints and event files: an output file of a command never replaces one.
SUMMARY, COUNTERS, DATA_RECORD, SWEEP_RECORD = "summary.json", "counters.json", "data.json", "sweep.json"
RUN_FILES = (SUMMARY, COUNTERS, DATA_RECORD, SWEEP_RECORD)


def _a_runs_own(path: epath.Path) -> epath.Path | None:
  """The run or sweep directory whose own file `path` is (one of RUN_FILES, an event file, or
  anything under its checkpoints/), or None."""
  for directory in path.parents:
    if directory.name == "checkpoints" and any((directory.parent / f).exists() for f in RUN_FILES):
      return directory.parent
  own = path.name in RUN_FILES or path.name.startswith("events.out.tfevents.")
  where = path.parent
  return where if own and ((where / "checkpoints").is_dir() or (where / SWEEP_RECORD).is_file()) else None


def check_writable(path: epath.Path, flag: str = "--workdir", file: bool = False) -> None:
  """UsageError (one line naming `flag` and the path) unless a command can write there: the
  directory `path` (or with `file`, the file `path`). In a bucket, a small object is written
  and deleted (no such bucket, no permission, no gcsfs all fail here, not at the first
  checkpoint); locally, a temporary file is created and deleted in the nearest existing
  directory (as root `os.access` says yes even for /proc). Creates nothing that stays."""
  where = path.parent if file else path
  run = _a_runs_own(path) if file else None
  if run is not None:
    raise UsageError(f"{flag} {path}: a file nplace keeps in the run directory {run}: name another file")
  if is_remote(path):
    probe = where / f".nplace-write-check.{socket.gethostname()}.{os.getpid()}"
    try:
      with _gcsfs_unlogged():
        probe.write_text("")
        probe.unlink()
    except FileNotFoundError:  # an object needs no parent directory: the bucket is not there
      bucket = str(path).split("://", 1)[1].split("/", 1)[0]
      raise UsageError(f"{flag} {path}: the bucket {bucket!r} does not exist") from None
    except Exception as e:  # PermissionError, gcsfs's HttpError, ImportError (no gcsfs), ...
      raise UsageError(f"{flag} {path}: cannot write there ({_one_line(e)})") from None
    return
  if file and path.is_dir():
    raise UsageError(f"{flag} {path}: is a directory, not a file")
  existing = next(p for p in (where, *where.parents) if p.exists())
  if not existing.is_dir():
    raise UsageError(f"{flag} {path}: {existing} is a file, not a directory")
  try:
    with tempfile.NamedTemporaryFile(dir=existing, prefix=".nplace-write-check."):
      pass
  except OSError as e:
    why = e.strerror or _one_line(e)
    raise UsageError(f"{flag} {path}: cannot write there (creating a file in {existing}: {why})") from None
  if file and path.exists() and not os.access(path, os.W_OK):
    raise UsageError(f"{flag} {path}: cannot write there (the file is read-only)")


@contextlib.contextmanager
def _gcsfs_unlogged():
  """gcsfs logs a request that failed for good (a 400, no network after its retries) with its
  traceback, then raises it: the raised error is what the check reports, in one line."""
  logger = logging.getLogger("gcsfs")
  level = logger.level
  logger.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    logger.setLevel(level)


def _one_line(e: Exception) -> str:
  text = str(e).strip()
  return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


class EventSync:
  """Where the event writer writes (`local`), and how its files reach the workdir.

  For a bucket workdir, `local` starts as a copy of the workdir's event files (a resumed run
  reads its history from them) and `push` uploads the files that changed since the last push.
  """

  def __init__(self, workdir: epath.Path):
    self.workdir, self.remote = workdir, is_remote(workdir)
    self.local = epath.Path(tempfile.mkdtemp(prefix="nplace-events-")) if self.remote else workdir
    self.pushed = {}
    if self.remote:
      for path in self.workdir.glob("events.out.tfevents.*"):
        path.copy(self.local / path.name)
        self.pushed[path.name] = (self.local / path.name).stat().length

  def push(self) -> None:
    if not self.remote:
      return
    for path in self.local.glob("events.out.tfevents.*"):
      size = path.stat().length
      if self.pushed.get(path.name) != size:
        path.copy(self.workdir / path.name, overwrite=True)
        self.pushed[path.name] = size

  def close(self) -> None:
    self.push()
    if self.remote:
      shutil.rmtree(self.local, ignore_errors=True)
