"""Probe results into TensorBoard. Tags (docs/guide/tensorboard.md):

- scalars `probe/<name>/layer_NNN` (block outputs 001..L, Jacobian sources 000..L-1),
  `probe/<name>/attn_NNN` and `probe/<name>/mlp_NNN` (norm sites of layer NNN), plain
  `probe/<name>` for one-value probes; theory curves never become scalars;
- images `probe_profile/<name>` (the probe over layers at this step, theory in red) and
  `probe_heatmap/<name>` (layer x step over the run so far, for catalog.HEATMAPS), at the
  probe steps `draws_images` picks;
- histograms `probe_hist/<name>` (the values over layers);
- a custom-scalars layout: one multi-line chart per probe holding all its layers.
One-value probes get no image or histogram: their scalar chart over steps says it all.
"""
import numpy as np

from nplace.config import ModelConfig
from nplace.probes import catalog, figures, history, theory
from nplace.probes.suite import THEORY_SUFFIX

CATEGORIES = {"block": "probes per layer", "source": "probes per source layer of J_{l->L}",
              "sublayer": "probes per norm site (attn_NNN, mlp_NNN)", "single": "probes, one value"}


def tag(name: str, label: str) -> str:
  """The scalar tag of one value of a probe (label "" for a one-value probe)."""
  return f"probe/{name}/{label}" if label else f"probe/{name}"


def probed(probe, step: int) -> bool:
  """Whether the probe suite runs at `step`: step 0, every probe.every steps and, up to
  probe.early_until, every probe.early_every steps; never with probe.every 0."""
  if not probe.every:
    return False
  early = probe.early_every and step <= probe.early_until and step % probe.early_every == 0
  return step % probe.every == 0 or bool(early)


def draws_images(probe, step: int, last_step: int) -> bool:
  """Whether probe step `step` also draws images (probe.images). "log": step 0, the regular
  probe steps every x 2^k and the run's last step; an early-schedule step draws none (else
  every early step below probe.every would count as a doubling): TensorBoard keeps 10 images
  per tag by default, which a log-spaced series fills over a long run, and drawing costs
  ~0.1 CPU-s an image."""
  if probe.images != "log":
    return probe.images == "all"
  n, early = divmod(step, probe.every)
  return step == last_step or (not early and n & (n - 1) == 0)


def theory_curves(config, results, step: int) -> dict:
  """Probe name -> (theory array, legend label saying what it assumes): the curves the
  placement declares, the suite's `<name>_theory` results and, at step 0, those predicted for
  the init from the config alone."""
  cfg, out = ModelConfig.of(config.model), {}
  for curve in theory.curves(cfg):
    value = results.get(curve.probe + THEORY_SUFFIX)
    if value is None and curve.at_init and step == 0 and curve.probe in results:
      value = curve.at_init(cfg, config.data.seq_len)
    if value is not None:
      out[curve.probe] = (np.asarray(value), curve.label(cfg))
  return out


def layout(results) -> dict:
  """The custom-scalars layout: a category per kind, one multi-line chart per probe."""
  charts = {}
  for name in sorted(results):
    if not name.endswith(THEORY_SUFFIX):
      kind = catalog.probe(name).kind
      pattern = rf"^probe/{name}$" if kind == "single" else rf"^probe/{name}/"
      charts.setdefault(CATEGORIES[kind], {})[name] = ["Multiline", [pattern]]
  return {category: charts[category] for category in CATEGORIES.values() if category in charts}


class ProbeWriter:
  """Writes every probe-suite result of a run through a `metrics.Writer` (active).

  The heatmaps need the run's history: on the first write it is read back from the run's
  event files (so a resumed run still shows all of it), then kept in memory.
  """

  def __init__(self, writer, config):
    self.writer, self.config = writer, config
    self.history = None  # name -> (steps list, rows list), for catalog.HEATMAPS

  def write(self, step: int, results) -> None:
    results = {name: np.asarray(value, np.float64) for name, value in results.items()}
    if self.history is None:
      self._start(step, results)
    curves = theory_curves(self.config, results, step)
    images = draws_images(self.config.probe, step, self.config.train.steps)
    for name, values in results.items():
      if name.endswith(THEORY_SUFFIX):
        continue
      kind = catalog.probe(name).kind
      for label, value in zip(catalog.labels(kind, len(values)), values):
        self.writer.summary.add_scalar(tag(name, label), float(value), step)
      if kind == "single":
        continue
      finite = values[np.isfinite(values)]
      if finite.size:
        self.writer.summary.add_histogram(f"probe_hist/{name}", finite, step)
      heatmap = self.history.get(name)  # (steps, rows) of a heatmap probe; None for the rest
      if heatmap is not None:
        steps, rows = heatmap
        steps.append(step)
        rows.append(values)
      if not images:
        continue
      curve, label = curves.get(name, (None, None))
      self.writer.image(f"probe_profile/{name}", step, figures.profile, name, values, kind, curve, label, step)
      if heatmap is not None:
        self.writer.image(f"probe_heatmap/{name}", step, figures.heatmap, name, np.array(steps), np.stack(rows),
                          kind, catalog.labels(kind, len(values)))

  def _start(self, step, results):
    """History of the earlier steps from the event files; the layout, once per process."""
    past = history.read(self.writer.events.local)
    self.history = {}
    for name in catalog.HEATMAPS:
      if name in results:
        h = past.get(name)
        keep = [] if h is None or h.values.shape[1] != results[name].size else np.flatnonzero(h.steps < step)
        self.history[name] = ([int(h.steps[i]) for i in keep], [h.values[i] for i in keep])
    self.writer.summary.add_custom_scalars(layout(results))
