"""XLA options that work around known miscompiles, for the computations they strike.

XLA:CPU in jaxlib 0.10.2 hands fused multiply-reduce loops to YNNPACK, and computes
`p * (v - sum(p * v))` wrongly once `p` is broadcast over a leading axis past 32,768 elements
(jax-ml/jax#39103). A vmapped JVP through attention's softmax is that pattern: the primal's
probabilities broadcast over the tangents. The probes' forward-mode products (|J_l - I|, the
spectral norms) read 20-70% high on trained models, one spectral norm 10x. Training (reverse
mode) does not meet it: its gradients match eager's. So the fusion is turned off for the
computations with forward-mode probes alone, not for the train step, where it would cost
11-22% of the CPU's throughput (BUILD_NOTES).
"""
import jaxlib

from nplace.runtime import sharding

_YNN_BUG = (0, 10, 2)  # the first jaxlib with the bug; the pins stop below 0.11


def forward_mode(mesh=None) -> dict:
  """jit compiler options for a computation with vmapped JVPs, compiled for `mesh`'s devices
  (None: the default backend's)."""
  platform = sharding.mesh_platform(mesh)
  version = tuple(int(part) for part in jaxlib.__version__.split(".")[:3] if part.isdigit())
  if platform == "cpu" and version >= _YNN_BUG:
    return {"xla_cpu_experimental_ynn_fusion_type": ""}  # empty: no YNNPACK fusion
  return {}
