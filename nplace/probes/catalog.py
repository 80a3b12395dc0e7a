"""What each probe is: its kind (which axis its values run over), its y-axis label, and its
scale. The one table that TensorBoard tags, plot axes and the event-history reader share.

Kinds: `block` (block outputs h_1..h_L), `source` (source layer l = 0..L-1 of J_{l->L}),
`sublayer` (the 2L norm sites, attention and MLP interleaved: attn_1, mlp_1, attn_2, ...),
`single` (one value).
"""
import dataclasses

KINDS = ("block", "source", "sublayer", "single")


@dataclasses.dataclass(frozen=True)
class Probe:
  kind: str
  ylabel: str
  log: bool  # log y (and log colour in heatmaps) whatever the values: runs compare by eye
  ylim: tuple[float, float] | None = None  # fixed linear range for bounded quantities
  center: float | None = None  # a reference value (1 for backward factors): heatmaps diverge from it


_BLOCK = {
    "grad_h": Probe("block", "|dL/dh_l| / sqrt(N)", log=True),
    "local_sensitivity": Probe("block", "|J_l - I|_F / sqrt(Td)", log=True),
    "similarity": Probe("block", "mean cosine between tokens", log=False, ylim=(0.0, 1.0)),
    "similarity_centered": Probe("block", "mean cosine between tokens, batch-mean token removed", log=False,
                                 ylim=(-1.0, 1.0)),
    "rank_ratio": Probe("block", "|mean h|^2 / mean |h|^2", log=False, ylim=(0.0, 1.0)),
    "mean_abs": Probe("block", "mean |h|", log=True),
    "var_entry": Probe("block", "variance over features", log=True),
    "var_data": Probe("block", "variance over tokens", log=True),
    "rms": Probe("block", "rms(h)", log=True),
    "max_abs": Probe("block", "largest |h|", log=True),
    "attention_tv": Probe("block", "TV from prefix average", log=False, ylim=(0.0, 1.0)),
    "attention_entropy": Probe("block", "attention entropy (nats)", log=False),
} | {f"grad_{m}": Probe("block", f"|dL/dW_{m}|_F", log=True)
     for m in ("q", "k", "v", "o", "mlp_in", "mlp_gate", "mlp_out")}
_SOURCE = {
    "jacobian_frobenius": Probe("source", "|J_{l->L}|_F / sqrt(Td)", log=True),
    "jacobian_spectral": Probe("source", "sigma_max(J_{l->L})", log=True),
}
_FACTORS = {"scale": "rms(g) / r", "backward": "|dL/dz| / |dL/dy|"}
_SUBLAYER = {f"{role}_{what}": Probe("sublayer", label, log=True, center=1.0)
             for role in ("norm", "norm_in", "norm_out") for what, label in _FACTORS.items()}
# A norm site on one branch only (hybrid's MLP norm, the per-head q/k/v norms): one per layer.
_BLOCK |= {f"{site}_{what}": Probe("block", label, log=True, center=1.0)
           for site in ("attn_norm", "mlp_norm", "q_norm", "k_norm", "v_norm") for what, label in _FACTORS.items()}
_SINGLE = {"loss": Probe("single", "loss (nats)", log=False)} | {
    f"{site}_{what}": Probe("single", label, log=True, center=1.0)
    for site in ("final_norm", "embed_norm") for what, label in _FACTORS.items()}
PROBES = _BLOCK | _SOURCE | _SUBLAYER | _SINGLE

# Probes drawn as layer x step heatmaps over training (study B's picture: similarity rises
# early, the backward factor falls below 1).
HEATMAPS = ("similarity", "similarity_centered", "rms", "grad_h", "jacobian_frobenius",
            "norm_backward", "norm_in_backward", "norm_out_backward")


def probe(name: str) -> Probe:
  """The catalog entry; a probe not listed is a linear per-block one."""
  return PROBES.get(name, Probe("block", name, log=False))


def labels(kind: str, n: int) -> list[str]:
  """Tag suffixes of the n values of a probe of this kind, in the suite's array order."""
  if kind == "block":
    return [f"layer_{l:03d}" for l in range(1, n + 1)]
  if kind == "source":
    return [f"layer_{l:03d}" for l in range(n)]
  if kind == "sublayer":
    return [f"{b}_{l:03d}" for l in range(1, n // 2 + 1) for b in ("attn", "mlp")]
  return [""]


def position(label: str) -> float:
  """x of a value from its tag suffix: its layer; attention sites sit half a layer before
  their MLP partner (attn_l at l - 1/2, mlp_l at l)."""
  prefix, layer = label.rsplit("_", 1)
  return int(layer) - (0.5 if prefix == "attn" else 0.0)


XLABELS = {"block": "layer l (output of block l)", "source": "source layer l of J_{l->L}",
           "sublayer": "layer l (attn at l-½, MLP at l)", "single": "step"}
