"""The decoder: a GPT-2-style stack of the Block (nplace/model/block.py), which reads the norm
placement as data.

Used functionally: `init(cfg, key)` gives a params pytree, `apply(cfg, params, tokens)` gives
logits. `cfg` is a ModelConfig (`ModelConfig.of(config.model)`, built once by the caller).
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from nplace.config import ModelConfig
from nplace.model.block import Block
from nplace.model.layers import RESIDUAL, Norm, embed_std
from nplace.placements import PLACEMENTS
from nplace.runtime.sharding import constrain

REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _scanned_blocks(cfg):
  block = Block
  if cfg.remat != "none":
    block = nn.remat(Block, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False)
  return nn.scan(
      block,
      variable_axes={"params": 0, "perturbations": 0, "intermediates": 0, "cache": 0},
      split_rngs={"params": True},
      in_axes=(0, 0, nn.broadcast),  # the layer index, dt per layer, the decoding position
      length=cfg.n_layer,
      # the parameter tree is the same either way; on a GPU the rolled loop's per-layer
      # slicing and stacking copies cost ~10% of the 124M step (issue 58)
      unroll=cfg.scan_unroll,
      metadata_params={nn.PARTITION_NAME: "layers"},
  )


class Decoder(nn.Module):
  """Token + position embedding, scanned blocks, final norm (if the placement has one), tied LM head."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens_BT, head=True, dt=None, position=None):
    """Logits [B, T, vocab] in float32; with head=False the hidden state the head reads. `dt`:
    the residual step as a scalar array (see Block), else cfg.dt. `position`: the tokens
    start there, attending to the KV cache (`generate`)."""
    cfg = self.cfg
    embed_init = nn.initializers.normal(embed_std(cfg))
    wte = nn.Embed(cfg.vocab_size, cfg.d_model, name="wte", dtype=cfg.dtype,
                   embedding_init=nn.with_logical_partitioning(embed_init, ("vocab", "embed")))
    wpe = nn.Embed(cfg.max_len, cfg.d_model, name="wpe",
                   embedding_init=nn.with_logical_partitioning(embed_init, ("position", "embed")))
    T = tokens_BT.shape[1]
    tokens_BTD = wte(tokens_BT) * cfg.embed_scale
    positions_T = jnp.arange(T) if position is None else position + jnp.arange(T)
    h_BTD = constrain((tokens_BTD + wpe(positions_T)[None]).astype(cfg.dtype), RESIDUAL)
    if cfg.embed_norm:
      h_BTD = Norm(cfg, name="embed_norm")(h_BTD)
    h_BTD = self.perturb("h0", h_BTD)
    self.sow("intermediates", "h0", h_BTD)  # the probes' layer 0 (per-block Jacobians start here)
    # The layer index l = 1..L is a scanned input: layer-dependent rules (lns, mix) read it.
    dt_L = None if dt is None else jnp.broadcast_to(dt, (cfg.n_layer,))
    h_BTD, _ = _scanned_blocks(cfg)(cfg, name="blocks")(h_BTD, jnp.arange(1, cfg.n_layer + 1), dt_L, position)
    if PLACEMENTS[cfg.placement].final_norm:
      h_BTD = Norm(cfg, name="final_norm")(h_BTD)
    return lm_head(cfg, head_table(cfg, wte.embedding), h_BTD) if head else h_BTD


