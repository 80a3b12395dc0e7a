"""Data: sources (synthetic, text, TFDS, OpenWebText), tokenizers, prepared token
shards and the grain loader over them. See `nplace prepare`.

The public names load their module on first use (PEP 562), so that config
validation and the CLI's error handling, which import submodules, do not pay for
importing grain and jax.
"""
import importlib

_PUBLIC = {  # name -> module defining it
    "DataError": "nplace.data.errors",
    "make_iterator": "nplace.data.loader",
    "prepared_dir": "nplace.data.prepare",
    "read_meta": "nplace.data.prepare",
}
__all__ = list(_PUBLIC)


def __getattr__(name):
  if name not in _PUBLIC:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  return getattr(importlib.import_module(_PUBLIC[name]), name)
