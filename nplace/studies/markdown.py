"""Markdown pieces of a report: tables, numbers, links to run directories, figures, commands."""
import math
import os
import pathlib
import re

import numpy as np

from nplace.logs import plots


class Page:
  """Where a report is written (`out/report.md`, figures under `out/figures/`): paths in the
  text are relative to `out`, so the report can be moved together with its runs. The figures
  are saved in `figures_dir` where it is given (a staged folder that becomes `out/figures`)."""

  def __init__(self, out, figures_dir=None):
    self.out = pathlib.Path(out)
    self.figures_dir = pathlib.Path(figures_dir) if figures_dir else self.out / "figures"
    self.figures_dir.mkdir(parents=True, exist_ok=True)
    self.figures = []

  def link(self, text: str, path) -> str:
    """A link to a run's directory: relative to the report, or a bucket run's URI."""
    if "://" in str(path):
      return f"[{text}]({path})"
    return f"[{text}]({pathlib.Path(os.path.relpath(pathlib.Path(path).absolute(), self.out.absolute())).as_posix()})"

  def figure(self, fig, name: str, caption: str) -> str:
    """Saves `fig` as figures/NAME.png (NAME made file-safe); the markdown that shows it."""
    name = re.sub(r"[^\w.-]+", "_", name)
    path = self.figures_dir / f"{name}.png"
    plots.save(fig, path)
    self.figures.append(path)
    return f"![{caption}](figures/{name}.png)"


def _spec(x: float, digits: int) -> str:
  """Fixed decimals in the usual range, significant digits outside it."""
  return f".{digits}g" if abs(x) >= 1e4 or (x != 0 and abs(x) < 1e-3) else f".{digits}f"


def number(x, digits: int = 4) -> str:
  if x is None:
    return "-"
  if isinstance(x, (bool, np.bool_)):
    return "yes" if x else "no"
  if isinstance(x, (int, np.integer)):
    return str(x)
  if not math.isfinite(x):
    return str(x)
  return f"{x:{_spec(x, digits)}}"


def ci(mean, low, high, digits=2) -> str:
  """A mean and its interval, `0.87 [0.59, 0.96]` (the mean alone where there is none; `-` where
  there is no mean, as a rho over too few configurations)."""
  if math.isnan(mean):
    return "-"
  if math.isnan(low):
    return f"{mean:.{digits}f}"
  return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def count(x) -> str:
  """A whole number with thousands separators: `11,893`."""
  if x is None:
    return "-"
  return f"{round(x):,}" if math.isfinite(x) else str(x)


def spikes(found) -> str:
  """Loss spikes (`outcomes.Spike`): `0`, or how many, the largest in nats and how many the
  run recovered from."""
  if not found:
    return "0"
  return f"{len(found)} (max {max(s.size for s in found):.1f} nats, {sum(s.recovered for s in found)} recovered)"


def blow_ups(found) -> str:
  """Transient blow-ups (`outcomes.BlowUp`, recovered): `0`, or how many and the largest."""
  if not found:
    return "0"
  return f"{len(found)} (max {max(b.peak for b in found):.1f} nats above init)"


def mean_std(values, digits: int = 4) -> str:
  """`mean ± std` (sample std, in the mean's format) of the finite values; `(n=k)` when
  some were left out."""
  finite = [v for v in values if v is not None and math.isfinite(v)]
  if not finite:
    return "-"
  mean = float(np.mean(finite))
  text = f"{mean:{_spec(mean, digits)}}"
  if len(finite) > 1:
    text += f" ± {float(np.std(finite, ddof=1)):{_spec(mean, digits)}}"
  return text + (f" (n={len(finite)})" if len(finite) < len(values) else "")


def table(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  # a `|` inside a cell (`mean |h|`) would end it
  lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
  return "\n".join(lines)


def commands(runs) -> str:
  """The command behind every run, one per line, in a collapsed block."""
  lines = "\n".join(f"{run.name}: {run.command}" for run in runs)
  return f"<details><summary>Commands</summary>\n\n```\n{lines}\n```\n</details>"


def overrides_label(overrides: dict, skip=()) -> str:
  """`placement=peri dt=0.1`: a trial's overrides by their last key part, `skip` left out."""
  return " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in overrides.items() if k not in skip) or "base"
