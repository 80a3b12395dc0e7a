"""Hugging Face GPT-2 checkpoints in and out (`nplace convert`).

`from_hf` reads a directory's config.json and model.safetensors (safetensors' numpy API, no
torch) into a Pre-LN nplace model and writes it as an ordinary step-0 checkpoint (fresh AdamW
state, no data position): `nplace probe`, `eval` and `train` (fine-tuning) take it under the
`--config` flags it returns. `to_hf` writes a GPT-2-architecture run (pre placement,
LayerNorm, GELU, biases, dt 1) as config.json + model.safetensors, which
`transformers.GPT2LMHeadModel.from_pretrained` loads. Bad input is a UsageError or
ConfigError naming the file, tensor or key.

HF GPT-2 layout: Conv1D weights are [in, out]; `attn.c_attn` holds q, k, v side by side
(each D wide, heads of K contiguous); the LM head is tied to `wte`.
"""
import json
import os
import pathlib

import jax
import ml_collections
import numpy as np
from flax import traverse_util
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from nplace.config import ModelConfig, experiment, validate
from nplace.errors import ConfigError, UsageError
from nplace.model import decoder
from nplace.train import checkpoint, state as train_state

GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")  # HF's names for GPT-2's tanh-approximated GELU
HF_FIXED = {  # HF GPT-2 options nplace has only at these values
    "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
    "tie_word_embeddings": True, "add_cross_attention": False}
GPT2_ARCH = {  # nplace model keys at which HF's GPT-2 holds the model
    "placement": "pre", "norm": "layernorm", "mlp": "gelu", "attention": "softmax",
    "use_bias": True, "embed_norm": False, "embed_scale": 1.0, "dt": 1.0, "qk_norm": False}
GPT2_SIZES = ("124m", "350m", "774m", "1.5b")  # experiments/gpt2.py's presets
PREFIX = "transformer."  # what GPT2LMHeadModel.save_pretrained puts before every name
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers some checkpoints carry
TOP = {"wte.weight": ("wte", "embedding"), "wpe.weight": ("wpe", "embedding"),
       "ln_f.weight": ("final_norm", "scale"), "ln_f.bias": ("final_norm", "bias")}
LAYER = {  # HF tensor of block h.{i} -> nplace path under `blocks` (same numbers, reshaped)
    "ln_1.weight": ("attn_norm", "scale"), "ln_1.bias": ("attn_norm", "bias"),
    "attn.c_proj.weight": ("attn", "o", "kernel"), "attn.c_proj.bias": ("attn", "o", "bias"),
    "ln_2.weight": ("mlp_norm", "scale"), "ln_2.bias": ("mlp_norm", "bias"),
    "mlp.c_fc.weight": ("mlp", "fc_in", "kernel"), "mlp.c_fc.bias": ("mlp", "fc_in", "bias"),
    "mlp.c_proj.weight": ("mlp", "fc_out", "kernel"), "mlp.c_proj.bias": ("mlp", "fc_out", "bias")}
QKV = {"weight": "kernel", "bias": "bias"}  # attn.c_attn.<key> = concat of q, k, v's <value>


def hf_shapes(m) -> dict:
  """HF tensor name (without PREFIX) -> shape, for model config `m`."""
  D, F = m.d_model, m.d_ff or 4 * m.d_model
  shapes = {"wte.weight": (m.vocab_size, D), "wpe.weight": (m.max_len, D), "ln_f.weight": (D,),
            "ln_f.bias": (D,)}
  layer = {"ln_1.weight": (D,), "ln_1.bias": (D,), "attn.c_attn.weight": (D, 3 * D),
           "attn.c_attn.bias": (3 * D,), "attn.c_proj.weight": (D, D), "attn.c_proj.bias": (D,),
           "ln_2.weight": (D,), "ln_2.bias": (D,), "mlp.c_fc.weight": (D, F), "mlp.c_fc.bias": (F,),
           "mlp.c_proj.weight": (F, D), "mlp.c_proj.bias": (D,)}
  for i in range(m.n_layer):
    shapes |= {f"h.{i}.{name}": shape for name, shape in layer.items()}
  return shapes


