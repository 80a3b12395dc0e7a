"""Run by test_steps.py in a subprocess with 8 fake CPU devices: the losses of 3
train steps on the tiny test model for each mesh shape given as `D,F,T` arguments."""
import json
import sys

import jax
import numpy as np

from conftest import tiny_config
from nplace.runtime import sharding
from nplace.train import state as train_state, steps


def losses(mesh_sizes, n_steps=3):
  c = tiny_config(vocab_size=64, n_head=4, d_model=32)
  c.train.batch_size, c.train.steps, c.optim.warmup_steps = 8, 10, 0
  c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh_sizes
  mesh = sharding.make_mesh(c.mesh, jax.devices()[:int(np.prod(mesh_sizes))])
  state_shardings = train_state.shardings(c, mesh)
  state = train_state.init(c, state_shardings)
  step, _ = steps.compile_steps(c, mesh, state_shardings)
  batch_sharding = sharding.batch_sharding(mesh, c.mesh)
  out = []
  for i in range(n_steps):
    batch = jax.random.randint(jax.random.key(i), (8, c.data.seq_len + 1), 0, 64)
    state, m = step(state, jax.device_put(batch, batch_sharding))
    out.append(float(m["loss"]))
  return out


if __name__ == "__main__":
  print(json.dumps({arg: losses(tuple(int(s) for s in arg.split(","))) for arg in sys.argv[1:]}))
