"""The grain loader: windows against the raw shards, process shares, resumption."""
import grain
import numpy as np
import pytest
from etils import epath

from nplace.config import base_config
from nplace.data import loader, prepare
from nplace.errors import DataError

L = 16  # seq_len


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = base_config().data
  d.update(cache_dir=str(tmp_path_factory.mktemp("cache")), seq_len=L, synthetic_tokens=20_000,
           val_fraction=0.1, synthetic_vocab=64)
  return d


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
  """The same language in shards of 4,000 tokens (windows do not cross them)."""
  d = base_config().data
  d.update(cache_dir=str(tmp_path_factory.mktemp("cache")), seq_len=L, synthetic_tokens=20_000,
           val_fraction=0.1, synthetic_vocab=64)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(prepare, "SHARD_TOKENS", 4000)
    assert len(prepare.read_meta(prepare.prepared_dir(d))["shards"]["train"]) == 5
  return d


def reference_windows(d, split):
  """Brute force: every window of seq_len+1 tokens at stride seq_len, shard by shard."""
  directory = prepare.prepared_dir(d)
  meta = prepare.read_meta(directory)
  windows = []
  for name, n in meta["shards"][split]:
    tokens = np.fromfile(directory / name, meta["dtype"]).astype(np.int32)
    windows += [tokens[i:i + L + 1] for i in range(0, n - L, L)]
  return windows


def keys(batches):
  return [w.tobytes() for b in batches for w in b]


def test_val_in_order_is_the_brute_force_windows(data):
  it = loader.make_iterator(data, "val", 4, seed=0, shuffle=False, process_index=0, process_count=1)
  batches = list(it)
  expected = reference_windows(data, "val")
  assert all(b.shape == (4, L + 1) and b.dtype == np.int32 for b in batches)
  assert len(batches) == len(expected) // 4  # read once, last partial batch dropped
  np.testing.assert_array_equal(np.concatenate(batches), expected[:len(batches) * 4])


@pytest.mark.parametrize("processes", [1, 3])
def test_process_shares_are_disjoint_and_cover(data, processes):
  expected = {w.tobytes(): i for i, w in enumerate(reference_windows(data, "train"))}
  batches = len(expected) // (8 * processes)  # global batches in one epoch
  its = [loader.make_iterator(data, "train", 8, seed=5, shuffle=True, process_index=p,
                              process_count=processes) for p in range(processes)]
  seen = [keys(next(it) for _ in range(batches)) for it in its]
  union = set().union(*seen)
  assert sum(len(s) for s in seen) == len(union) == batches * 8 * processes  # disjoint
  assert union <= expected.keys()
  assert len(expected) - len(union) < 8 * processes  # covered, but for a partial global batch


def test_global_batch_does_not_depend_on_process_count(data):
  single = loader.make_iterator(data, "train", 12, seed=4, shuffle=True, process_index=0,
                                process_count=1)
  shares = [loader.make_iterator(data, "train", 4, seed=4, shuffle=True, process_index=p,
                                 process_count=3) for p in range(3)]
  for _ in range(100):  # past the end of the first epoch
    np.testing.assert_array_equal(next(single), np.concatenate([next(s) for s in shares]))


def test_train_reshuffles_each_epoch(data):
  it = loader.make_iterator(data, "train", 1, seed=0, shuffle=True, process_index=0,
                            process_count=1)
  n = len(reference_windows(data, "train"))
  first, second = keys(next(it) for _ in range(n)), keys(next(it) for _ in range(n))
  assert sorted(first) == sorted(second) and first != second
  other = loader.make_iterator(data, "train", 1, seed=1, shuffle=True, process_index=0,
                               process_count=1)
  assert keys(next(other) for _ in range(50)) != first[:50]


def test_val_is_the_same_every_time(data):
  make = lambda: loader.make_iterator(data, "val", 2, seed=3, shuffle=True, process_index=0,
                                      process_count=1)
  np.testing.assert_array_equal(np.stack(list(make())), np.stack(list(make())))


def test_restored_state_replays_the_same_batches(data, tmp_path):
  make = lambda: loader.make_iterator(data, "train", 8, seed=2, shuffle=True)  # jax's process
  it = make()
  for _ in range(3):
    next(it)
  state = it.get_state()
  grain.checkpoint.CheckpointHandler().save(epath.Path(tmp_path), item=it)
  ahead = [next(it) for _ in range(5)]
  resumed = make()
  resumed.set_state(state)
  np.testing.assert_array_equal(np.stack([next(resumed) for _ in range(5)]), np.stack(ahead))
  restored = grain.checkpoint.CheckpointHandler().restore(epath.Path(tmp_path), item=make())
  np.testing.assert_array_equal(np.stack([next(restored) for _ in range(5)]), np.stack(ahead))


def test_too_few_windows_for_a_batch(data):
  n = len(reference_windows(data, "val"))  # exactly one batch of them is enough
  assert len(list(loader.make_iterator(data, "val", n, seed=0, shuffle=False, process_index=0, process_count=1))) == 1
  with pytest.raises(DataError, match="fewer than a global batch of 64 x 4 processes"):
    loader.make_iterator(data, "val", 64, seed=0, shuffle=False, process_index=0, process_count=4)


def test_window_longer_than_a_split(data):
  data = data.copy_and_resolve_references()
  data.seq_len = 4000  # the val split holds 2000 tokens
  with pytest.raises(DataError, match="seq_len\\+1=4001"):
    loader.make_iterator(data, "val", 1, seed=0, shuffle=False, process_index=0, process_count=1)


@pytest.mark.slow
@pytest.mark.parametrize("split,shuffle,processes", [("train", True, 1), ("train", True, 3), ("val", False, 2)])
@pytest.mark.parametrize("dataset", ["data", "sharded"])
def test_batches_are_grains_order_of_the_brute_force_windows(dataset, split, shuffle, processes, request):
  """The loader gathers each batch's rows at once; its order is still grain's shuffle, repeat and
  batch over the windows, read one at a time as the filed trials' loader read them (across
  epochs, per process share, one shard or several), so a filed trial rerun sees the same data."""
  data = request.getfixturevalue(dataset)
  expected = grain.MapDataset.source(reference_windows(data, split))
  if shuffle:
    expected = expected.shuffle(seed=7)
  if split == "train":
    expected = expected.repeat()
  expected = expected.batch(3, drop_remainder=True)
  if split != "train":
    expected = expected[:len(expected) // processes * processes]
  for p in range(processes):
    it = loader.make_iterator(data, split, 3, seed=7, shuffle=shuffle, process_index=p, process_count=processes)
    share = iter(expected[p::processes].to_iter_dataset())
    for _ in range(2 * len(reference_windows(data, split)) // 3 if split == "train" else 10 ** 9):
      want = next(share, None)
      got = next(it, None)
      if want is None:
        assert got is None
        break
      np.testing.assert_array_equal(got, want)


def test_windows_of_several_shards_are_each_shards_brute_force_windows(sharded):
  """Every train window, gathered in reverse order (indices from five shards in one call),
  is the brute-force window of its own shard: none reads across a shard's end, in particular
  at each shard's first window."""
  windows = loader.Windows(prepare.prepared_dir(sharded), "train", L)
  expected = reference_windows(sharded, "train")
  assert len(windows) == len(expected)
  np.testing.assert_array_equal(windows.rows(np.arange(len(windows))[::-1]), expected[::-1])
