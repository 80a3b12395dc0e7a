"""A grain pipeline over prepared token shards: `[batch, seq_len+1]` int32 windows.

Window i of a shard is tokens [i*seq_len, (i+1)*seq_len + 1): consecutive windows
share one token, so every token is a target exactly once. Windows do not cross shards.
"""
import grain
import jax
import numpy as np

from nplace.data import prepare
from nplace.errors import DataError


class Windows:
  """The windows of one split: each shard seen as a [windows, seq_len+1] strided view, read a
  batch of indices at a time."""

  def __init__(self, directory, split: str, seq_len: int):
    meta = prepare.read_meta(directory)
    prepare.check_windows(meta, seq_len, directory)
    self.seq_len = seq_len
    shards = [np.memmap(f"{directory}/{name}", meta["dtype"], "r", shape=(n,)) for name, n in meta["shards"][split]]
    self._views = [np.lib.stride_tricks.as_strided(s, ((len(s) - 1) // seq_len, seq_len + 1),
                                                   (seq_len * s.itemsize, s.itemsize), writeable=False)
                   for s in shards]
    self._starts = np.cumsum([0] + [len(v) for v in self._views])

  def __len__(self) -> int:
    return int(self._starts[-1])

  def rows(self, indices_B: np.ndarray) -> np.ndarray:
    """[B] window indices -> their windows, [B, seq_len+1] int32."""
    shard_B = np.searchsorted(self._starts, indices_B, side="right") - 1
    out_BT1 = np.empty((len(indices_B), self.seq_len + 1), np.int32)
    for shard in np.unique(shard_B):
      mine = shard_B == shard
      out_BT1[mine] = self._views[shard][indices_B[mine] - self._starts[shard]]
    return out_BT1


def make_iterator(data, split: str, batch_size: int, *, seed: int, shuffle: bool,
                  process_index=None, process_count=None) -> grain.DatasetIterator:
  """Batches of this process's share of `split` of `config.data` (prepared on first use).

  All processes walk the same (shuffled) order of windows, cut into batches of
  batch_size; process p takes batches p, p + P, p + 2P, ... So the global batch
  (the processes' batches in process order) does not depend on the process count.
  train repeats forever, reshuffled each epoch by seed; val is read once, every
  process getting as many batches. The iterator's get_state/set_state (and
  grain.checkpoint) resume it exactly."""
  process_index = jax.process_index() if process_index is None else process_index
  process_count = jax.process_count() if process_count is None else process_count
  windows = Windows(prepare.prepared_dir(data), split, data.seq_len)
  if len(windows) < batch_size * process_count:
    raise DataError(f"{data.source} ({split}): {len(windows)} windows of seq_len+1="
                    f"{data.seq_len + 1} tokens, fewer than a global batch of {batch_size} x "
                    f"{process_count} processes")
  # grain orders and batches the windows' indices; the batch's rows are one gather. Read in the
  # caller's thread: a cell of K runs would otherwise start K prefetch pools of 16 threads.
  ds = grain.MapDataset.range(len(windows))
  if shuffle:
    ds = ds.shuffle(seed=seed)  # a repeated index beyond len reshuffles with seed + epoch
  if split == "train":
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=True)
  if split != "train":
    ds = ds[:len(ds) // process_count * process_count]
  ds = ds[process_index::process_count].map(windows.rows)
  return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
