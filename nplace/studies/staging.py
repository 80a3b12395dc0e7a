"""Writing into a directory all at once (`nplace report --results`): each file or folder is
built in a staging directory inside it (the same filesystem, so a rename moves it) and moved
into place with the others only when the whole build succeeded. A build that fails leaves
the directory exactly as it was: the staging directory goes, nothing else changed."""
import contextlib
import pathlib
import shutil
import tempfile


class Staged:
  """What a build will move into place: `path(final)` names where to build `final`."""

  def __init__(self, root):
    self.dir = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    self._moves = []

  def path(self, final) -> pathlib.Path:
    """Where to build the file or folder that becomes `final` on commit."""
    staged = self.dir / str(len(self._moves))
    self._moves.append((staged, pathlib.Path(final)))
    return staged

  def commit(self) -> None:
    """Moves every staged file and folder into place (a folder replaces the one there whole,
    so no file of an older build stays behind), then removes the staging directory."""
    replaced = self.dir / "replaced"
    replaced.mkdir()
    for n, (staged, final) in enumerate(self._moves):
      final.parent.mkdir(parents=True, exist_ok=True)
      if final.is_dir():
        final.rename(replaced / str(n))  # a folder cannot be renamed over a non-empty one
      staged.replace(final)
    shutil.rmtree(self.dir)


@contextlib.contextmanager
def staged(root):
  """A `Staged` build inside the directory `root`, committed when the block ends without an
  error; after one (or an interrupt), discarded."""
  build = Staged(root)
  try:
    yield build
  except BaseException:
    shutil.rmtree(build.dir, ignore_errors=True)
    raise
  build.commit()
