"""AdamW with warmup + cosine decay, global-norm clipping and a weight-decay mask (optax)."""
import jax
import optax


def schedule(o, steps: int) -> optax.Schedule:
  """Linear warmup to `lr`, cosine decay to `lr * min_lr_ratio` at `steps`.

  Evaluated one step ahead, so that the first update (count 0) has lr/warmup, not 0."""
  warmup = min(o.warmup_steps, max(steps - 1, 0))
  # optax.warmup_cosine_decay_schedule's two parts, joined here: it derives the floor's ratio
  # by testing `lr == 0` in Python, which a cell's per-run learning rates (arrays) do not allow
  base = optax.join_schedules([
      optax.linear_schedule(init_value=0.0, end_value=o.lr, transition_steps=warmup),
      optax.cosine_decay_schedule(init_value=o.lr, decay_steps=max(steps, warmup + 1) - warmup,
                                  alpha=o.min_lr_ratio)], [warmup])
  return lambda count: base(count + 1)


def decay_mask(o, params):
  """True where weight decay applies: matmul kernels, and whatever the config adds."""
  def decays(path, _):
    # Dict keys only: the same names whether or not leaves sit in nn.LogicallyPartitioned boxes.
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    if keys[0] in ("wte", "wpe"):
      return o.decay_embeddings
    # Norm gains and ReZero's residual weights (`*_alpha`): decay would pull a branch to zero.
    if any(k.endswith("norm") or "norm_" in k for k in keys) or keys[-1].endswith("_alpha"):
      return o.decay_norms
    if keys[-1] == "bias":
      return o.decay_biases
    return True
  return jax.tree_util.tree_map_with_path(decays, params)


def make(o, steps: int) -> optax.GradientTransformation:
  """The optimizer for `config.optim` over a run of `steps` steps."""
  return optax.chain(
      optax.clip_by_global_norm(o.clip_norm) if o.clip_norm > 0 else optax.identity(),
      optax.adamw(schedule(o, steps), b1=o.b1, b2=o.b2, eps=o.eps,
                  weight_decay=o.weight_decay, mask=lambda p: decay_mask(o, p)),
  )
