"""The probe figures: one probe over layers at a step (`profile`, theory in red) and over layers
and steps (`heatmap`), each on the scale its catalog entry gives (never the values')."""
import numpy as np
from matplotlib import colors, ticker
from matplotlib.figure import Figure

from nplace.logs import plots
from nplace.logs.plots import LogLabels, styled
from nplace.probes import catalog

MEASURED, THEORY = "tab:blue", "tab:red"
SUBLAYERS = {"attn": ("attention", "tab:blue", "o"), "mlp": ("MLP", "tab:green", "s")}
MIN_CENTER_REACH = 0.3  # decades either side of 1 on a backward-factor heatmap (0.5 .. 2)


@styled
def profile(name, values, kind, theory=None, theory_label=None, step=None) -> Figure:
  """One probe over layers (kind: catalog.KINDS); `theory` in red, labelled `theory_label`.

  A sublayer probe is two curves, attention and MLP sites; a one-value probe is one point
  with its value written next to it (no layer axis).
  """
  p = catalog.probe(name)
  values = np.asarray(values, np.float64)
  fig, ax = plots.new_figure()
  plots.set_yscale(ax, p.log)
  labels = catalog.labels(kind, values.size)
  x = np.array([catalog.position(label) for label in labels]) if kind != "single" else np.zeros(1)
  marker = 4 if values.size <= 32 else 2.5
  if kind == "sublayer":
    for i, (branch, (label, color, symbol)) in enumerate(SUBLAYERS.items()):
      ax.plot(x[i::2], values[i::2], marker=symbol, ms=marker, color=color, label=label)
  elif kind == "single":
    ax.plot(x, values, "o", ms=8, color=MEASURED)
    ax.annotate(f"{values[0]:.4g}", (0, values[0]), xytext=(12, 0), textcoords="offset points",
                va="center", fontsize=12)
    ax.set_xlim(-1, 1)
    ax.set_xticks([])
  else:
    ax.plot(x, values, marker="o", ms=marker, color=MEASURED, label="measured")
  shown = [values]
  if theory is not None:
    theory = np.asarray(theory, np.float64)
    ax.plot(x[:theory.size], theory, color=THEORY, lw=2, label=theory_label or "theory")
    shown.append(theory)
  if kind != "single":
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=8, integer=True))
    ax.set_xlim(x.min() - 0.5, x.max() + 0.5)
  if kind == "sublayer" or theory is not None:
    ax.legend(loc="best")
  plots.set_ylim(ax, np.concatenate([s.ravel() for s in shown]), p.log, p.ylim)
  ax.set_xlabel(catalog.XLABELS[kind] if kind != "single" else "one value")
  plots.set_ylabel(ax, p.ylabel)
  ax.set_title(name if step is None else f"{name} at step {step}")
  return fig


def _edges(centers):
  """Cell edges around sorted centres (half-way between neighbours; ±0.5 for one cell)."""
  c = np.asarray(centers, np.float64)
  if c.size == 1:
    return np.array([c[0] - 0.5, c[0] + 0.5])
  mid = (c[1:] + c[:-1]) / 2
  return np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])


def _color_norm(p, values):
  """Colours over the same limits as a profile's y axis; a probe with a `center` (1 for
  backward factors) gets a diverging map symmetric about it in log: below 1 one colour,
  above it the other."""
  if p.center is not None:
    v = plots.finite_values(values, True)
    reach = max(np.abs(np.log10(v / p.center)).max() if v.size else 0, MIN_CENTER_REACH)
    return colors.LogNorm(p.center * 10 ** -reach, p.center * 10 ** reach), "RdBu_r"
  limits = plots.limits(values, p.log, p.ylim) or (1.0, 10.0)
  return (colors.LogNorm if p.log else colors.Normalize)(*limits), "viridis"


@styled
def heatmap(name, steps, values_RY, kind, labels) -> Figure:
  """A probe over layers (rows, from its tag `labels`) and training steps (columns)."""
  p = catalog.probe(name)
  values_RY = np.asarray(values_RY, np.float64)
  y = np.array([catalog.position(label) for label in labels])
  order = np.argsort(y)
  fig, ax = plots.new_figure()
  fig.subplots_adjust(right=0.75)
  norm, cmap = _color_norm(p, values_RY)
  mesh = ax.pcolormesh(_edges(steps), _edges(y[order]), np.ma.masked_invalid(values_RY[:, order].T),
                       norm=norm, cmap=cmap, shading="flat")
  bottom, top = plots.MARGINS["bottom"], plots.MARGINS["top"]
  bar = fig.colorbar(mesh, cax=fig.add_axes((0.78, bottom, 0.025, top - bottom)), label=plots.wrapped(p.ylabel))
  if p.log:
    bar.formatter, bar.minorformatter = LogLabels(minor=False), LogLabels(minor=True)
  ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=6, integer=True))
  if len(steps) <= 6:  # a tick at each probe step
    ax.set_xticks(steps)
  else:
    ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=5, integer=True))
  ax.grid(False)
  ax.set_xlabel("step")
  ax.set_ylabel(catalog.XLABELS[kind])
  ax.set_title(f"{name} over training")
  return fig
