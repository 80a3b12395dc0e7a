"""Where documents come from: `text:PATH`, `tfds:NAME[/CONFIG]:SPLIT`, `openwebtext`, or a corpus
shipped with the package by name (`CORPORA`: `shakespeare`), read as `text:` its file.

(`synthetic` emits token ids, not documents: see synthetic.py.) A source yields
documents as str; bytes that are not UTF-8 are replaced by U+FFFD and counted.
"""
import dataclasses
import gzip
import json
import pathlib
import re
import zlib

from nplace.errors import DataError

SCHEMES = "synthetic | shakespeare | text:PATH | tfds:NAME[/CONFIG]:SPLIT | openwebtext"
# name -> the file under nplace/data/corpora/ (its README says where each comes from, and its licence)
CORPORA = {"shakespeare": "tinyshakespeare.txt"}
CORPORA_DIR = pathlib.Path(__file__).resolve().parent / "corpora"
TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")
OPENWEBTEXT = ("Skylion007/openwebtext", 8_013_769)  # Hugging Face repo, documents
_BLOCK = 1 << 22  # bytes of a .txt file read (and tokenized) at a time
_SURROGATE = re.compile("[\udc80-\udcff]")  # an undecodable byte under surrogateescape


@dataclasses.dataclass(frozen=True)
class Spec:
  """A parsed `config.data.source`."""
  scheme: str  # synthetic | text | tfds | openwebtext
  path: str = ""  # text: the file or directory
  name: str = ""  # tfds: NAME[/CONFIG][:VERSION]
  split: str = ""  # tfds: SPLIT, slicing included (train[:1%])


def parse(source: str) -> Spec:
  """Raises DataError on an unknown scheme or a missing part."""
  if source in ("synthetic", "openwebtext"):
    return Spec(source)
  if source in CORPORA:
    return Spec("text", path=str(CORPORA_DIR / CORPORA[source]))
  scheme, _, rest = source.partition(":")
  if scheme == "text" and rest:
    return Spec("text", path=rest)
  if scheme == "tfds":
    name, _, split = rest.rpartition(":")  # the name may carry a version: c4/en:3.1.0
    if name and split:
      return Spec("tfds", name=name, split=split)
    raise DataError(f"source {source!r}: expected tfds:NAME[/CONFIG]:SPLIT, e.g. tfds:c4/en:train")
  raise DataError(f"source {source!r}: unknown scheme, expected {SCHEMES}")


class Decoder:
  """UTF-8 decoding that replaces and counts undecodable bytes."""

  def __init__(self):
    self.replaced = 0  # undecodable bytes seen so far
    self.first_file = None  # where the first one was

  def __call__(self, data: bytes, where) -> str:
    text, n = _SURROGATE.subn("\ufffd", data.decode("utf-8", "surrogateescape"))
    if n:
      self.replaced += n
      self.first_file = self.first_file or str(where)
    return text


def text_files(path: str) -> list[pathlib.Path]:
  """The corpus files under PATH: the file itself or every TEXT_SUFFIXES file below it."""
  p = pathlib.Path(path).expanduser()
  if p.is_file():
    if not p.name.endswith(TEXT_SUFFIXES):
      raise DataError(f"text:{path}: expected a {', '.join(TEXT_SUFFIXES)} file")
    if p.stat().st_size == 0:
      raise DataError(f"text:{path}: empty file (0 bytes)")
    return [p]
  if not p.is_dir():
    raise DataError(f"text:{path}: no such file or directory")
  files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TEXT_SUFFIXES))
  if not files:
    raise DataError(f"text:{path}: empty directory (no {', '.join(TEXT_SUFFIXES)} files)")
  if not any(f.stat().st_size for f in files):
    raise DataError(f"text:{path}: all {len(files)} files are empty (0 bytes)")
  return files


def text_documents(path: str, field: str, decode: Decoder, bar):
  """Yields (text, ends_document): a .txt file is one document, read in blocks cut at
  newlines; a .jsonl[.gz] line is one document, its text in `field`."""
  for f in text_files(path):
    if f.name.endswith(".txt"):
      yield from _txt_blocks(f, decode, bar)
      continue
    yield from _jsonl_documents(f, field, decode, bar)


