"""Figures for TensorBoard images and files on disk (matplotlib, no pyplot: Agg canvases).

Sized for TensorBoard's image cards: 600 x 400 pixels with 11-point text stays legible when
a card shrinks the image to ~400 pixels wide. Each probe's y scale (log or linear, fixed
range for bounded quantities) comes from `nplace.probes.catalog`, never from the values, so
two runs' images compare by eye; a nearly flat curve is drawn flat.
"""
import functools

import matplotlib
import numpy as np
from matplotlib import colors, ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nplace.probes import catalog

WIDTH, HEIGHT, DPI = 600, 400, 100
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9,
         "xtick.labelsize": 10, "ytick.labelsize": 10, "axes.grid": True, "grid.alpha": 0.3}
MEASURED, THEORY = "tab:blue", "tab:red"
SUBLAYERS = {"attn": ("attention", "tab:blue", "o"), "mlp": ("MLP", "tab:green", "s")}
MARGINS = {"left": 0.14, "right": 0.97, "bottom": 0.14, "top": 0.91}  # fixed: a layout engine costs ~4x the drawing
MIN_DECADES = 1.0  # a log axis spans at least this much, a linear one 10% of its level


def _styled(draw):
  """Runs a drawing function under STYLE (rcParams are read when artists are created)."""
  @functools.wraps(draw)
  def wrapper(*args, **kwargs):
    with matplotlib.rc_context(STYLE):
      return draw(*args, **kwargs)
  return wrapper


def _figure():
  fig = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
  fig.subplots_adjust(**MARGINS)
  FigureCanvasAgg(fig)
  return fig, fig.add_subplot()


class _LogLabels(ticker.Formatter):
  """Plain labels ("0.6", "1e-05") on log axes; minor ticks labelled only on a short axis,
  which may hold a single major tick: all under a decade, 2 and 5 x 10^k under two."""

  def __init__(self, minor: bool):
    self.minor = minor

  def __call__(self, value, pos=None):
    if self.minor:
      lo, hi = self.axis.get_view_interval()
      shown = "123456789" if hi / lo < 10 else "25" if hi / lo < 100 else ""
      if f"{value:.0e}"[0] not in shown:
        return ""
    return f"{value:.2g}"


def _finite(values, log):
  v = np.asarray(values, np.float64).ravel()
  return v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]


def _ylim(ax, values, log, fixed=None):
  """Limits that never stretch a flat curve: at least MIN_DECADES (log) or 10% of the
  level (linear); `fixed` (a bounded quantity) widened only to fit what lies outside it."""
  v = _finite(values, log)
  if fixed is not None:
    lo, hi = fixed
    if v.size:
      lo, hi = min(lo, v.min()), max(hi, v.max())
    pad = 0.03 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)
  elif v.size and log:
    lo, hi = np.log10(v.min()), np.log10(v.max())
    mid, half = (lo + hi) / 2, max(hi - lo, MIN_DECADES) / 2 * 1.1
    ax.set_ylim(10 ** (mid - half), 10 ** (mid + half))
  elif v.size:
    lo, hi = v.min(), v.max()
    mid, half = (lo + hi) / 2, max(hi - lo, 0.1 * max(abs(lo), abs(hi)), 1e-12) / 2 * 1.1
    ax.set_ylim(mid - half, mid + half)


def _yscale(ax, log):
  if log:  # plain "0.6", "1e-05" labels, minor ones too (a one-decade axis has one major tick)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_LogLabels(minor=False))
    ax.yaxis.set_minor_formatter(_LogLabels(minor=True))
  else:
    ax.yaxis.set_major_formatter(ticker.ScalarFormatter(useOffset=False))


@_styled
def profile(name, values, kind, theory=None, theory_label=None, step=None) -> Figure:
  """One probe over layers (kind: catalog.KINDS); `theory` in red, labelled `theory_label`.

  A sublayer probe is two curves, attention and MLP sites; a one-value probe is one point
  with its value written next to it (no layer axis).
  """
  p = catalog.probe(name)
  values = np.asarray(values, np.float64)
  fig, ax = _figure()
  _yscale(ax, p.log)
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
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlim(x.min() - 0.5, x.max() + 0.5)
  if kind == "sublayer" or theory is not None:
    ax.legend(loc="best")
  _ylim(ax, np.concatenate([s.ravel() for s in shown]), p.log, p.ylim)
  ax.set_xlabel(catalog.XLABELS[kind] if kind != "single" else "one value")
  ax.set_ylabel(p.ylabel)
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
  """Log colours for log probes, symmetric about `center` (1 for backward factors: below
  it one colour, above it another); a bounded quantity's fixed range; else the data's."""
  v = _finite(values, p.log)
  if p.log and v.size:
    lo, hi = v.min(), v.max()
    if p.center is not None:
      reach = max(abs(np.log10(lo / p.center)), abs(np.log10(hi / p.center)), 0.05)
      return colors.LogNorm(p.center * 10 ** -reach, p.center * 10 ** reach), "RdBu_r"
    return colors.LogNorm(lo, hi if hi > lo else lo * 10), "viridis"
  if p.ylim is not None:
    return colors.Normalize(*p.ylim), "viridis"
  return colors.Normalize(), "viridis"


@_styled
def heatmap(name, steps, values_SN, kind, labels) -> Figure:
  """A probe over layers (rows, from its tag `labels`) and training steps (columns)."""
  p = catalog.probe(name)
  values_SN = np.asarray(values_SN, np.float64)
  y = np.array([catalog.position(label) for label in labels])
  order = np.argsort(y)
  fig, ax = _figure()
  fig.subplots_adjust(right=0.78)
  norm, cmap = _color_norm(p, values_SN)
  mesh = ax.pcolormesh(_edges(steps), _edges(y[order]), np.ma.masked_invalid(values_SN[:, order].T),
                       norm=norm, cmap=cmap, shading="flat")
  bar = fig.colorbar(mesh, cax=fig.add_axes((0.81, MARGINS["bottom"], 0.025, MARGINS["top"] - MARGINS["bottom"])),
                     label=p.ylabel)
  if p.log:
    bar.formatter, bar.minorformatter = _LogLabels(minor=False), _LogLabels(minor=True)
  ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.grid(False)
  ax.set_xlabel("step")
  ax.set_ylabel(catalog.XLABELS[kind])
  ax.set_title(f"{name} over training")
  return fig


@_styled
def curves(series, xlabel, ylabel, title, log_y=False, log_x=False, hlines=None) -> Figure:
  """Several runs on one axis: label -> (x, y); `hlines` label -> y drawn dashed."""
  fig, ax = _figure()
  _yscale(ax, log_y)
  if log_x:
    ax.set_xscale("log")
  shown = []
  for label, (x, y) in series.items():
    y = np.asarray(y, np.float64)
    ax.plot(x, y, marker="o" if y.size <= 32 else None, ms=3.5, label=label)
    shown.append(y.ravel())
  for label, y in (hlines or {}).items():
    ax.axhline(y, color="0.4", ls="--", lw=1.2, label=label)
    shown.append(np.array([y], np.float64))
  if shown:
    _ylim(ax, np.concatenate(shown), log_y)
  ax.legend(loc="best")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  return fig


def to_rgb(fig) -> np.ndarray:
  """[H, W, 3] uint8 pixels of the figure."""
  fig.canvas.draw()
  return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def save(fig, path) -> None:
  fig.savefig(path, dpi=fig.dpi)
