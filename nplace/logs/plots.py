"""Figures for TensorBoard images and files on disk (matplotlib, no pyplot: Agg canvases): the
style, axis limits and tick labels every figure shares, and `curves` (several runs on one axis).

Sized for TensorBoard's image cards, which show an image ~350 pixels wide in a 1600-pixel
window: 480 x 320 pixels with 11-13 point text keeps every label legible there (and a
PDF or SVG from `save` scales for a paper). Axis limits never stretch a nearly flat series
(`limits`); the probe figures (nplace/probes/figures.py) take each probe's scale from its
catalog entry, never from the values, so two runs' images compare by eye.
"""
import functools
import math
import textwrap

import matplotlib
import numpy as np
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


WIDTH, HEIGHT, DPI = 480, 320, 100
# axes.titley fixed: left unset, matplotlib measures every tick label to place the title
# (~7% of a figure's drawing time; the pixels are the same here, with no ticks on top)
STYLE = {"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 10,
         "xtick.labelsize": 11, "ytick.labelsize": 11, "axes.grid": True, "grid.alpha": 0.3,
         "axes.titley": 1.0}
MARGINS = {"left": 0.17, "right": 0.97, "bottom": 0.16, "top": 0.9}  # fixed: a layout engine costs ~4x the drawing
# a legend above the axes: entries per row (with labels of at most LEGEND_LABEL_CHARS), HEIGHT's share per extra row
LEGEND_COLUMNS, LEGEND_LABEL_CHARS, LEGEND_ROW = 3, 20, 0.07
MEAN_MARKERS = ("o", "s", "^")  # a sweep's mean curves: one per pass through the colour cycle
MIN_DECADES = 1.0  # a log axis spans at least this much, a linear one 10% of its level
# A y or colorbar label, centred on the axes' 240 pixels, has ~300 before it leaves the figure:
# ~31 characters at 12 points. Longer ones wrap (`wrapped`), a y label's extra lines taking
# LABEL_LINE of the figure's width each from the axes (`set_ylabel`).
LABEL_CHARS, LABEL_LINE = 30, 0.05


def styled(draw):
  """Runs a drawing function under STYLE (rcParams are read when artists are created), its
  figure's ticks limited to the view (_InView)."""
  @functools.wraps(draw)
  def wrapper(*args, **kwargs):
    with matplotlib.rc_context(STYLE):
      fig = draw(*args, **kwargs)
    for ax in fig.axes:
      for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(_InView(axis.get_major_locator()))
        axis.set_minor_locator(_InView(axis.get_minor_locator()))
    return fig
  return wrapper


class _InView(ticker.Locator):
  """A locator's ticks inside the view only. matplotlib builds a Tick (two markers, a grid
  line, two labels) for every location, drawn or not, and a log locator adds a decade either
  side: a third of a probe image's drawing time went to ticks never drawn. Same pixels."""

  def __init__(self, locator):
    self.locator = locator

  def set_axis(self, axis):
    super().set_axis(axis)
    self.locator.set_axis(axis)

  def __call__(self):
    locs = np.asarray(self.locator())
    lo, hi = sorted(self.axis.get_view_interval())
    slack = 1e-10 * (hi - lo)  # a tick at the edge (matplotlib draws those)
    return locs[(locs >= lo - slack) & (locs <= hi + slack)]

  def tick_values(self, vmin, vmax):
    return self.locator.tick_values(vmin, vmax)

  def nonsingular(self, v0, v1):
    return self.locator.nonsingular(v0, v1)

  def view_limits(self, vmin, vmax):
    return self.locator.view_limits(vmin, vmax)


def new_figure(legend_rows: int = 1, **margins):
  """A figure of the shared size with one axes; `margins` override MARGINS (e.g. a wider left).
  Each legend row above the axes past the first makes the figure LEGEND_ROW of HEIGHT taller, so
  the axes keep their size however many arms the legend lists."""
  extra = LEGEND_ROW * HEIGHT * (legend_rows - 1)
  height = HEIGHT + extra
  margins = MARGINS | {"top": 1 - ((1 - MARGINS["top"]) * HEIGHT + extra) / height,
                       "bottom": MARGINS["bottom"] * HEIGHT / height} | margins
  fig = Figure(figsize=(WIDTH / DPI, height / DPI), dpi=DPI)
  fig.subplots_adjust(**margins)
  FigureCanvasAgg(fig)
  return fig, fig.add_subplot()


