"""The base configuration and its validation.

Every field carries a one-line doc as a trailing comment. Experiments in
`experiments/` start from `base_config()` and change what they need; the command
line overrides with `--config.section.field=value` (ml_collections config_flags).
"""
import importlib.util
import pathlib

import ml_collections
from ml_collections import config_dict

# The experiment configs: the source tree's experiments/, which installs as nplace.experiments
# (through the link nplace/experiments), so an installed package finds them without the tree.
EXPERIMENTS = pathlib.Path(importlib.util.find_spec("nplace.experiments").submodule_search_locations[0])

# The names of nplace/placements.py's declarations (listed here so validation imports no jax).
PLACEMENTS = ("post", "pre", "peri", "reorder", "deepnorm", "mix", "lns", "rezero", "hybrid")
NORMS = ("layernorm", "rmsnorm", "dyt")
ATTENTIONS = ("softmax", "centered")
ATTENTION_IMPLS = ("xla", "dot_product", "auto")
MLPS = ("gelu", "swiglu")
INITS = ("gpt2", "normal", "variance_preserving")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
DTYPES = ("float32", "bfloat16")
IMAGE_SCHEDULES = ("log", "all", "none")


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
  m.placement = "pre"  # where the norm goes: post | pre | peri | reorder | deepnorm | mix | lns | rezero | hybrid
  m.mix_post_fraction = 0.25  # mix: the first floor(f * n_layer) layers are Post-LN, the rest Pre-LN
  m.qk_norm = False  # a per-head norm on the attention queries and keys (any placement)
  m.norm = "layernorm"  # layernorm (with bias, as GPT-2) | rmsnorm (gain only) | dyt (gamma tanh(alpha x) + beta)
  m.norm_eps = 1e-5  # epsilon inside the norm's square root
  m.embed_norm = False  # a norm on the embedding output (Peri-LN paper's option)
  m.dt = 1.0  # residual step: h + dt * branch
  m.attention = "softmax"  # softmax | centered (softmax minus the prefix average; study B ablation)
  m.attention_impl = "auto"  # xla (einsum; sows the probabilities) | dot_product (fused: cuDNN on GPU, splash on TPU, causal halves on CPU) | auto (dot_product unless centered)
  m.mlp = "gelu"  # gelu (GPT-2, tanh approximation) | swiglu
  m.use_bias = True  # biases in the linear layers (GPT-2 has them)
  m.init = "gpt2"  # gpt2 | normal | variance_preserving
  m.init_std = 0.02  # weight std for the gpt2 and normal schemes
  m.loss_chunks = 1  # train loss over this many slices of the sequence, logits recomputed in the backward (never all [B, T, vocab] at once); must divide data.seq_len
  m.head_vocab_multiple = 128  # the head's product runs over the vocabulary padded with zero rows to a multiple of this, logits sliced back: same function, GEMM tiles aligned (GPT-2's 50257 rows were 1.14x slower on a GPU)
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
  c.data.text_field = "text"  # field holding the document in .jsonl lines and TFDS examples
  c.data.tfds_data_dir = config_dict.placeholder(str)  # TFDS data_dir (gs:// works); None = TFDS's default
  c.data.val_fraction = 0.01  # share of the token stream (its end) held out as the validation split
  c.data.token_dtype = "uint16"  # dtype of the prepared shards: uint16 (vocab <= 65536) | uint32
  c.data.cache_dir = config_dict.placeholder(str)  # where sources are prepared; None = $NPLACE_CACHE or ~/.cache/nplace/data
  c.data.synthetic_vocab = 256  # tokens of the synthetic language (<= model.vocab_size)
  c.data.synthetic_order = 2  # its Markov order k: the next token depends on the last k
  c.data.synthetic_tokens = 1 << 24  # tokens it generates (train + val)
  c.data.synthetic_seed = 0  # seed of the language and of its samples
  c.probe = ml_collections.ConfigDict()
  c.probe.every = 0  # run the probe suite every N train steps (and at step 0); 0 = off
  c.probe.images = "log"  # probe steps that also draw images: log (0, every x 2^k, last), all, none
  c.probe.batch_size = 4  # held-out sequences the probe suite runs on
  c.probe.hutchinson_probes = 4  # Gaussian probes per Hutchinson estimate of a Jacobian's Frobenius norm
  c.probe.power_iters = 10  # power iterations (J^T J v) per spectral-norm estimate; 0 = skip (costs O(L^2))
  c.probe.spectral_batch = 1  # sequences (the batch's first) the spectral norms are averaged over
  c.train = train_config()
  c.eval = eval_config()
  c.optim = optim_config()
  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every = 100  # save every N steps (and at the end, and on SIGTERM)
  c.checkpoint.keep = 3  # newest checkpoints kept
  c.checkpoint.async_save = True  # write in the background while training goes on
  c.mesh = mesh_config()
  c.distributed = ml_collections.ConfigDict()
  c.distributed.initialize = False  # call jax.distributed.initialize() (multi-host); TPU pods auto-detect the rest
  c.distributed.coordinator_address = config_dict.placeholder(str)  # host:port of process 0; None = auto
  c.distributed.num_processes = config_dict.placeholder(int)  # None = auto
  c.distributed.process_id = config_dict.placeholder(int)  # None = auto
  c.seed = 0  # seed for parameter init and everything random not tied to data
  return c


