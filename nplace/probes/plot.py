"""A per-layer profile as an RGB image for TensorBoard, drawn with Pillow (a dependency of
tensorboard, so always present; matplotlib is not, and one line plot does not need it)."""
import numpy as np
from PIL import Image, ImageDraw

WIDTH, HEIGHT, MARGIN = 480, 300, 48
MEASURED, THEORY, AXES = (31, 119, 180), (214, 39, 40), (90, 90, 90)


def _log_scale(values):
  """Log y when everything is positive and spans more than two decades."""
  finite = values[np.isfinite(values)]
  return finite.size > 0 and finite.min() > 0 and finite.max() / finite.min() > 100


def profile(title: str, measured, theory=None) -> np.ndarray:
  """[H, W, 3] uint8: `measured` (blue, dots) over layer index, `theory` (red) if given."""
  curves = [(np.asarray(measured, np.float64), MEASURED)]
  if theory is not None:
    curves.append((np.asarray(theory, np.float64), THEORY))
  every = np.concatenate([c for c, _ in curves])
  log = _log_scale(every)
  ys = [np.log10(c) if log else c for c, _ in curves]
  finite = np.concatenate([y[np.isfinite(y)] for y in ys])
  lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
  lo, hi = (lo - 0.5, hi + 0.5) if hi - lo < 1e-12 else (lo, hi)
  n = max(len(c) for c, _ in curves)

  def xy(i, y):
    x = MARGIN + (WIDTH - 2 * MARGIN) * (i / max(n - 1, 1))
    return x, HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * (y - lo) / (hi - lo)

  image = Image.new("RGB", (WIDTH, HEIGHT), "white")
  draw = ImageDraw.Draw(image)
  draw.rectangle([MARGIN, MARGIN, WIDTH - MARGIN, HEIGHT - MARGIN], outline=AXES)
  label = (lambda y: f"1e{y:.1f}") if log else (lambda y: f"{y:.3g}")
  draw.text((4, MARGIN - 6), label(hi), fill=AXES)
  draw.text((4, HEIGHT - MARGIN - 6), label(lo), fill=AXES)
  draw.text((MARGIN, HEIGHT - MARGIN + 6), "0", fill=AXES)
  draw.text((WIDTH - MARGIN - 12, HEIGHT - MARGIN + 6), str(n - 1), fill=AXES)
  draw.text((WIDTH // 2 - 20, HEIGHT - MARGIN + 6), "index", fill=AXES)
  draw.text((MARGIN, 8), title + ("  (log y)" if log else ""), fill=(0, 0, 0))
  if theory is not None:
    draw.text((WIDTH - MARGIN - 110, 8), "measured", fill=MEASURED)
    draw.text((WIDTH - MARGIN - 50, 8), "theory", fill=THEORY)
  for y, (_, color) in zip(ys, curves):
    points = [xy(i, v) for i, v in enumerate(y) if np.isfinite(v)]
    if len(points) > 1:
      draw.line(points, fill=color, width=2)
    if color == MEASURED:
      for x, yy in points:
        draw.ellipse([x - 2, yy - 2, x + 2, yy + 2], fill=color)
  return np.asarray(image)