class LogLabels(ticker.Formatter):
  """Plain labels ("0.6", "1e-05") on log axes; minor ticks labelled only on a short axis,
  which may hold a single major tick: all under a factor 3, 2 and 5 x 10^k under two decades."""

  def __init__(self, minor: bool):
    self.minor = minor

  def __call__(self, value, pos=None):
    if self.minor:
      lo, hi = self.axis.get_view_interval()
      shown = "123456789" if hi / lo < 3 else "25" if hi / lo < 100 else ""
      if f"{value:.0e}"[0] not in shown:
        return ""
    return _short(value)


def _short(value) -> str:
  """At most ~5 characters: 0.5, 20, 1e-5, 3e4."""
  if 1e-2 <= abs(value) < 1e4 or value == 0:
    text = f"{value:.2g}"
    return f"{value:.0f}" if "e" in text else text  # 100, not 1e+02
  return f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


def wrapped(label: str) -> str:
  """A label longer than LABEL_CHARS over as few lines as that takes, of even lengths (not a
  full line and a stray word)."""
  if len(label) <= LABEL_CHARS:
    return label
  lines = len(textwrap.wrap(label, LABEL_CHARS))
  width = math.ceil(len(label) / lines)
  while len(textwrap.wrap(label, width)) > lines:
    width += 1
  return "\n".join(textwrap.wrap(label, width))


def set_ylabel(ax, label: str) -> None:
  """The y label `wrapped`, the axes' left edge moved right to leave its extra lines room."""
  text = wrapped(label)
  ax.figure.subplots_adjust(left=ax.figure.subplotpars.left + LABEL_LINE * text.count("\n"))
  ax.set_ylabel(text)


def finite_values(values, log):
  v = np.asarray(values, np.float64).ravel()
  return v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]


def limits(values, log, fixed=None):
  """(lo, hi) that never stretch a flat series: at least MIN_DECADES (log) or 10% of the
  level (linear); `fixed` (a bounded quantity) widened only to fit what lies outside it.
  None when nothing is finite."""
  v = finite_values(values, log)
  if fixed is not None:
    lo, hi = fixed
    if v.size:
      lo, hi = min(lo, v.min()), max(hi, v.max())
    pad = 0.03 * (hi - lo)
    return lo - pad, hi + pad
  if not v.size:
    return None
  if log:
    lo, hi = np.log10(v.min()), np.log10(v.max())
    mid, half = (lo + hi) / 2, max(hi - lo, MIN_DECADES) / 2 * 1.1
    return 10 ** (mid - half), 10 ** (mid + half)
  lo, hi = v.min(), v.max()
  mid, half = (lo + hi) / 2, max(hi - lo, 0.1 * max(abs(lo), abs(hi)), 1e-12) / 2 * 1.1
  return mid - half, mid + half


def set_ylim(ax, values, log, fixed=None):
  lo_hi = limits(values, log, fixed)
  if lo_hi:
    ax.set_ylim(*lo_hi)


def set_log_scale(ax, axis: str) -> None:
  """A log `axis` ("x" or "y") with plain "0.6", "1e-05" labels, minor ones too where it is short
  (a one-decade axis has one major tick; matplotlib's own minor labels overlap on 1-2 decades)."""
  getattr(ax, f"set_{axis}scale")("log")
  getattr(ax, f"{axis}axis").set_major_formatter(LogLabels(minor=False))
  getattr(ax, f"{axis}axis").set_minor_formatter(LogLabels(minor=True))


def set_yscale(ax, log):
  if log:
    set_log_scale(ax, "y")
  else:
    ax.yaxis.set_major_formatter(ticker.ScalarFormatter(useOffset=False))