def config_from_hf(hf: dict, where) -> tuple[ml_collections.ConfigDict, str]:
  """(config, the flags that give it) for HF GPT-2 config `hf`: experiments/gpt2.py's preset
  needing the fewest overrides, its model section set from `hf`. UsageError naming the key
  for what nplace cannot hold."""
  if not isinstance(hf, dict):
    raise UsageError(f"{where}: holds a JSON {type(hf).__name__}, not an object of GPT-2's keys")
  if hf.get("model_type") != "gpt2":
    raise UsageError(f"{where}: model_type={hf.get('model_type')!r}: only GPT-2 ('gpt2') converts")
  keys = ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd", "layer_norm_epsilon",
          "activation_function")
  if missing := [key for key in keys if key not in hf]:
    raise UsageError(f"{where}: missing key {missing[0]!r}")
  if hf["activation_function"] not in GELU_TANH:
    raise UsageError(f"{where}: activation_function={hf['activation_function']!r}: nplace's GPT-2 "
                     f"has the tanh GELU ({' or '.join(GELU_TANH)})")
  for key, want in HF_FIXED.items():
    if hf.get(key, want) != want:
      raise UsageError(f"{where}: {key}={hf[key]!r}: nplace's GPT-2 has only {want!r}")
  values = dict(vocab_size=hf["vocab_size"], max_len=hf["n_positions"], n_layer=hf["n_layer"],
                n_head=hf["n_head"], d_model=hf["n_embd"], d_ff=hf.get("n_inner"),
                norm_eps=hf["layer_norm_epsilon"], **GPT2_ARCH)
  candidates = []
  for size in GPT2_SIZES:
    config = experiment("gpt2", size)
    try:
      config.model.update(values)
    except TypeError as e:  # a value of another type than the key's: ConfigDict names the field
      raise UsageError(f"{where}: {e}") from None
    config.data.seq_len = min(config.data.seq_len, config.model.max_len)
    config.data.synthetic_vocab = min(config.data.synthetic_vocab, config.model.vocab_size)
    candidates.append((config, config_flags(config, size)))
  config, line = min(candidates, key=lambda c: len(c[1].split()))
  validate(config)
  return config, line


def config_flags(config, size: str) -> str:
  """The command-line flags that give `config`'s model: the preset plus overrides."""
  ref = experiment("gpt2", size)
  overrides = [f"--config.model.{key}={value}" for key, value in config.model.items()
               if ref.model[key] != value]
  overrides += [f"--config.data.{key}={config.data[key]}" for key in ("seq_len", "synthetic_vocab")
                if config.data[key] != ref.data[key]]
  return " ".join([f"--config experiments/gpt2.py:{size}", *overrides])


def _checked_tensors(file, expected: dict) -> dict:
  """The tensors of one safetensors `file` (float32, names without PREFIX), each checked against
  `expected` (name -> shape)."""
  tensors = {}
  with safe_open(file, "np") as f:
    for key in f.keys():
      name = key.removeprefix(PREFIX)
      if name.endswith(BUFFERS):
        continue
      shape = tuple(f.get_slice(key).get_shape())
      want = expected.get("wte.weight" if name == "lm_head.weight" else name)
      if want is None:
        raise UsageError(f"{file}: unexpected tensor {key!r} (not in a GPT-2 of config.json's sizes)")
      if shape != want:
        raise UsageError(f"{file}: tensor {key!r} has shape {shape}, config.json implies {want}")
      tensors[name] = f.get_tensor(key).astype(np.float32)
  return tensors


