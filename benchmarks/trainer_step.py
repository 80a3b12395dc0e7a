"""The trainer's own compiled step on one device, shared by the benchmarks."""
from nplace import sharding, train_state


def compiled_step(config):
  """(state, step): `nplace train`'s jitted step and a fresh state, on this host's mesh."""
  mesh = sharding.make_mesh(config.mesh)
  shardings = train_state.shardings(config, mesh)
  step, _ = train_state.compile_steps(config, mesh, shardings)
  return train_state.init(config, shardings), step
