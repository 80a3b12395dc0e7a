"""Tokenize a source once into flat token shards plus a `meta.json`.

A prepared directory holds `train_NNNNN.bin` and `val_NNNNN.bin` (raw uint16 or
uint32 token ids, documents separated by EOS, at most SHARD_TOKENS each) and
`meta.json`, written last. The validation split is the last `val_fraction` of the
token stream. The directory is built under a temporary name and renamed into place,
so a killed run never leaves a directory that looks finished; one whose shards do not match
its meta.json is prepared again, and shards without a valid meta.json are not nplace's: refused.
"""
import hashlib
import itertools
import json
import os
import pathlib
import re
import shutil
import socket
import sys

import numpy as np
from tqdm import tqdm

from nplace.data import sources, synthetic, tokenizers
from nplace.errors import ConfigError, DataError

FORMAT = "nplace-tokens/1"
META = "meta.json"
SHARD_TOKENS = 1 << 28  # tokens per shard file (512 MiB as uint16)
_FLUSH = 1 << 22  # tokens buffered in memory before a write
_BATCH = 256  # documents per tokenizer call (tiktoken spreads a batch over threads)
_SHARD = re.compile(r"(train|val)_\d{5}\.bin")


def default_cache() -> pathlib.Path:
  return pathlib.Path(os.environ.get("NPLACE_CACHE") or "~/.cache/nplace/data").expanduser()


def identity(data) -> dict:
  """The fields of `config.data` that determine the tokens (seq_len does not)."""
  spec = sources.parse(data.source)
  key = {"format": FORMAT, "source": data.source, "val_fraction": float(data.val_fraction),
         "token_dtype": data.token_dtype}
  if spec.scheme == "synthetic":
    key.update(tokenizer="synthetic", generator=synthetic.VERSION, vocab=data.synthetic_vocab,
               order=data.synthetic_order, tokens=data.synthetic_tokens, seed=data.synthetic_seed)
  else:
    key.update(tokenizer=data.tokenizer, text_field=data.text_field)
  if spec.scheme == "text":  # a changed corpus file means new tokens
    key["files"] = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns]
                    for f in sources.text_files(spec.path)]
  if spec.scheme == "tfds":
    key["tfds_data_dir"] = data.tfds_data_dir
  return key


def prepared_dir(data) -> pathlib.Path:
  """The cache directory of `config.data`, prepared on first use."""
  root = pathlib.Path(data.cache_dir).expanduser() if data.cache_dir else default_cache()
  digest = hashlib.sha256(json.dumps(identity(data), sort_keys=True).encode()).hexdigest()
  out = root / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', data.source)[-48:]}-{digest[:16]}"
  prepare(data, out)
  return out


def read_meta(directory) -> dict:
  path = pathlib.Path(directory) / META
  if not path.is_file():
    raise DataError(f"{directory}: no {META}: not a prepared token directory (run nplace prepare)")
  return json.loads(path.read_text())


def check_windows(meta: dict, seq_len: int, where) -> None:
  """Both splits must hold one window of seq_len + 1 tokens."""
  tokens = meta["tokens"]
  if min(tokens.values()) < seq_len + 1:
    raise DataError(
        f"{where}: {sum(tokens.values())} tokens, {tokens['train']} train / {tokens['val']} val "
        f"(val fraction {meta['identity']['val_fraction']}): each split needs one window of "
        f"seq_len+1={seq_len + 1} tokens")


def prepare(data, out, progress=None) -> dict:
  """Prepares `config.data` into directory `out` unless it is already there; its meta.
  progress: show a progress bar (None: when stderr is a terminal)."""
  out = pathlib.Path(out).expanduser()
  key = identity(data)
  meta = _finished(out, key)
  if meta is None:
    _build(data, key, out, progress)
    meta = read_meta(out)
  check_windows(meta, data.seq_len, data.source)
  return meta


def _finished(out: pathlib.Path, key: dict):
  """out's meta if out is a finished preparation of `key`; None after clearing a damaged
  one (its meta.json proves it ours: a preparation lands whole, by one rename); DataError
  if out holds anything else, shards without a meta.json included."""
  if not out.exists():
    return None
  try:
    meta = json.loads((out / META).read_text())
  except (OSError, json.JSONDecodeError):
    meta = None
  if meta is not None and meta.get("identity") != key:
    raise DataError(f"{out}: holds tokens prepared from other input (source={meta.get('source')!r} "
                    f"or its files changed); delete it or choose another directory")
  if meta is not None and _shards_intact(out, meta):
    return meta
  held = sorted(p.name for p in out.iterdir())
  foreign = [name for name in held if name != META and not _SHARD.fullmatch(name)]
  if foreign or (held and meta is None):
    raise DataError(f"{out}: not a token directory (holds {(foreign or held)[0]!r}"
                    f"{'' if foreign else f', no valid {META}'}); refusing to overwrite it")
  if held:
    print(f"{out}: damaged (a shard is missing or cut short); preparing it again", file=sys.stderr)
  shutil.rmtree(out)
  return None