def train_config() -> ml_collections.ConfigDict:
  t = ml_collections.ConfigDict()
  t.steps = 1000  # optimizer steps in the run
  t.batch_size = 8  # sequences per optimizer step, global over all devices
  t.grad_accum = 1  # microbatches per step (batch_size must divide by it); gradients are summed in the step
  t.log_every = 10  # write train/* and perf/* scalars every N steps
  t.eval_every = 100  # evaluate on the validation split every N steps (and at the end)
  t.eval_batches = 4  # validation batches per evaluation (always the same ones)
  t.on_divergence = "stop"  # non-finite loss or gradient: stop (status diverged) | skip (drop the update)
  t.spike_window = 50  # steps in the rolling window of the loss-spike detector
  t.spike_zscore = 4.0  # a loss this many standard deviations above the window mean is a spike
  t.peak_flops = config_dict.placeholder(float)  # peak FLOP/s per device for perf/mfu; None = device table
  t.cpu_devices = -1  # on a CPU: XLA devices the host is split into, data-parallel over the batch (nplace/cpu_devices.py); -1 = one per core, as many as the batch splits over
  t.reuse_host_memory = True  # glibc malloc keeps freed host memory (nplace/host_memory.py): ~15% faster CPU steps, higher resident set
  t.profile_steps = config_dict.placeholder(str)  # "START,STOP": jax.profiler trace of steps START..STOP (inclusive) into <workdir>/plugins/profile; None = off
  return t


def eval_config() -> ml_collections.ConfigDict:
  e = ml_collections.ConfigDict()
  e.rouge = True  # ROUGE-1/2/L of the argmax predictions at every eval (pure Python: off for speed)
  e.bertscore_model = config_dict.placeholder(str)  # local model directory for BERTScore; None = off
  e.bertscore_layers = config_dict.placeholder(int)  # its layer to score with; None = the last
  return e


def optim_config() -> ml_collections.ConfigDict:
  o = ml_collections.ConfigDict()
  o.lr = 6e-4  # peak learning rate
  o.min_lr_ratio = 0.1  # cosine decays to lr * min_lr_ratio at the last step
  o.warmup_steps = 100  # linear warmup from 0
  o.b1 = 0.9  # AdamW beta1
  o.b2 = 0.95  # AdamW beta2
  o.eps = 1e-8  # AdamW epsilon
  o.weight_decay = 0.1  # decoupled weight decay; 0 = off
  o.decay_norms = False  # apply weight decay to norm gains and biases
  o.decay_biases = False  # apply weight decay to linear-layer biases
  o.decay_embeddings = False  # apply weight decay to the token and position embeddings
  o.clip_norm = 1.0  # clip gradients to this global norm; 0 = off
  return o


