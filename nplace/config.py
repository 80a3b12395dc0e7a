"""Every configuration key, its default and its one-line doc, by section; validation; the
experiment files.

A section is a frozen dataclass (`ModelConfig`, `TrainConfig`, ...) whose fields are its keys.
`base_config()` builds from them the ml_collections ConfigDict that `experiments/*.py` start from
and the command line overrides (`--config.section.key=value`); `ModelConfig.of(config.model)`
turns a section back into its typed, frozen form (hashable: a static argument of jit).
`nplace info --config FILE --keys` prints every key with its value and doc.
"""
import dataclasses
import importlib.util
import math
import pathlib
import re
import traceback
import types
import typing

import ml_collections
from ml_collections import config_dict

from nplace.data import checks as data_checks
from nplace.errors import NOT_SET, ConfigError
from nplace.placements import PLACEMENTS

# The experiment configs: the source tree's experiments/, which installs as nplace.experiments,
# so an installed package finds them without the tree.
EXPERIMENTS = pathlib.Path(importlib.util.find_spec("nplace.experiments").submodule_search_locations[0])


def key(default, doc: str, choices: tuple = ()):
  """A config key: its default, one-line doc and, for a string, the values it may take."""
  return dataclasses.field(default=default, metadata={"doc": doc, "choices": tuple(choices)})


def _frozen(value):
  """Lists (JSON's, a ConfigDict's) as tuples, all the way down: a hashable value."""
  return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