@styled
def curves(series, xlabel, ylabel, title, log_y=False, log_x=False, hlines=None, legend_above=False) -> Figure:
  """Several runs on one axis: label -> (x, y); `hlines` label -> y drawn dashed and labelled on
  the line at the axis' left edge (not in the legend, which then lists only the runs).
  `legend_above`: the legend above the axes (rows of LEGEND_COLUMNS, one fewer with a label over
  LEGEND_LABEL_CHARS), clear of the data, in place of the title."""
  # three short labels fit a row of the figure's width at 9 points; longer ones ("Post-LN, small attention") two
  columns = LEGEND_COLUMNS if all(len(label) <= LEGEND_LABEL_CHARS for label in series) else LEGEND_COLUMNS - 1
  fig, ax = new_figure(legend_rows=math.ceil(len(series) / columns) if legend_above else 1)
  set_yscale(ax, log_y)
  if log_x:
    set_log_scale(ax, "x")
  shown = []
  for label, (x, y) in series.items():
    y = np.asarray(y, np.float64)
    ax.plot(x, y, marker="o" if y.size <= 32 else None, ms=3.5, label=label)
    shown.append(y.ravel())
  for label, y in (hlines or {}).items():
    ax.axhline(y, color="0.4", ls="--", lw=1.2, label=label)
    shown.append(np.array([y], np.float64))
  if shown:
    set_ylim(ax, np.concatenate(shown), log_y)
  lo, hi = np.log(ax.get_ylim()) if log_y else ax.get_ylim()
  for label, y in (hlines or {}).items():  # on the side of the line facing the middle of the view
    upper = (np.log(y) if log_y else y) > (lo + hi) / 2
    ax.annotate(label, (0.0, y), xycoords=ax.get_yaxis_transform(), xytext=(4, -2 if upper else 2),
                textcoords="offset points", ha="left", va="top" if upper else "bottom", fontsize=9, color="0.3")
  crowded = len(series) > 4  # smaller and see-through, so a legend over data hides none of it
  handles = ax.get_lines()[:len(series)]
  if series and legend_above:
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(series), columns),
              fontsize=9, frameon=False, handlelength=1.2, columnspacing=1.0)
  elif series:
    ax.legend(handles=handles, loc="best", fontsize=8 if crowded else None, framealpha=0.5 if crowded else None)
  ax.set_xlabel(xlabel)
  set_ylabel(ax, ylabel)
  if not legend_above:
    ax.set_title(title)
  return fig


@styled
def sweep(arms, xlabel, ylabel, cap: float, hlines=None) -> Figure:
  """A learning-rate sweep: per arm label -> {"mean": (x, y), "seeds": (x, y), "failed": (x, y),
  "dashed": bool, "color": int}, its mean curve a line (dashed for `dashed` arms: the same
  colour, another setting such as weight decay 0), each seed's loss a dot and each failed
  trial a cross at its loss, or at `cap` (the loss at init, drawn dotted) where it diverged.
  The rates at which every trial of every arm failed are shaded: the failure region."""
  columns = 2  # arm labels run long ("Peri-LN, no weight decay"): three a row leave the figure
  fig, ax = new_figure(legend_rows=math.ceil(len(arms) / columns))
  set_log_scale(ax, "x")
  colors, handles, shown = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"], [], [np.array([cap])]
  for label, arm in arms.items():
    # Past the colour cycle's end an arm reuses a colour with another marker, so no two arms look alike.
    round_, shade = divmod(arm["color"], len(colors))
    color, mean_marker = colors[shade], MEAN_MARKERS[round_ % len(MEAN_MARKERS)]
    x, y = arm["mean"]
    handles += ax.plot(x, y, color=color, ls="--" if arm["dashed"] else "-", marker=mean_marker, ms=3.5,
                       label=label)
    for kind, marker in (("seeds", "."), ("failed", "x")):
      px, py = arm[kind]
      ax.plot(px, np.where(np.isfinite(py), py, cap), marker, color=color, ms=5 if kind == "failed" else 4,
              alpha=0.6, ls="none")
    shown += [np.asarray(y, np.float64), np.asarray(arm["seeds"][1], np.float64)]
  rates = sorted({r for arm in arms.values() for r in np.concatenate([arm["seeds"][0], arm["failed"][0]])})
  every_fails = [r for r in rates if all(r not in arm["seeds"][0] for arm in arms.values())]
  if every_fails:
    ax.axvspan(min(every_fails) / 10 ** 0.25, max(every_fails) * 10 ** 0.25, color="0.85", zorder=0)
  ax.axhline(cap, color="0.4", ls=":", lw=1.2)
  for label, y in (hlines or {}).items():
    ax.axhline(y, color="0.4", ls="--", lw=1.2)
    ax.annotate(label, (0.0, y), xycoords=ax.get_yaxis_transform(), xytext=(4, 2),
                textcoords="offset points", ha="left", va="bottom", fontsize=9, color="0.3")
    shown.append(np.array([y]))
  set_ylim(ax, np.concatenate(shown), False)
  ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(arms), columns),
            fontsize=9, frameon=False, handlelength=1.8, columnspacing=1.0)
  ax.set_xlabel(xlabel)
  set_ylabel(ax, ylabel)
  return fig