def _shards_intact(out, meta) -> bool:
  itemsize = np.dtype(meta["dtype"]).itemsize
  return all((out / name).is_file() and (out / name).stat().st_size == n * itemsize
             for shards in meta["shards"].values() for name, n in shards)


def _build(data, key, out: pathlib.Path, progress):
  tag = f".{out.name}.partial-{socket.gethostname()}-"
  for stale in out.parent.glob(f"{tag}*"):  # left by a killed run on this host
    if not _alive(int(stale.name[len(tag):])):
      shutil.rmtree(stale, ignore_errors=True)
  tmp = out.parent / f"{tag}{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    tmp.mkdir(parents=True)
  except OSError as e:  # a read-only cache (NPLACE_CACHE, data.cache_dir): one line, not a traceback
    raise DataError(f"{out.parent}: cannot prepare the data there ({e.strerror or e}): set NPLACE_CACHE or "
                    "data.cache_dir to a directory you can write") from None
  try:
    _check_space(data, tmp)
    meta = _tokenize(data, key, tmp, progress)
    (tmp / f"{META}.tmp").write_text(json.dumps(meta, indent=1))
    os.rename(tmp / f"{META}.tmp", tmp / META)
    try:
      os.rename(tmp, out)
    except OSError:  # another process finished the same preparation first
      if _finished(out, key) is None:
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _check_space(data, directory: pathlib.Path) -> None:
  """ConfigError when a synthetic source's token ids need more bytes than `directory`'s
  filesystem has free: refused before writing, not when the disk fills hours later. (Other
  sources' token counts are known only once tokenized.)"""
  if sources.parse(data.source).scheme != "synthetic":
    return
  needs = data.synthetic_tokens * np.dtype(data.token_dtype).itemsize
  free = shutil.disk_usage(directory).free
  if needs > free:
    raise ConfigError("data.synthetic_tokens", data.synthetic_tokens,
                      f"its {needs:,} bytes of {data.token_dtype} token ids need more than the {free:,} bytes "
                      f"free where they are prepared ({directory.parent})")


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class ShardWriter:
  """Appends token ids to `PREFIX_NNNNN.bin` files, counting unigrams and hashing the bytes
  (`sha256`: what the stream holds, whatever its source files' names and times)."""

  def __init__(self, directory, prefix, dtype, vocab):
    self.directory, self.prefix, self.dtype = directory, prefix, dtype
    self.counts_V = np.zeros(vocab, np.int64)
    self.sha256 = hashlib.sha256()
    self.shards = []  # [name, tokens]
    self._buffer, self._buffered = [], 0

  @property
  def total(self):
    return sum(n for _, n in self.shards) + self._buffered

  def add(self, ids):
    self._buffer.append(np.asarray(ids))
    self._buffered += len(ids)
    if self._buffered >= _FLUSH:
      self.flush()

  def flush(self):
    ids = np.concatenate(self._buffer or [np.zeros(0, self.dtype)]).astype(self.dtype)
    self._buffer, self._buffered = [], 0
    self.counts_V += np.bincount(ids, minlength=len(self.counts_V))
    self.sha256.update(ids.tobytes())
    while len(ids):
      if not self.shards or self.shards[-1][1] == SHARD_TOKENS:
        self.shards.append([f"{self.prefix}_{len(self.shards):05d}.bin", 0])
      room = SHARD_TOKENS - self.shards[-1][1]
      with open(self.directory / self.shards[-1][0], "ab") as f:
        ids[:room].tofile(f)
      self.shards[-1][1] += len(ids[:room])
      ids = ids[room:]

  def split_tail(self, n_tail: int) -> "ShardWriter":
    """Moves the last n_tail tokens into a `val` writer (flushed), truncating these shards."""
    self.flush()
    tail = ShardWriter(self.directory, "val", self.dtype, len(self.counts_V))
    keep, offset, kept = self.total - n_tail, 0, []
    for name, n in self.shards:
      stay = min(max(keep - offset, 0), n)  # this shard's tokens that stay in train
      offset += n
      tokens = np.memmap(self.directory / name, self.dtype, "r", shape=(n,))
      for i in range(stay, n, _FLUSH):
        tail.add(np.array(tokens[i:i + _FLUSH]))
      del tokens
      if stay:
        os.truncate(self.directory / name, stay * self.dtype.itemsize)
        kept.append([name, stay])
      else:
        os.unlink(self.directory / name)
    tail.flush()
    self.counts_V -= tail.counts_V
    self.shards = kept
    return tail


