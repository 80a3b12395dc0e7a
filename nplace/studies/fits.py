"""Linear vs exponential growth over depth, judged by R² (study A: O(D) vs O(e^D))."""
import math

import numpy as np


def r_squared(y, predicted) -> float:
  """1 - SS_res / SS_tot; NaN when y is constant (nothing to explain)."""
  y, predicted = np.asarray(y, np.float64), np.asarray(predicted, np.float64)
  total = np.sum(np.square(y - y.mean()))
  return float(1 - np.sum(np.square(y - predicted)) / total) if total > 0 else math.nan


def linear_fit(x, y) -> tuple[float, float]:
  """(slope b, R²) of the least-squares line y = a + b x."""
  slope, intercept = np.polyfit(x, y, 1)
  return float(slope), r_squared(y, intercept + slope * np.asarray(x, np.float64))


def linear(x, y) -> float:
  """R² of the least-squares line y = a + b x."""
  return linear_fit(x, y)[1]


def exponential_fit(x, y) -> tuple[float, float]:
  """(rate c, R²) of y = A e^(c x), fitted as a line to log y, R² on y itself (so it
  compares with `linear`); (NaN, NaN) unless every y is positive."""
  y = np.asarray(y, np.float64)
  if not np.all(y > 0):
    return math.nan, math.nan
  rate, log_scale = np.polyfit(x, np.log(y), 1)
  return float(rate), r_squared(y, np.exp(log_scale + rate * np.asarray(x, np.float64)))


def exponential(x, y) -> float:
  """R² of the exponential fit (exponential_fit)."""
  return exponential_fit(x, y)[1]


def better(r2_linear: float, r2_exponential: float, tolerance: float = 1e-6) -> str:
  """Which fit explains more of the variance: linear | exponential | tie | - (undecidable)."""
  if math.isnan(r2_linear) or math.isnan(r2_exponential):
    return "-"
  if abs(r2_linear - r2_exponential) <= tolerance:
    return "tie"
  return "linear" if r2_linear > r2_exponential else "exponential"