def mesh_config() -> ml_collections.ConfigDict:
  m = ml_collections.ConfigDict()
  m.data = -1  # data-parallel axis size; -1 = the devices left over
  m.fsdp = 1  # parameter-sharded data-parallel axis size (params sharded over `embed`)
  m.tensor = 1  # tensor-parallel axis size (heads, mlp, vocab)
  # logical axis -> mesh axes; a logical axis not listed is replicated. Parameters: embed,
  # heads, kv, mlp, vocab, norm, position, layers. Activations (sharding.constrain in the
  # model, active under the mesh): batch, length, act_embed, act_heads, act_kv, act_mlp,
  # act_vocab. Listing act_embed nowhere keeps the residual stream whole on each device, so
  # the fsdp-sharded `embed` of the weights never drags the batch into an all-gather. `vocab`
  # is left out: GPT-2's 50257 splits over no even axis (add ("vocab", "tensor") with a padded
  # vocab). Where n_head does not divide over `tensor` (GPT-2 1.5B: 25), shard `kv` instead.
  m.rules = (
      ("batch", ("data", "fsdp")),
      ("embed", "fsdp"),
      ("heads", "tensor"),
      ("mlp", "tensor"),
      ("act_heads", "tensor"),
      ("act_mlp", "tensor"),
  )
  return m


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


def from_saved(saved: dict) -> ml_collections.ConfigDict:
  """A config saved as JSON (by a checkpoint) over today's defaults: fields added since keep
  their defaults; JSON's lists become the tuples they were."""
  def tuples(x):
    if isinstance(x, dict):
      return {k: tuples(v) for k, v in x.items()}
    return tuple(tuples(v) for v in x) if isinstance(x, list) else x
  c = base_config()
  c.update(tuples(saved))
  return c


def variant(study: str, arg: str, builders: dict):
  """`builders[arg]()`: an experiment file's named variant, or a ValueError listing them."""
  if arg not in builders:
    raise ValueError(f"{study} variant {arg!r}: expected {' | '.join(builders)}")
  return builders[arg]()


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
  if not 0 <= m.mix_post_fraction <= 1:
    raise ConfigError("model.mix_post_fraction", m.mix_post_fraction, "must be in [0, 1]")
  _one_of("model.attention", m.attention, ATTENTIONS)
  _one_of("model.attention_impl", m.attention_impl, ATTENTION_IMPLS)
  if m.attention_impl == "dot_product" and m.attention == "centered":
    raise ConfigError("model.attention_impl", m.attention_impl,
                      "the centered ablation needs the probabilities: use xla or auto")
  _one_of("model.mlp", m.mlp, MLPS)
  _one_of("model.init", m.init, INITS)
  _one_of("model.remat", m.remat, REMAT_POLICIES)
  _one_of("model.dtype", m.dtype, DTYPES)
  _positive("model.dt", m.dt)
  _positive("model.norm_eps", m.norm_eps)
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
  _validate_training(config)
  from nplace.data.checks import validate as validate_data  # it imports this module
  validate_data(config)


def _validate_probe(p) -> None:
  if p.every < 0:
    raise ConfigError("probe.every", p.every, "must be >= 0 (0 = off)")
  if p.images not in IMAGE_SCHEDULES:
    raise ConfigError("probe.images", p.images, f"must be one of {', '.join(IMAGE_SCHEDULES)}")
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
  if not (first.strip().isdigit() and last.strip().isdigit() and 1 <= int(first) <= int(last) <= t.steps):
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
  _one_of("train.on_divergence", t.on_divergence, ("stop", "skip"))
  if t.peak_flops is not None:
    _positive("train.peak_flops", t.peak_flops)
  if t.cpu_devices != -1:
    _positive("train.cpu_devices", t.cpu_devices)
  profile_window(t)
  _positive("checkpoint.every", config.checkpoint.every)
  _positive("checkpoint.keep", config.checkpoint.keep)
  _positive("optim.lr", o.lr)
  for key in ("warmup_steps", "weight_decay", "clip_norm", "eps"):
    if o[key] < 0:
      raise ConfigError(f"optim.{key}", o[key], "must be >= 0")
  for key in ("min_lr_ratio", "b1", "b2"):
    if not 0 <= o[key] <= 1:
      raise ConfigError(f"optim.{key}", o[key], "must be in [0, 1]")
  sizes = {axis: config.mesh[axis] for axis in ("data", "fsdp", "tensor")}
  for axis, size in sizes.items():
    if size == 0 or size < -1:
      raise ConfigError(f"mesh.{axis}", size, "must be positive, or -1 to fill")
  if list(sizes.values()).count(-1) > 1:
    raise ConfigError("mesh", sizes, "at most one axis may be -1")
