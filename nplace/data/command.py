"""`nplace prepare`: tokenize a source once into token shards.

  nplace prepare --source SRC --tokenizer TOK --out DIR [--val-fraction F] [--seq-len L]
  nplace prepare --config experiments/tiny.py     # into the cache the trainer reads

Flags override `config.data` (of --config, else the base config). Without --out the
tokens go to the cache directory named by the config (`nplace.data.prepared_dir`).
"""
from absl import flags

from nplace.config import base_config, validate

_FLAGS = {  # flag -> config.data field it overrides
    "source": "source",
    "tokenizer": "tokenizer",
    "val-fraction": "val_fraction",
    "seq-len": "seq_len",
}


def _define(fv):
  flags.DEFINE_string("source", None, "synthetic | text:PATH | tfds:NAME[/CONFIG]:SPLIT | "
                      "openwebtext (default: config.data.source)", flag_values=fv)
  flags.DEFINE_string("tokenizer", None, "byte | gpt2; ignored by synthetic, which emits its "
                      "own ids (default: config.data.tokenizer)", flag_values=fv)
  flags.DEFINE_string("out", None, "directory to write (default: the config's cache directory)",
                      flag_values=fv)
  flags.DEFINE_float("val-fraction", None, "share of the tokens held out for validation "
                     "(default: config.data.val_fraction)", flag_values=fv)
  flags.DEFINE_integer("seq-len", None, "each split must hold one window of seq-len + 1 tokens "
                       "(default: config.data.seq_len)", flag_values=fv)


def main(argv):
  from nplace import data
  from nplace.cli import parse_flags
  from nplace.data.prepare import prepare
  fv = parse_flags(argv, _define, need_config=False)
  config = fv.config if fv.config is not None else base_config()
  for flag, field in _FLAGS.items():
    if fv[flag].value is not None:
      config.data[field] = fv[flag].value
  validate(config)
  if fv.out:
    out, meta = fv.out, prepare(config.data, fv.out)
  else:
    out = data.prepared_dir(config.data)
    meta = data.read_meta(out)
  line = (f"{out}: {meta['tokens']['train']:,} train + {meta['tokens']['val']:,} val tokens, "
          f"vocab {meta['vocab_size']}, frequency_loss {meta['frequency_loss']:.4f}")
  if meta["entropy_rate"] is not None:
    line += f", entropy_rate {meta['entropy_rate']:.4f}"
  print(line)