def head_table(cfg, wte_VD):
  """The tied head's weights: the embedding table padded with zero rows to P, a multiple of
  `cfg.head_vocab_multiple` (GPT-2's 50257 rows were 1.14x slower on a GPU)."""
  V = wte_VD.shape[0]
  rows = -(-V // cfg.head_vocab_multiple) * cfg.head_vocab_multiple
  return jnp.pad(wte_VD, ((0, rows - V), (0, 0)))


def lm_head(cfg, table_PD, h_BTD, padded=False):
  """Logits [B, T, vocab] in float32, cast after a compute-dtype product (a float32 head was
  ~40% of a bf16 124M step on a GPU); the padding's columns are cut off unless `padded`."""
  logits_BTP = jnp.einsum("btd,pd->btp", h_BTD.astype(cfg.dtype), table_PD.astype(cfg.dtype))
  logits_BTP = logits_BTP if padded else logits_BTP[..., :cfg.vocab_size]
  return constrain(logits_BTP.astype(jnp.float32), ("batch", "length", "act_vocab"))


def _dummy_tokens(cfg):
  return jnp.zeros((1, min(cfg.max_len, 8)), jnp.int32)


def init_boxed(cfg, key):
  """Parameters with their logical-axis metadata (nn.LogicallyPartitioned boxes)."""
  return Decoder(cfg).init(key, _dummy_tokens(cfg))["params"]


def init(cfg, key):
  """A params pytree of plain arrays."""
  return nn.unbox(init_boxed(cfg, key))


def _abstract_boxed(cfg):
  return jax.eval_shape(lambda key: init_boxed(cfg, key), jax.random.key(0))


def abstract_params(cfg):
  """Shapes and dtypes of the params, with no memory allocated."""
  return nn.unbox(_abstract_boxed(cfg))


def logical_specs(cfg):
  """A PartitionSpec of logical axis names for every parameter."""
  return nn.get_partition_spec(_abstract_boxed(cfg))


def _at_matmul_precision(fn):
  """`fn(cfg, ...)` traced with its float32 products (forward, and so the backward's transposes
  and remat's recomputation) at cfg.matmul_precision; "default" leaves the backend's choice."""
  @functools.wraps(fn)
  def traced(cfg, *args, **kwargs):
    if cfg.matmul_precision == "default":
      return fn(cfg, *args, **kwargs)
    with jax.default_matmul_precision(cfg.matmul_precision):
      return fn(cfg, *args, **kwargs)
  return traced


@_at_matmul_precision
def apply(cfg, params, tokens_BT, **kwargs):
  """Logits [B, T, vocab] in float32. kwargs go to `Module.apply` (mutable=, ...)."""
  variables = {"params": params, **kwargs.pop("extra_variables", {})}
  return Decoder(cfg).apply(variables, tokens_BT, **kwargs)


# Positions a decode step runs: the last token and the empty slot after it. With one, every
# product has a single row, which XLA's CPU backend computes with its matrix-vector kernels,
# summing in another order than the full forward's matrix-matrix products.
DECODE_BLOCK = 2


@_at_matmul_precision
def generate(cfg, params, tokens_BT, prompt: int, dt=None):
  """The greedy (argmax) continuation [B, T - prompt] of each row's first `prompt` tokens, to
  the rows' length T, with a KV cache: a forward over the [B, T] buffer (the prompt, zeros
  after it) fills the cache and gives the first token; each later step runs DECODE_BLOCK
  positions from the last token on, attending to the cached keys and values, and appends the
  argmax of the first. A lax loop, one program whatever T. Its tokens are those of
  nplace.train.steps.greedy_continuation (a full forward per token) on the tested configs; its
  logits can differ in the last bits, a CPU product's rounding depending on its number of rows
  (tests/test_evaluation.py, BUILD_NOTES)."""
  T = tokens_BT.shape[1]
  buffer_BT = jnp.where(jnp.arange(T) < prompt, tokens_BT, 0)
  # The first token from this forward, as greedy_continuation's first, not from a step: on the
  # CPU the full forward's last prompt position is in the first of its causal halves, whose
  # softmax sums over `prompt` keys, a step's over T. The head reads only that position's block
  # ([rows, T, vocab] float32 logits would be the eval's largest array). The cached keys and
  # values from `prompt` on (of the zeros) are each rewritten by a step before a query reads them.
  h_BTD, variables = apply(cfg, params, buffer_BT, head=False, dt=dt, mutable=["cache"])
  last_BTD = jax.lax.slice_in_dim(h_BTD, prompt - 1, prompt - 1 + DECODE_BLOCK, axis=1)
  first_B = lm_head(cfg, head_table(cfg, params["wte"]["embedding"]), last_BTD)[:, 0].argmax(-1)
  buffer_BT = buffer_BT.at[:, prompt].set(first_B.astype(buffer_BT.dtype))

  def write_next(t, carry):
    buffer_BT, cache = carry
    last_BT = jax.lax.dynamic_slice_in_dim(buffer_BT, t - 1, DECODE_BLOCK, axis=1)
    logits_BTV, variables = apply(cfg, params, last_BT, dt=dt, position=t - 1, extra_variables={"cache": cache},
                                  mutable=["cache"])
    return buffer_BT.at[:, t].set(logits_BTV[:, 0].argmax(-1).astype(buffer_BT.dtype)), variables["cache"]

  buffer_BT, _ = jax.lax.fori_loop(prompt + 1, T, write_next, (buffer_BT, variables["cache"]))
  return buffer_BT[:, prompt:]


def cross_entropy(logits_BTV, targets_BT):
  """Mean next-token cross-entropy in nats."""
  return optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT).mean()


