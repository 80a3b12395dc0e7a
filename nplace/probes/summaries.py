"""Probe results into TensorBoard: `probe/<name>/layer_000`... scalars, one profile image
per probe (with its theory curve where one exists) and a histogram over layers."""
import numpy as np

from nplace import model, theory
from nplace.probes import plot
from nplace.probes.suite import THEORY_SUFFIX


def theory_curves(config, results) -> dict:
  """Probe name -> theory array: those the suite computed plus the host-side ones
  (Post-LN similarity at init from the Gram recursion, at the probe batch's length)."""
  curves = {name.removesuffix(THEORY_SUFFIX): np.asarray(value)
            for name, value in results.items() if name.endswith(THEORY_SUFFIX)}
  if config.model.placement == "post" and "similarity" in results:
    curves["similarity"] = theory.post_similarity_at_init(model.freeze(config.model),
                                                          config.data.seq_len)
  return curves


def write(writer, step: int, results, config) -> None:
  """Everything for one probe-suite result; `writer` is a tensorboardX.SummaryWriter."""
  results = {name: np.asarray(value) for name, value in results.items()}
  curves = theory_curves(config, results)
  for name, values in results.items():
    if name.endswith(THEORY_SUFFIX):
      continue
    for i, value in enumerate(values):
      writer.add_scalar(f"probe/{name}/layer_{i:03d}", float(value), step)
    writer.add_histogram(f"probe/{name}", values, step)
    image = plot.profile(f"{name} @ step {step}", values, curves.get(name))
    writer.add_image(f"probe/{name}", image, step, dataformats="HWC")
