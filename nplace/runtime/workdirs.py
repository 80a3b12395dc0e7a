"""Run directories on local disk or in a bucket (`gs://...`), through etils.epath.

Orbax writes checkpoints to either (tensorstore for arrays, epath for metadata); the small
JSON files go through epath here. TensorBoard event files are appended to many times a
second, which object stores do not support: for a bucket workdir they are written to a local
staging directory and copied up (`EventSync.push`) at each checkpoint and at the end.
"""
import shutil
import tempfile

from etils import epath


def resolve(workdir) -> epath.Path:
  """The run directory as an epath: a bucket URI as given, a local path made absolute."""
  path = epath.Path(workdir)
  return path if is_remote(path) else path.absolute()


def is_remote(path) -> bool:
  return "://" in str(path)  # epath's schemes: gs, s3, az, hf


def write_atomic(path: epath.Path, text: str) -> None:
  """Readers never see half a file (a rename locally, a single object upload in a bucket)."""
  tmp = path.parent / (path.name + ".tmp")
  tmp.write_text(text)
  tmp.replace(path)


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
