"""A bucket workdir (`gs://`), against a stand-in for GCS: an fsspec filesystem that stores
`gs://BUCKET/...` under a local directory (etils.epath reaches GCS through fsspec)."""
import importlib

import pytest
from etils import epath
from fsspec.implementations.local import LocalFileSystem

from nplace.logs import events
from nplace.logs.writer import Writer
from nplace.runtime import workdirs


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """The local directory that `gs://` paths land in."""
  root = str(tmp_path / "gcs")

  class Bucket(LocalFileSystem):
    protocol = ("gs", "gcs")

    def __init__(self, **_):
      super().__init__(auto_mkdir=True)

    @classmethod
    def _strip_protocol(cls, path):
      path = str(path).removeprefix("gs://").removeprefix("gcs://").lstrip("/")
      return f"/{path}" if path.startswith(root.lstrip("/")) else f"{root}/{path}"  # globs give local paths

  monkeypatch.setitem(importlib.import_module("fsspec.registry")._registry, "gcs", Bucket)
  epath.backend.fsspec_backend._get_filesystem.cache_clear()
  yield tmp_path / "gcs"
  epath.backend.fsspec_backend._get_filesystem.cache_clear()


def test_resolve_keeps_uris_and_makes_local_paths_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(workdirs.resolve("gs://b/run")) == "gs://b/run" and workdirs.is_remote(workdirs.resolve("gs://b/run"))
  assert workdirs.resolve("run") == tmp_path / "run" and not workdirs.is_remote(workdirs.resolve("run"))


def test_event_files_reach_a_bucket_and_a_resumed_run_keeps_its_history(bucket):
  first = Writer("gs://b/run", purge_step=None, active=True)
  for step in (1, 2, 3):
    first.scalars(step, {"train/loss": 10.0 - step})
  first.sync()
  assert events.read_scalars(bucket / "b/run")["train/loss"][0].tolist() == [1, 2, 3]
  first.close()  # a run killed after step 3 was checkpointed at 2: the resume purges step 3

  uploaded = {p.name for p in events.event_files(bucket / "b/run")}
  assert len(uploaded) == 1  # nothing written after the sync: no empty next segment
  resumed = Writer("gs://b/run", purge_step=3, active=True)
  assert uploaded == {p.name for p in events.event_files(resumed.events.local)}  # history for the heatmaps
  resumed.scalars(3, {"train/loss": 0.5})
  resumed.close()
  steps, values = events.read_scalars(bucket / "b/run")["train/loss"]
  assert steps.tolist() == [1, 2, 3] and values.tolist() == [9.0, 8.0, 0.5]
  assert len(events.event_files(bucket / "b/run")) == len(uploaded) + 1 and not resumed.events.local.exists()


def test_write_atomic_replaces_the_object(bucket):
  path = workdirs.resolve("gs://b/run/counters.json")
  workdirs.write_atomic(path, "{}")
  workdirs.write_atomic(path, '{"2": 1}')
  assert (bucket / "b/run/counters.json").read_text() == '{"2": 1}'
  assert [p.name for p in (bucket / "b/run").iterdir()] == ["counters.json"]