def one_hot_token_losses(cfg, table_PD, h_BTD, targets_BT):
  """Per-token cross-entropy [B, T] over the padded head's logits, the padding masked out and the
  target's logit picked by comparing indices: its backward is elementwise (softmax minus the
  mask), where optax's integer labels scatter into a [B, T, vocab] buffer and the slice to the
  vocabulary pads the gradient back."""
  logits_BTP = lm_head(cfg, table_PD, h_BTD, padded=True)
  vocab_P = jnp.arange(logits_BTP.shape[-1])
  logits_BTP = jnp.where(vocab_P < cfg.vocab_size, logits_BTP, -jnp.inf)
  target_BT = jnp.sum(jnp.where(vocab_P == targets_BT[..., None], logits_BTP, 0.0), axis=-1)
  return jax.nn.logsumexp(logits_BTP, axis=-1) - target_BT


@_at_matmul_precision
def loss(cfg, params, batch_BT1, dt=None):
  """Loss on a `[B, T+1]` window: inputs are the first T tokens, targets the last T."""
  inputs_BT, targets_BT = batch_BT1[:, :-1], batch_BT1[:, 1:]
  if cfg.loss_chunks == 1 and cfg.head_loss == "gather":
    return cross_entropy(apply(cfg, params, inputs_BT, dt=dt), targets_BT)
  h_BTD = apply(cfg, params, inputs_BT, head=False, dt=dt)
  if cfg.loss_chunks == 1:
    return one_hot_token_losses(cfg, head_table(cfg, params["wte"]["embedding"]), h_BTD, targets_BT).mean()
  return chunked_cross_entropy(cfg, params["wte"]["embedding"], h_BTD, targets_BT)


def chunked_cross_entropy(cfg, wte_VD, h_BTD, targets_BT):
  """`cross_entropy(lm_head(...), targets)` over `cfg.loss_chunks` slices of the sequence, one
  at a time, each recomputed in the backward: the [B, T, vocab] float32 logits never exist
  whole (MaxText's vocabulary tiling), for one more head product in the backward."""
  B, T, D = h_BTD.shape
  C = cfg.loss_chunks
  h_CBWD = h_BTD.reshape(B, C, T // C, D).swapaxes(0, 1)
  targets_CBW = targets_BT.reshape(B, C, T // C).swapaxes(0, 1)
  # padded once, outside the loop: padding inside it made XLA's TPU compiler fail a RET_CHECK
  # (fsdp, 8 or more slices: a reduce-scatter of the padded gradient); kept in the parameters'
  # dtype so that the slices' gradients add up in float32
  table_PD = head_table(cfg, wte_VD)

  @jax.checkpoint
  def chunk_sum(h_BWD, targets_BW):
    if cfg.head_loss == "one_hot":
      return one_hot_token_losses(cfg, table_PD, h_BWD, targets_BW).sum()
    return optax.softmax_cross_entropy_with_integer_labels(lm_head(cfg, table_PD, h_BWD), targets_BW).sum()

  def add_chunk(total, chunk):
    return total + chunk_sum(*chunk), None

  total, _ = jax.lax.scan(add_chunk, jnp.zeros((), jnp.float32), (h_CBWD, targets_CBW))
  return total / (B * T)
