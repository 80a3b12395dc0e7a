"""Run by test_sharding.py in a subprocess with N fake CPU devices (the count is fixed when jax
starts): per-device temporary bytes of the compiled train step of the tiny preset, 4
sequences per device, parameters sharded over every device (fsdp)."""
import jax

from nplace.runtime import sharding
from nplace.train import state as train_state, steps
from nplace.config import experiment


def temp_bytes() -> int:
  c = experiment("tiny", "pre")
  c.train.batch_size = 4 * jax.device_count()
  c.mesh.data, c.mesh.fsdp = 1, -1
  mesh = sharding.make_mesh(c.mesh)
  state_shardings = train_state.shardings(c, mesh)
  step, _ = steps.compile_steps(c, mesh, state_shardings)
  state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                       train_state.abstract(c), state_shardings)
  batch = jax.ShapeDtypeStruct((c.train.batch_size, c.data.seq_len + 1), "int32",
                               sharding=sharding.batch_sharding(mesh, c.mesh))
  return step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes


if __name__ == "__main__":
  print(temp_bytes())