def read_tensors(directory, m) -> dict:
  """The tensors of HF GPT-2 `directory` (float32 numpy, names without PREFIX), checked
  against the names and shapes model config `m` implies."""
  directory = pathlib.Path(directory)
  index = directory / "model.safetensors.index.json"  # a checkpoint sharded over several files
  try:
    files = (sorted({directory / f for f in json.loads(index.read_text())["weight_map"].values()})
             if index.is_file() else [directory / "model.safetensors"])
  except (json.JSONDecodeError, KeyError, AttributeError) as e:
    raise UsageError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
  expected, tensors = hf_shapes(m), {}
  for file in files:
    if not file.is_file():
      raise UsageError(f"{file}: not found (nplace reads the safetensors format)")
    try:
      tensors |= _checked_tensors(file, expected)
    except SafetensorError as e:  # a truncated or corrupted file
      raise UsageError(f"{file}: not a whole safetensors file ({e})") from None
  if missing := [name for name in expected if name not in tensors]:
    raise UsageError(f"{directory}: missing tensor {missing[0]!r}"
                     + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
  head = tensors.pop("lm_head.weight", None)
  if head is not None and not np.array_equal(head, tensors["wte.weight"]):
    raise UsageError(f"{directory}: lm_head.weight differs from wte.weight; nplace's head is tied")
  return tensors


def params_from_hf(tensors: dict, m) -> dict:
  """nplace params (numpy) from HF tensors (names without PREFIX)."""
  shapes = traverse_util.flatten_dict(decoder.abstract_params(m))
  stacked = lambda name: np.stack([tensors[f"h.{i}.{name}"] for i in range(m.n_layer)])
  flat = {path: tensors[name] for name, path in TOP.items()}
  for name, path in LAYER.items():
    flat[("blocks", *path)] = stacked(name).reshape(shapes[("blocks", *path)].shape)
  for hf_leaf, leaf in QKV.items():
    for head, part in zip("qkv", np.split(stacked(f"attn.c_attn.{hf_leaf}"), 3, axis=-1)):
      path = ("blocks", "attn", head, leaf)
      flat[path] = part.reshape(shapes[path].shape)
  return traverse_util.unflatten_dict(flat)


def params_to_hf(params, m) -> dict:
  """HF tensors (names without PREFIX) from nplace params; the inverse of params_from_hf."""
  flat = traverse_util.flatten_dict(jax.device_get(params))
  shapes, L = hf_shapes(m), m.n_layer
  tensors = {name: flat[path] for name, path in TOP.items()}
  layered = {name: flat[("blocks", *path)] for name, path in LAYER.items()}
  for hf_leaf, leaf in QKV.items():
    width = shapes[f"h.0.attn.c_attn.{hf_leaf}"]
    layered[f"attn.c_attn.{hf_leaf}"] = np.concatenate(
        [flat[("blocks", "attn", head, leaf)].reshape(L, *width[:-1], -1) for head in "qkv"], axis=-1)
  for i in range(L):
    tensors |= {f"h.{i}.{name}": stack[i].reshape(shapes[f"h.{i}.{name}"]) for name, stack in layered.items()}
  return {name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()}


def hf_config(m) -> dict:
  """config.json for HF's GPT2LMHeadModel. No dropout: nplace trains without it."""
  return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": m.vocab_size,
          "n_positions": m.max_len, "n_embd": m.d_model, "n_layer": m.n_layer, "n_head": m.n_head,
          "n_inner": m.d_ff, "activation_function": "gelu_new", "layer_norm_epsilon": m.norm_eps,
          "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
          "tie_word_embeddings": True, "torch_dtype": "float32"}


def from_hf(directory, workdir) -> str:
  """Writes HF GPT-2 `directory` as step 0 of `workdir`; returns the flags that describe it."""
  config_file = pathlib.Path(directory) / "config.json"
  try:
    config, flags_line = config_from_hf(json.loads(config_file.read_text()), config_file)
  except (OSError, json.JSONDecodeError) as e:
    raise UsageError(f"{config_file}: {e}") from None
  if checkpoint.held_steps(workdir):  # not an interrupted conversion's unfinished step: its rerun goes on
    raise UsageError(f"--out {workdir}: already holds checkpoints")
  m = ModelConfig.of(config.model)
  params = jax.device_put(params_from_hf(read_tensors(directory, m), m), jax.devices("cpu")[0])
  mngr = checkpoint.manager(workdir, config.checkpoint)
  checkpoint.save(mngr, 0, train_state.start_from(config, params), None, config, force=True)
  mngr.wait_until_finished()
  mngr.close()
  return flags_line


def _readable_as_written(path: pathlib.Path) -> None:
  """The mode a file written by open() gets (0666 less the umask): safetensors creates its files
  0600, which others sharing the checkpoint cannot read."""
  umask = os.umask(0)
  os.umask(umask)
  path.chmod(0o666 & ~umask)


def to_hf(workdir, out, step=None) -> int:
  """Writes checkpoint `step` (default: the newest) of `workdir` as a HF GPT-2 directory."""
  out = pathlib.Path(out)
  # a checkpoint there is not replaced: its weights would be lost, and a sharded one's index
  # would be read before the new model.safetensors
  if held := sorted(path.name for pattern in ("config.json", "*.safetensors*") for path in out.glob(pattern)):
    raise UsageError(f"--out {out}: already holds {held[0]} (a Hugging Face checkpoint); give a new or empty directory")
  config, step = checkpoint.read_config(workdir, step)
  for key, want in GPT2_ARCH.items():
    if config.model[key] != want:
      raise ConfigError(f"model.{key}", config.model[key],
                        f"no Hugging Face architecture holds it (GPT-2 has {key}={want!r})")
  params, step = checkpoint.restore_params(config, workdir, step)
  out.mkdir(parents=True, exist_ok=True)
  tensors = params_to_hf(params, config.model)
  save_file({PREFIX + name: value for name, value in tensors.items()}, out / "model.safetensors",
            metadata={"format": "pt"})  # transformers loads only files that say their format
  _readable_as_written(out / "model.safetensors")
  (out / "config.json").write_text(json.dumps(hf_config(config.model), indent=2) + "\n")
  return step

