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
  """Random access to the windows of one split (a grain RandomAccessDataSource)."""

  def __init__(self, directory, split: str, seq_len: int):
    meta = prepare.read_meta(directory)
    prepare.check_windows(meta, seq_len, directory)
    self.seq_len = seq_len
    self._shards = [np.memmap(f"{directory}/{name}", meta["dtype"], "r", shape=(n,))
                    for name, n in meta["shards"][split]]
    self._ends = np.cumsum([(len(s) - 1) // seq_len for s in self._shards])

  def __len__(self) -> int:
    return int(self._ends[-1])

  def __getitem__(self, index: int) -> np.ndarray:
    shard = int(np.searchsorted(self._ends, index, side="right"))
    start = (index - (self._ends[shard - 1] if shard else 0)) * self.seq_len
    return self._shards[shard][start:start + self.seq_len + 1].astype(np.int32)


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
  ds = grain.MapDataset.source(windows)
  if shuffle:
    ds = ds.shuffle(seed=seed)  # a repeated index beyond len reshuffles with seed + epoch
  if split == "train":
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=True)
  if split != "train":
    ds = ds[:len(ds) // process_count * process_count]
  return iter(ds[process_index::process_count].to_iter_dataset())