def _tokenize(data, key, tmp: pathlib.Path, progress) -> dict:
  spec = sources.parse(data.source)
  dtype = np.dtype(data.token_dtype)
  meta = {"format": FORMAT, "identity": key, "source": data.source, "dtype": dtype.name,
          "entropy_rate": None, "unigram_entropy": None, "bigram_entropy": None,
          "documents": None, "replaced_bytes": 0}
  bar = tqdm(desc=f"prepare {data.source}", unit="tok" if spec.scheme == "synthetic" else "B",
             unit_scale=True, disable=None if progress is None else not progress)
  if spec.scheme == "synthetic":
    vocab = _fits(data.synthetic_vocab, dtype, data.source)
    chain = synthetic.build(vocab, data.synthetic_order, data.synthetic_seed)
    meta.update(tokenizer="synthetic", vocab_size=vocab, eos_id=None,
                entropy_rate=chain.entropy_rate, unigram_entropy=chain.unigram_entropy,
                bigram_entropy=chain.bigram_entropy)
    writer = ShardWriter(tmp, "train", dtype, vocab)
    bar.reset(total=data.synthetic_tokens)
    for ids in chain.generate(data.synthetic_tokens, data.synthetic_seed, dtype):
      writer.add(ids)
      bar.update(len(ids))
  else:
    tokenizer = tokenizers.make(data.tokenizer)
    vocab = _fits(tokenizer.vocab_size, dtype, data.source)
    meta.update(tokenizer=tokenizer.name, vocab_size=vocab, eos_id=tokenizer.eos)
    writer = ShardWriter(tmp, "train", dtype, vocab)
    decode = sources.Decoder()
    if spec.scheme == "text":
      bar.reset(total=sum(f.stat().st_size for f in sources.text_files(spec.path)))
      pieces = sources.text_documents(spec.path, data.text_field, decode, bar)
    elif spec.scheme == "tfds":
      bar.unit = "doc"
      pieces = sources.tfds_documents(spec.name, spec.split, data.tfds_data_dir, data.text_field,
                                      decode, bar)
    else:
      bar.unit = "doc"
      pieces = sources.openwebtext_documents(data.text_field, bar)
    meta["documents"] = _encode(pieces, tokenizer, writer)
    if decode.replaced:
      print(f"{data.source}: replaced {decode.replaced} undecodable bytes with U+FFFD "
            f"(the first in {decode.first_file})", file=sys.stderr)
    meta["replaced_bytes"] = decode.replaced
  bar.close()
  val = writer.split_tail(round(writer.total * data.val_fraction))
  meta.update(tokens={"train": writer.total, "val": val.total}, tokens_sha256=writer.sha256.hexdigest(),
              shards={"train": writer.shards, "val": val.shards})
  check_windows(meta, data.seq_len, data.source)
  meta.update(frequency_loss=frequency_loss(writer.counts_V, val.counts_V),
              unigram_counts=writer.counts_V.tolist())
  return meta


def _encode(pieces, tokenizer, writer) -> int:
  """Tokenizes (text, ends_document) pieces into writer, EOS after each document."""
  documents, pieces = 0, iter(pieces)
  while batch := list(itertools.islice(pieces, _BATCH)):
    for ids, (_, end) in zip(tokenizer.encode_batch([text for text, _ in batch]), batch):
      writer.add(ids)
      if end:
        writer.add(np.array([tokenizer.eos]))
        documents += 1
  return documents


def _fits(vocab: int, dtype: np.dtype, source: str) -> int:
  if vocab > np.iinfo(dtype).max + 1:
    raise DataError(f"{source}: vocab {vocab} does not fit token dtype {dtype.name} "
                    f"(at most {np.iinfo(dtype).max + 1} ids); set config.data.token_dtype=uint32")
  return vocab


def frequency_loss(train_counts_V, val_counts_V) -> float:
  """Cross-entropy on val of the unigram law of train (add-one smoothed, so a token
  unseen in train costs a finite loss)."""
  p_V = (train_counts_V + 1) / (train_counts_V.sum() + len(train_counts_V))
  return float(-(val_counts_V * np.log(p_V)).sum() / val_counts_V.sum())
