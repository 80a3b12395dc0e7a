"""The base configuration and its validation.

Every field carries a one-line doc as a trailing comment. Experiments in
`experiments/` start from `base_config()` and change what they need; the command
line overrides with `--config.section.field=value` (ml_collections config_flags).
"""
import importlib.util
import pathlib

import ml_collections
from ml_collections import config_dict

EXPERIMENTS = pathlib.Path(__file__).resolve().parent.parent / "experiments"

PLACEMENTS = ("post", "pre", "peri")
NORMS = ("layernorm", "rmsnorm")
ATTENTIONS = ("softmax", "centered")
MLPS = ("gelu", "swiglu")
INITS = ("gpt2", "normal", "variance_preserving")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
DTYPES = ("float32", "bfloat16")


class ConfigError(ValueError):
  """A bad configuration value; the message is one line naming the key."""

  def __init__(self, key: str, value, why: str):
    super().__init__(f"config error: {key}={value!r}: {why}")
    self.key = key


def model_config() -> ml_collections.ConfigDict:
  m = ml_collections.ConfigDict()
  m.vocab_size = 50257  # tokens in the vocabulary (rows of the tied embedding)
  m.max_len = 1024  # rows of the learned position table; longest sequence the model accepts
  m.n_layer = 12  # number of blocks (scanned)
  m.n_head = 12  # attention heads; d_model must divide by it
  m.d_model = 768  # width of the residual stream
  m.d_ff = config_dict.placeholder(int)  # MLP hidden width; None = 4 * d_model
  m.placement = "pre"  # where the norm goes: post | pre | peri
  m.norm = "layernorm"  # layernorm (with bias, as GPT-2) | rmsnorm (gain only)
  m.norm_eps = 1e-5  # epsilon inside the norm's square root
  m.embed_norm = False  # a norm on the embedding output (Peri-LN paper's option)
  m.dt = 1.0  # residual step: h + dt * branch
  m.attention = "softmax"  # softmax | centered (softmax minus the prefix average; study B ablation)
  m.mlp = "gelu"  # gelu (GPT-2, tanh approximation) | swiglu
  m.use_bias = True  # biases in the linear layers (GPT-2 has them)
  m.init = "gpt2"  # gpt2 | normal | variance_preserving
  m.init_std = 0.02  # weight std for the gpt2 and normal schemes
  m.remat = "full"  # rematerialisation policy per block: none | full | dots | dots_no_batch
  m.dtype = "float32"  # compute dtype (parameters stay float32)
  return m


def base_config() -> ml_collections.ConfigDict:
  """Every section with its defaults (GPT-2 124M shapes, Pre-LN)."""
  c = ml_collections.ConfigDict()
  c.model = model_config()
  c.data = ml_collections.ConfigDict()
  c.data.seq_len = 1024  # tokens per training window (<= model.max_len)
  c.data.source = "synthetic"  # synthetic | text:PATH | tfds:NAME[/CONFIG]:SPLIT | openwebtext
  c.data.tokenizer = "byte"  # byte | gpt2 (the synthetic source emits its own token ids)
  c.probe = ml_collections.ConfigDict()
  c.probe.every = 0  # run the probe suite every N train steps (and at step 0); 0 = off
  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 8  # sequences per optimizer step, global over all devices
  c.seed = 0  # seed for parameter init and everything random not tied to data
  return c


def experiment(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`experiments/NAME.py`'s get_config(ARG), as `--config experiments/NAME.py:ARG` gives."""
  spec = importlib.util.spec_from_file_location(f"experiments.{name}", EXPERIMENTS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if arg is None else module.get_config(arg)


def _positive(key: str, value):
  if not value > 0:
    raise ConfigError(key, value, "must be positive")


def _one_of(key: str, value, choices):
  if value not in choices:
    raise ConfigError(key, value, f"must be one of {', '.join(choices)}")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError on the first bad value. Cheap: builds nothing."""
  m = config.model
  for key in ("vocab_size", "max_len", "n_layer", "n_head", "d_model"):
    _positive(f"model.{key}", m[key])
  if m.d_ff is not None:
    _positive("model.d_ff", m.d_ff)
  if m.d_model % m.n_head:
    raise ConfigError("model.d_model", m.d_model, f"must be divisible by model.n_head={m.n_head}")
  _one_of("model.placement", m.placement, PLACEMENTS)
  _one_of("model.norm", m.norm, NORMS)
  _one_of("model.attention", m.attention, ATTENTIONS)
  _one_of("model.mlp", m.mlp, MLPS)
  _one_of("model.init", m.init, INITS)
  _one_of("model.remat", m.remat, REMAT_POLICIES)
  _one_of("model.dtype", m.dtype, DTYPES)
  _positive("model.dt", m.dt)
  _positive("model.norm_eps", m.norm_eps)
  _positive("model.init_std", m.init_std)
  _positive("data.seq_len", config.data.seq_len)
  if config.data.seq_len > m.max_len:
    raise ConfigError("data.seq_len", config.data.seq_len,
                      f"exceeds the position table model.max_len={m.max_len}")
  _positive("train.batch_size", config.train.batch_size)