def _jsonl_documents(f: pathlib.Path, field: str, decode: Decoder, bar):
  number = 0
  try:
    with (gzip.open if f.name.endswith(".gz") else open)(f, "rb") as lines:
      for number, line in enumerate(lines, 1):
        bar.update(len(line))  # bytes as stored (for .gz, uncompressed: an estimate)
        if not line.strip():
          continue
        try:
          record = json.loads(decode(line, f))
        except json.JSONDecodeError as e:
          raise DataError(f"text:{f}:{number}: not a JSON line ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
          raise DataError(f"text:{f}:{number}: no string field {field!r} "
                          f"(set config.data.text_field)")
        yield record[field], True
  except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # not gzip, or cut short
    raise DataError(f"text:{f}: does not decompress{f' after line {number}' if number else ''} "
                    f"({type(e).__name__}: {e})") from None


def _txt_blocks(f: pathlib.Path, decode: Decoder, bar):
  with open(f, "rb") as stream:
    pending = b""
    while block := stream.read(_BLOCK):
      bar.update(len(block))
      pending += block
      cut = pending.rfind(b"\n") + 1  # a newline never splits a UTF-8 character
      if cut:
        yield decode(pending[:cut], f), False
        pending = pending[cut:]
    yield decode(pending, f), True


def tfds_documents(name: str, split: str, data_dir, field: str, decode: Decoder, bar):
  """Yields (text, True) per example of a prepared TFDS dataset (nothing is downloaded).

  ArrayRecord datasets are read through `as_data_source` (no TensorFlow); TFRecord ones
  (most of the public gs://tensorflow-datasets, c4 included) through tf.data."""
  import tensorflow_datasets as tfds  # heavy (seconds to import): for TFDS sources alone
  where = f"tfds:{name}:{split}"
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except (tfds.core.registered.DatasetNotFoundError, ValueError) as e:  # ValueError: bad config
    raise DataError(f"{where}: no TFDS dataset {name!r} (data_dir={data_dir or 'default'}): "
                    f"{str(e).splitlines()[0]}") from None
  if not builder.is_prepared():
    raise DataError(f"{where}: not prepared in {builder.data_dir} "
                    f"(build it with `tfds build {name}` or set config.data.tfds_data_dir)")
  if field not in builder.info.features:
    raise DataError(f"{where}: no feature {field!r} (features: {', '.join(builder.info.features)}; "
                    f"set config.data.text_field)")
  try:
    bar.reset(total=builder.info.splits[split].num_examples)
    if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
      source = builder.as_data_source(split)
      examples = (source[i] for i in range(len(source)))
    else:
      try:
        import tensorflow  # noqa: F401  (tf.data reads TFRecord files)
      except ImportError:
        raise DataError(f"{where}: stored as {builder.info.file_format.value}, which only "
                        f"TensorFlow reads (pip install tensorflow-cpu)") from None
      examples = tfds.as_numpy(builder.as_dataset(split, shuffle_files=False))
  except (KeyError, ValueError) as e:
    raise DataError(f"{where}: bad split {split!r} (splits: {', '.join(builder.info.splits)}): "
                    f"{str(e).splitlines()[0]}") from None
  for example in examples:
    bar.update(1)
    text = example[field]
    yield (decode(text, where) if isinstance(text, bytes) else text), True


def openwebtext_documents(field: str, bar):
  """Yields (text, True) per OpenWebText document, streamed by Hugging Face `datasets`."""
  try:
    import datasets  # optional: the `openwebtext` extra
  except ImportError:
    raise DataError("openwebtext: needs the Hugging Face datasets library "
                    "(pip install 'nplace[openwebtext]')") from None
  repo, documents = OPENWEBTEXT
  bar.reset(total=documents)
  for example in datasets.load_dataset(repo, split="train", streaming=True):
    bar.update(1)
    yield example[field], True