@styled
def ladder(arms, xlabel, ylabel) -> Figure:
  """Maximum stable rates against size, log-log: per arm label -> {"seeds": [(x, y, bound)], "fit":
  (x, y), "beyond": (x, y), "predicted": [(x, y, low, high)], "color": int}. A seed is a dot (a
  triangle up where it is a floor, down where a ceiling), nudged sideways per arm and drawn above
  the predictions, so the arms' seeds at a width stand apart and stay visible; the fitted line is
  solid over its widths (`fit`) and dashed where it extrapolates (`beyond`); a prediction is a
  hollow diamond with its interval."""
  fig, ax = new_figure(legend_rows=math.ceil(len(arms) / 2))
  set_log_scale(ax, "x")
  set_log_scale(ax, "y")
  colors, handles, shown = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"], [], []
  for k, (label, arm) in enumerate(arms.items()):
    color = colors[arm["color"] % len(colors)]
    nudge = 10 ** (0.04 * (k - (len(arms) - 1) / 2))
    for marker, bound in (("o", "measured"), ("^", "floor"), ("v", "ceiling")):
      found = [(x, y) for x, y, b in arm["seeds"] if b == bound]
      if found:
        x, y = np.array(found).T
        ax.plot(x * nudge, y, marker, color=color, ms=4, alpha=0.7, ls="none", zorder=3)
        shown.append(y)
    for key, style in (("fit", "-"), ("beyond", "--")):
      x, y = arm[key]
      if len(x):
        line = ax.plot(x, y, color=color, lw=1.5 if style == "-" else 1.2, ls=style, label=label)
        handles += line if style == "-" else []
        shown.append(np.asarray(y, np.float64))
    if not len(arm["fit"][0]):
      handles += ax.plot([], [], color=color, marker="o", ls="none", label=label)
    for x, y, low, high in arm["predicted"]:
      ax.errorbar([x * nudge], [y], yerr=[[y - low], [high - y]], color=color, marker="D", mfc="none", ms=6,
                  capsize=3, lw=1.2)
      shown.append(np.array([low, high]))
  set_ylim(ax, np.concatenate(shown), True)
  ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(arms), 2), fontsize=9,
            frameon=False, handlelength=1.8, columnspacing=1.0)
  ax.set_xlabel(xlabel)
  set_ylabel(ax, ylabel)
  return fig


@styled
def dots(values, xlabel, vlines=None) -> Figure:
  """One row per label (top to bottom): each value a dot, their mean a bar; `vlines` label -> x
  drawn dashed and labelled along the line. For a few configurations' final losses side by side."""
  fig, ax = new_figure(left=0.42)  # room for the labels
  labels = list(values)
  for row, label in enumerate(labels):
    x = np.asarray(values[label], np.float64)
    ax.plot(x, np.full(x.shape, row), "o", ms=4, color="tab:blue", alpha=0.7)
    if np.isfinite(x).any():  # a label whose runs all diverged has dots off the axis and no mean
      ax.plot([np.nanmean(x)] * 2, [row - 0.3, row + 0.3], color="tab:blue", lw=2)
  shown = np.concatenate([np.asarray(v, np.float64) for v in values.values()] + [list((vlines or {}).values())])
  lo, hi = np.nanmin(shown), np.nanmax(shown)
  ax.set_xlim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
  for label, x in (vlines or {}).items():  # labelled along the line, on its inner side
    right = x > (lo + hi) / 2
    ax.axvline(x, color="0.4", ls="--", lw=1.2)
    ax.annotate(label, (x, 0.02), xycoords=ax.get_xaxis_transform(), xytext=(-3 if right else 3, 0),
                textcoords="offset points", ha="right" if right else "left", va="bottom", rotation=90,
                fontsize=9, color="0.3")
  ax.set_yticks(range(len(labels)), labels, fontsize=9)
  ax.set_ylim(len(labels) - 0.5, -0.5)
  ax.set_xlabel(xlabel)
  return fig


def to_rgb(fig) -> np.ndarray:
  """[H, W, 3] uint8 pixels of the figure."""
  fig.canvas.draw()
  return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def save(fig, path_or_file, image_format: str | None = None) -> None:
  """At the figure's own dpi; `image_format` for a file object (a path's suffix names it)."""
  fig.savefig(path_or_file, format=image_format, dpi=fig.dpi)