class Section:
  """What every section dataclass has: its ConfigDict form and back."""

  @classmethod
  def defaults(cls) -> ml_collections.ConfigDict:
    """The section's keys at their defaults; a key that defaults to None is a typed
    placeholder, so `--config.x=3` still parses as its type."""
    hints = typing.get_type_hints(cls)
    out = ml_collections.ConfigDict()
    for field in dataclasses.fields(cls):
      if field.default is None:
        (kind,) = [t for t in typing.get_args(hints[field.name]) if t is not types.NoneType]
        out[field.name] = config_dict.placeholder(kind)
      else:
        out[field.name] = field.default
    return out

  @classmethod
  def of(cls, section):
    """The typed, frozen form of a section (a ConfigDict, frozen or not; or one already typed)."""
    if isinstance(section, cls):
      return section
    return cls(**{field.name: _frozen(section[field.name]) for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class ModelConfig(Section):
  """config.model: the network (GPT-2 124M shapes and Pre-LN by default)."""
  vocab_size: int = key(50257, "tokens in the vocabulary (rows of the tied embedding)")
  max_len: int = key(1024, "rows of the learned position table; longest sequence the model accepts")
  n_layer: int = key(12, "number of blocks (scanned)")
  scan_unroll: int = key(1, "blocks per iteration of the layer scan's loop (nn.scan's unroll): 1 = a rolled loop, "
                         ">= n_layer = straight-line code; the parameters stay stacked on `layers` either way, so "
                         "a checkpoint loads under any value")
  n_head: int = key(12, "attention heads; d_model must divide by it")
  d_model: int = key(768, "width of the residual stream")
  d_ff: int | None = key(None, "MLP hidden width; None = 4 * d_model")
  placement: str = key("pre", "where the norm goes (nplace info --placements lists them)", tuple(PLACEMENTS))
  mix_post_fraction: float = key(0.25, "mix: the first floor(f * n_layer) layers are Post-LN, the rest Pre-LN")
  qk_norm: bool = key(False, "a per-head norm on the attention queries and keys (any placement)")
  norm: str = key("layernorm", "layernorm (with bias, as GPT-2) | rmsnorm (gain only) | dyt (gamma tanh(alpha x) + beta)",
                  ("layernorm", "rmsnorm", "dyt"))
  norm_eps: float = key(1e-5, "epsilon inside the norm's square root")
  embed_norm: bool = key(False, "a norm on the embedding output (Peri-LN paper's option)")
  embed_scale: float = key(1.0, "multiplies the token embedding at the input (Gemma: sqrt(d_model)); the tied "
                           "head reads the table unscaled")
  dt: float = key(1.0, "residual step: h + dt * branch")
  attention: str = key("softmax", "softmax | centered (softmax minus the prefix average; study B ablation)",
                       ("softmax", "centered"))
  attn_out_scale: float = key(1.0, "multiplies the init std of the attention output projection o (study B's "
                              "matched-magnitude control: the softmax branch scaled to the centered one's size "
                              "at init)")
  attention_impl: str = key("auto", "xla (einsum; sows the probabilities) | dot_product (fused: cuDNN on GPU, "
                            "splash on TPU, causal halves on CPU) | auto (dot_product unless centered)",
                            ("xla", "dot_product", "auto"))
  mlp: str = key("gelu", "gelu (GPT-2, tanh approximation) | swiglu", ("gelu", "swiglu"))
  use_bias: bool = key(True, "biases in the linear layers (GPT-2 has them)")
  init: str = key("gpt2", "gpt2 | normal | variance_preserving", ("gpt2", "normal", "variance_preserving"))
  init_std: float = key(0.02, "weight std for the gpt2 and normal schemes")
  loss_chunks: int = key(1, "train loss over this many slices of the sequence, logits recomputed in the backward "
                         "(never all [B, T, vocab] at once); must divide data.seq_len")
  head_loss: str = key("gather", "the train loss's cross-entropy: gather (optax's integer labels over the logits "
                       "sliced to the vocabulary; its backward scatters into [B, T, vocab]) | one_hot (over the "
                       "padded logits, padding masked, the target's logit picked by a mask: no scatter, no slice)",
                       ("gather", "one_hot"))
  qkv_projection: str = key("separate", "separate (three products, one per q, k, v) | fused (one product over "
                            "their kernels stacked at trace time: the same parameters, one wider GEMM)",
                            ("separate", "fused"))
  head_vocab_multiple: int = key(128, "the head's product runs over the vocabulary padded with zero rows to a "
                                 "multiple of this, logits sliced back: same function, GEMM tiles aligned")
  remat: str = key("full", "rematerialisation policy per block: none | full | dots | dots_no_batch",
                   ("none", "full", "dots", "dots_no_batch"))
  dtype: str = key("float32", "compute dtype (parameters stay float32)", ("float32", "bfloat16"))
  matmul_precision: str = key("default", "float32 products' precision (jax.default_matmul_precision): default (the "
                              "backend's: one bfloat16 pass on TPU, TF32 on NVIDIA GPUs since Ampere, float32 on "
                              "CPU) | high | highest (float32 on every backend, several passes)",
                              ("default", "high", "highest"))


@dataclasses.dataclass(frozen=True)
class DataConfig(Section):
  """config.data: where the tokens come from (nplace/data/)."""
  seq_len: int = key(1024, "tokens per training window (<= model.max_len)")
  source: str = key("synthetic", "synthetic | shakespeare (shipped: nplace/data/corpora) | text:PATH | "
                    "tfds:NAME[/CONFIG]:SPLIT | openwebtext")
  tokenizer: str = key("byte", "byte | gpt2 (the synthetic source emits its own token ids)")
  text_field: str = key("text", "field holding the document in .jsonl lines and TFDS examples")
  tfds_data_dir: str | None = key(None, "TFDS data_dir (gs:// works); None = TFDS's default")
  val_fraction: float = key(0.01, "share of the token stream (its end) held out as the validation split")
  token_dtype: str = key("uint16", "dtype of the prepared shards: uint16 (vocab <= 65536) | uint32")
  cache_dir: str | None = key(None, "where sources are prepared; None = $NPLACE_CACHE or ~/.cache/nplace/data")
  synthetic_vocab: int = key(256, "tokens of the synthetic language (<= model.vocab_size)")
  synthetic_order: int = key(2, "its Markov order k: the next token depends on the last k")
  synthetic_tokens: int = key(1 << 24, "tokens it generates (train + val)")
  synthetic_seed: int = key(0, "seed of the language and of its samples")


@dataclasses.dataclass(frozen=True)
class ProbeConfig(Section):
  """config.probe: the probe suite during training and in `nplace probe`."""
  every: int = key(0, "run the probe suite every N train steps (and at step 0); 0 = off")
  early_every: int = key(0, "also probe every N steps up to probe.early_until (resolves what happens early in "
                         "training); 0 = off")
  early_until: int = key(0, "the last step of the early schedule")
  images: str = key("log", "probe steps that also draw images: log (0, every x 2^k, last), all, none",
                    ("log", "all", "none"))
  batch_size: int = key(4, "held-out sequences the probe suite runs on")
  hutchinson_probes: int = key(4, "Gaussian probes per Hutchinson estimate of a Jacobian's Frobenius norm")
  power_iters: int = key(10, "power iterations (J^T J v) per spectral-norm estimate; 0 = skip (costs O(L^2))")
  spectral_batch: int = key(1, "sequences (the batch's first) the spectral norms are averaged over")


@dataclasses.dataclass(frozen=True)
class TrainConfig(Section):
  """config.train: the loop."""
  steps: int = key(1000, "optimizer steps in the run")
  batch_size: int = key(8, "sequences per optimizer step, global over all devices")
  grad_accum: int = key(1, "microbatches per step (batch_size must divide by it); their losses and gradients are "
                        "averaged: the update of one step on the whole batch, to rounding")
  log_every: int = key(10, "write train/* and perf/* scalars every N steps")
  eval_every: int = key(100, "evaluate on the validation split every N steps (and at the end)")
  eval_batches: int = key(4, "validation batches per evaluation (always the same ones)")
  on_divergence: str = key("stop", "non-finite loss or gradient: stop (status diverged) | skip (drop the update)",
                           ("stop", "skip"))
  update_guard: str = key("select", "how a non-finite step keeps the old params and optimizer state: select "
                          "(the update computed, then the old state kept elementwise; XLA copies a donated state's "
                          "AdamW moments first, ~1 GB a step at 124M) | cond (the update skipped in a conditional: "
                          "no copies; a cell's per-run guard stays a select)", ("select", "cond"))
  spike_window: int = key(50, "steps in the rolling window of the loss-spike detector")
  spike_zscore: float = key(4.0, "a loss this many standard deviations above the window mean is a spike")
  peak_flops: float | None = key(None, "peak FLOP/s per device for perf/mfu; None = device table")
  cpu_devices: int = key(-1, "on a CPU: XLA devices the host is split into, data-parallel over the batch "
                         "(nplace/runtime/cpu_split.py); -1 = one per core, as many as the batch splits over")
  reuse_host_memory: bool = key(True, "glibc malloc keeps freed host memory (nplace/runtime/malloc.py): "
                                "~15% faster CPU steps, higher resident set")
  profile_steps: str | None = key(None, "\"START,STOP\": jax.profiler trace of steps START..STOP (inclusive) "
                                  "into <workdir>/plugins/profile; None = off")


@dataclasses.dataclass(frozen=True)
class EvalConfig(Section):
  """config.eval: what an evaluation computes beyond the loss."""
  rouge: bool = key(True, "ROUGE-1/2/L at every eval: of the teacher-forced argmax predictions, of the copy "
                    "baseline and of the generated continuations (a text source's decoded text through rouge-score, "
                    "pure Python: off for speed; the synthetic source's ids, vectorised)")
  generate: int = key(4, "validation sequences per eval batch (its first N) given a greedy continuation of their "
                      "first half, scored against the second half (ROUGE, BERTScore); decoded with a KV cache, "
                      "every batch's N in one loop of seq_len/2 steps; 0 = off")
  bertscore_model: str | None = key(None, "local model directory for BERTScore; None = off")
  bertscore_layers: int | None = key(None, "its layer to score with; None = the last")


@dataclasses.dataclass(frozen=True)
class OptimConfig(Section):
  """config.optim: AdamW, its schedule and its weight-decay mask."""
  lr: float = key(6e-4, "peak learning rate")
  min_lr_ratio: float = key(0.1, "cosine decays to lr * min_lr_ratio at the last step")
  warmup_steps: int = key(100, "linear warmup from 0")
  b1: float = key(0.9, "AdamW beta1, in [0, 1)")
  b2: float = key(0.95, "AdamW beta2, in [0, 1)")
  eps: float = key(1e-8, "AdamW epsilon (> 0)")
  weight_decay: float = key(0.1, "decoupled weight decay; 0 = off")
  decay_norms: bool = key(False, "apply weight decay to norm gains and biases")
  decay_biases: bool = key(False, "apply weight decay to linear-layer biases")
  decay_embeddings: bool = key(False, "apply weight decay to the token and position embeddings")
  clip_norm: float = key(1.0, "clip gradients to this global norm; 0 = off")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
  """config.checkpoint: orbax checkpoints in WORKDIR/checkpoints."""
  every: int = key(100, "save every N steps (and at the end, and on SIGTERM)")
  keep: int = key(3, "newest checkpoints kept")
  async_save: bool = key(True, "write in the background while training goes on")


# Logical axis -> mesh axes; a logical axis not listed is replicated. Parameters: embed, heads,
# kv, mlp, vocab, norm, position, layers. Activations (sharding.constrain in the model, active
# under the mesh): batch, length, act_embed, act_heads, act_kv, act_mlp, act_vocab. Listing
# act_embed nowhere keeps the residual stream whole on each device, so the fsdp-sharded `embed`
# of the weights never drags the batch into an all-gather. `vocab` is left out: GPT-2's 50257
# splits over no even axis (add ("vocab", "tensor") with a padded vocab). Where n_head does not
# divide over `tensor` (GPT-2 1.5B: 25), shard `kv` instead.
RULES = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("act_heads", "tensor"),
    ("act_mlp", "tensor"),
)


MESH_AXES = ("data", "fsdp", "tensor")  # MeshConfig's axis keys, in the mesh's order


@dataclasses.dataclass(frozen=True)
class MeshConfig(Section):
  """config.mesh: the device mesh (data, fsdp, tensor) and the logical-axis rules."""
  data: int = key(-1, "data-parallel axis size; -1 = the devices left over")
  fsdp: int = key(1, "parameter-sharded data-parallel axis size (params sharded over `embed`)")
  tensor: int = key(1, "tensor-parallel axis size (heads, mlp, vocab)")
  rules: tuple = key(RULES, "logical axis -> mesh axes, for parameters and activations (nplace/config.py: RULES)")


@dataclasses.dataclass(frozen=True)
class DistributedConfig(Section):
  """config.distributed: jax.distributed for multi-host runs."""
  initialize: bool = key(False, "call jax.distributed.initialize() (multi-host); TPU pods auto-detect the rest")
  coordinator_address: str | None = key(None, "host:port of process 0; None = auto")
  num_processes: int | None = key(None, "None = auto")
  process_id: int | None = key(None, "None = auto")


SECTIONS = {"model": ModelConfig, "data": DataConfig, "probe": ProbeConfig, "train": TrainConfig,
            "eval": EvalConfig, "optim": OptimConfig, "checkpoint": CheckpointConfig, "mesh": MeshConfig,
            "distributed": DistributedConfig}
TOP_KEYS = {"seed": (0, "seed for parameter init and everything random not tied to data")}


def base_config() -> ml_collections.ConfigDict:
  """Every section with its defaults (GPT-2 124M shapes, Pre-LN)."""
  c = ml_collections.ConfigDict({name: section.defaults() for name, section in SECTIONS.items()})
  for name, (default, _) in TOP_KEYS.items():
    c[name] = default
  return c


def keys(config) -> list[tuple[str, object, str]]:
  """(dotted key, value in `config`, doc) of every key, section by section."""
  out = [(name, config[name], doc) for name, (_, doc) in TOP_KEYS.items()]
  for name, section in SECTIONS.items():
    out += [(f"{name}.{f.name}", config[name][f.name], f.metadata["doc"]) for f in dataclasses.fields(section)]
  return out


def flatten(tree: dict, prefix: str = "") -> dict:
  """{"a": {"b": 1}} -> {"a.b": 1}: a config's (`config.to_dict()`) dotted keys and values."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat |= flatten(value, f"{prefix}{key}.")
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def experiment_path(spec: str) -> str:
  """`FILE[:ARG]` as given when FILE exists, else with FILE = `experiments/NAME.py` (or
  `NAME.py`) taken from the installed experiments: the same names work from any directory."""
  file, colon, arg = spec.partition(":")
  path = pathlib.Path(file)
  installed = EXPERIMENTS / path.name
  if path.exists() or path.parent.name not in ("experiments", "") or not installed.exists():
    return spec
  return f"{installed}{colon}{arg}"


def experiment(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`experiments/NAME.py`'s get_config(ARG), as `--config experiments/NAME.py:ARG` gives."""
  path = pathlib.Path(experiment_path(f"experiments/{name}.py"))
  spec = importlib.util.spec_from_file_location(f"experiments.{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if arg is None else module.get_config(arg)


def file_error(error: BaseException, file) -> str | None:
  """One line for an exception that running the Python file `file` (a config or grid file)
  raised: the file, the line in it, the exception; None when no frame of it is in `file`.
  A SyntaxError names its file itself, or none where the source could not be read as text."""
  if isinstance(error, SyntaxError) and error.filename in (None, str(file)):
    return f"{file}{f', line {error.lineno}' if error.lineno else ''}: SyntaxError: {error.msg}"
  frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == str(file)]
  if not frames:
    return None
  message = str(error).splitlines()[0] if str(error) else ""
  return f"{file}, line {frames[-1].lineno}: {type(error).__name__}" + (f": {message}" if message else "")


def from_saved(saved: dict) -> ml_collections.ConfigDict:
  """A config saved as JSON (by a checkpoint) over today's defaults: fields added since keep
  their defaults, fields removed since are dropped; JSON's lists become the tuples they were."""
  c = base_config()
  known = {key for key, _, _ in keys(c)}
  for key, value in flatten(saved).items():
    if key in known:
      section, _, field = key.rpartition(".")
      (c[section] if section else c)[field] = _frozen(value)
  return c


def variant(study: str, arg: str, builders: dict):
  """`builders[arg]()`: an experiment file's named variant, or a ValueError listing them."""
  if arg not in builders:
    raise ValueError(f"{study} variant {arg!r}: expected {' | '.join(builders)}")
  return builders[arg]()


FLOAT32_MAX = 3.4028234663852886e38  # past it a value is inf in the float32 it is computed in
INT32_MAX = 2**31 - 1


def _positive(key: str, value):
  if not 0 < value <= FLOAT32_MAX:
    raise ConfigError(key, value, "must be positive" if value <= 0 else "must be finite in float32")


def _choices(config) -> None:
  """Every key declared with choices holds one of them."""
  for name, section in SECTIONS.items():
    for field in dataclasses.fields(section):
      choices, value = field.metadata["choices"], config[name][field.name]
      if choices and value not in choices:
        raise ConfigError(f"{name}.{field.name}", value, f"must be one of {', '.join(choices)}")


def _declared_keys(config) -> None:
  """The config holds the declared keys and no others (a config file's `c.train.stepz = 4` is
  refused, not ignored), and no bool where a number goes (a grid's `{"train.steps": True}`:
  ConfigDict takes it, since a bool is an int)."""
  held = flatten(config.to_dict())
  types_of = {f"{name}.{field}": hint for name, section in SECTIONS.items()
              for field, hint in typing.get_type_hints(section).items()} | {k: int for k in TOP_KEYS}
  if unknown := sorted(held.keys() - types_of.keys()):
    raise ConfigError(unknown[0], held[unknown[0]], "no such config key (nplace info --config FILE --keys lists them)")
  if missing := sorted(types_of.keys() - held.keys()):
    raise ConfigError(missing[0], NOT_SET, "missing: a config starts from nplace.config.base_config()")
  for key, hint in types_of.items():
    numeric = {int, float} & {hint, *typing.get_args(hint)}
    if numeric and isinstance(held[key], bool):
      raise ConfigError(key, held[key], f"must be {' or '.join(sorted(t.__name__ for t in numeric))}, not a bool")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError on the first bad value. Cheap: builds nothing."""
  _declared_keys(config)
  for key, value in (("seed", config.seed), ("data.synthetic_seed", config.data.synthetic_seed)):
    if not 0 <= value < 2**32:  # what jax.random and numpy take
      raise ConfigError(key, value, "must be in [0, 2**32)")
  m = config.model
  for key in ("vocab_size", "max_len", "n_layer", "scan_unroll", "n_head", "d_model"):
    _positive(f"model.{key}", m[key])
  for key in ("vocab_size", "max_len"):  # the rows of tables that int32 token ids and positions index
    if m[key] > INT32_MAX:
      raise ConfigError(f"model.{key}", m[key], "must be below 2**31: the model indexes its rows with int32")
  if m.d_ff is not None:
    _positive("model.d_ff", m.d_ff)
  if m.d_model % m.n_head:
    raise ConfigError("model.d_model", m.d_model, f"must be divisible by model.n_head={m.n_head}")
  _choices(config)
  if not 0 <= m.mix_post_fraction <= 1:
    raise ConfigError("model.mix_post_fraction", m.mix_post_fraction, "must be in [0, 1]")
  if m.attention_impl == "dot_product" and m.attention == "centered":
    raise ConfigError("model.attention_impl", m.attention_impl,
                      "the centered ablation needs the probabilities: use xla or auto")
  _positive("model.dt", m.dt)
  _positive("model.norm_eps", m.norm_eps)
  _positive("model.embed_scale", m.embed_scale)
  _positive("model.attn_out_scale", m.attn_out_scale)
  _positive("model.init_std", m.init_std)
  _positive("data.seq_len", config.data.seq_len)
  _positive("model.head_vocab_multiple", m.head_vocab_multiple)
  _positive("model.loss_chunks", m.loss_chunks)
  if config.data.seq_len % m.loss_chunks:
    raise ConfigError("model.loss_chunks", m.loss_chunks, f"must divide data.seq_len={config.data.seq_len}")
  if config.data.seq_len > m.max_len:
    raise ConfigError("data.seq_len", config.data.seq_len,
                      f"exceeds the position table model.max_len={m.max_len}")
  _validate_probe(config.probe)
  if config.eval.bertscore_layers is not None:
    _positive("eval.bertscore_layers", config.eval.bertscore_layers)
  if config.eval.generate < 0:
    raise ConfigError("eval.generate", config.eval.generate, "must be >= 0 (0 = off)")
  if config.eval.generate and config.data.seq_len < 2:
    raise ConfigError("eval.generate", config.eval.generate, f"needs data.seq_len >= 2 to prompt with half a sequence and "
                      f"continue it, got {config.data.seq_len}")
  _validate_training(config)
  data_checks.validate(config)


def _validate_probe(p) -> None:
  if p.every < 0:
    raise ConfigError("probe.every", p.every, "must be >= 0 (0 = off)")
  for key in ("early_every", "early_until"):
    if p[key] < 0:
      raise ConfigError(f"probe.{key}", p[key], "must be >= 0 (0 = off)")
  if p.early_every and not p.early_until:
    raise ConfigError("probe.early_every", p.early_every, "needs probe.early_until > 0, the schedule's last step")
  if p.early_until and not p.early_every:
    raise ConfigError("probe.early_until", p.early_until, "needs probe.early_every > 0, the schedule's interval")
  for key in ("batch_size", "hutchinson_probes", "spectral_batch"):
    _positive(f"probe.{key}", p[key])
  if p.power_iters < 0:
    raise ConfigError("probe.power_iters", p.power_iters, "must be >= 0 (0 = skip the spectral norms)")
  if p.spectral_batch > p.batch_size:
    raise ConfigError("probe.spectral_batch", p.spectral_batch, f"exceeds probe.batch_size={p.batch_size}")


def profile_window(t) -> tuple[int, int] | None:
  """train.profile_steps as (START, STOP), 1 <= START <= STOP <= train.steps; None when off."""
  if t.profile_steps is None:
    return None
  first, _, last = t.profile_steps.partition(",")
  # isdecimal, not isdigit: '²' is a digit int() does not read (a ValueError traceback)
  if not (first.strip().isdecimal() and last.strip().isdecimal() and 1 <= int(first) <= int(last) <= t.steps):
    raise ConfigError("train.profile_steps", t.profile_steps,
                      f"must be START,STOP with 1 <= START <= STOP <= train.steps={t.steps}")
  return int(first), int(last)


def _validate_training(config) -> None:
  t, o = config.train, config.optim
  for key in ("steps", "batch_size", "grad_accum", "log_every", "eval_every", "eval_batches",
              "spike_window", "spike_zscore"):
    _positive(f"train.{key}", t[key])
  if t.batch_size % t.grad_accum:
    raise ConfigError("train.grad_accum", t.grad_accum,
                      f"must divide train.batch_size={t.batch_size}")
  if t.peak_flops is not None:
    _positive("train.peak_flops", t.peak_flops)
  if t.cpu_devices != -1:
    _positive("train.cpu_devices", t.cpu_devices)
  profile_window(t)
  _positive("checkpoint.every", config.checkpoint.every)
  _positive("checkpoint.keep", config.checkpoint.keep)
  _positive("optim.lr", o.lr)
  for key in ("warmup_steps", "weight_decay", "clip_norm"):
    if not 0 <= o[key] <= FLOAT32_MAX:
      raise ConfigError(f"optim.{key}", o[key], "must be >= 0" if o[key] < 0 else "must be finite in float32")
  # eps = 0: a parameter whose gradient is exactly 0 (the position rows past data.seq_len) gets
  # Adam's 0/0, a NaN the loss never shows, and the run ends "completed"
  _positive("optim.eps", o.eps)
  if not 0 <= o.min_lr_ratio <= 1:
    raise ConfigError("optim.min_lr_ratio", o.min_lr_ratio, "must be in [0, 1]")
  for key in ("b1", "b2"):  # 1: Adam's bias correction divides by 1 - b^t = 0, a NaN update at step 1
    if not 0 <= o[key] < 1:
      raise ConfigError(f"optim.{key}", o[key], "must be in [0, 1)")
  sizes = {axis: config.mesh[axis] for axis in MESH_AXES}
  for axis, size in sizes.items():
    if size == 0 or size < -1:
      raise ConfigError(f"mesh.{axis}", size, "must be positive, or -1 to fill")
  if list(sizes.values()).count(-1) > 1:
    raise ConfigError("mesh", sizes, "at most one axis may be -1")
  _validate_rules(config.mesh.rules)
  _validate_distributed(config.distributed)


def _validate_rules(rules) -> None:
  """mesh.rules: (logical axis, mesh axes) pairs, the mesh axes None, one of data, fsdp, tensor, or
  a tuple of them (a bad rule failed at startup in a traceback, unpacking it or looking its axis up)."""
  ok = lambda m: m is None or m in MESH_AXES or (isinstance(m, (list, tuple)) and all(a in MESH_AXES for a in m))
  if not isinstance(rules, (list, tuple)):
    raise ConfigError("mesh.rules", rules, "must be (logical axis, mesh axes) pairs, as nplace/config.py: RULES")
  for rule in rules:
    if not (isinstance(rule, (list, tuple)) and len(rule) == 2 and isinstance(rule[0], str) and ok(rule[1])):
      raise ConfigError("mesh.rules", rule, f"each rule must be (logical axis, mesh axes), the mesh axes None, "
                        f"one of {', '.join(MESH_AXES)} or a tuple of them")


def _validate_distributed(d) -> None:
  """What jax.distributed.initialize would refuse with a traceback, or wait on forever."""
  if d.num_processes is not None:
    _positive("distributed.num_processes", d.num_processes)
  if d.process_id is not None and not 0 <= d.process_id < (d.num_processes or math.inf):
    raise ConfigError("distributed.process_id", d.process_id,
                      f"must be in [0, distributed.num_processes={d.num_processes})")
  if d.coordinator_address is not None and not re.fullmatch(r"\S+:\d+", d.coordinator_address):
    raise ConfigError("distributed.coordinator_address", d.coordinator_address, "must be HOST:PORT")
