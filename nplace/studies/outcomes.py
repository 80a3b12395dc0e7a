"""What happened to a run: the definitions the sweeps, the report, the lab and the protocols share.

Protocol 1 (`classify`, from the summary and the logged train loss; thresholds from the
grid's protocol, nplace/protocol.py):
- `diverged`: the loss or a gradient was not finite (the run stopped, skipped updates, or its
  final validation loss is NaN/inf), or after warmup the train loss had been below the
  frequency loss and then rose above it for the rest of the run.
- `did_not_learn`: not diverged, and it gained less than the `did_not_learn` fraction of the
  learnable nats, (frequency loss - val loss) / (frequency loss - entropy rate).
- `learned`: neither. Loss spikes (`spikes`) are reported with their size and recovery; a
  spike the run recovered from is not a failure, and "did not learn" is never a divergence.

Blow-ups (`classify(..., blow_ups=True)`, a protocol's `blow_ups`, declared with study A's
protocol 2; the logged train loss is then every step's, `train.log_every=1`):
- a **blow-up** (`blow_up`): after warmup the train loss rose above the loss at init (the first
  step's, computed on the initial parameters), whether or not the run had learned, on
  synthetic and text data alike;
- `diverged`: not finite as above, or learned-then-lost as above, or a blow-up and the run
  ended at or above the frequency loss (its final validation loss);
- a blow-up the run recovered from is a **transient blow-up**, reported with its size and
  recovery beside the spikes; the run is then `learned` or `did_not_learn` as above;
- spikes count from the first step: the running minimum includes warmup, so the first step
  after warmup can be a spike, and an excursion above the loss at init is a blow-up, not a
  spike (`spikes(..., blow_ups=True)`).

Protocol 0 (`failures`: the summary alone; its margin was set after the pilot runs, kept so
protocol 0's pages (results/v0/) and the sweep report's study A failure table read as they
were judged). A run can fail in more than one way:

- `nonfinite`: the loss or a gradient was not finite — the run stopped (`status` diverged),
  skipped updates (`skipped_steps` > 0, with `train.on_divergence=skip`), or its final
  validation loss is NaN/inf.
- `frequency_loss`: the run did not stop diverged and its final validation loss is no better than
  `FAILURE_MARGIN` nats below the frequency loss (the unigram cross-entropy): the model learned
  unigram statistics at most. A loss above the frequency loss counts too (a model stuck at
  uniform predictions failed as well). A diverged run's last validation loss predates the
  blow-up, so it is not judged.
- `spike`: after warmup, the train loss climbed at least `SPIKE_REBOUND` nats above the lowest it
  had reached since (`max_loss_rebound`, over every step's loss): a sudden jump that threw
  away everything beyond unigram statistics, not noise on a flat curve.
"""
import dataclasses
import math

import numpy as np

from nplace.train.summary import Summary

# nats: study A's "ended at or near the frequency loss". Wider than the collapse margin: a run
# 0.1 nats below it learned a sliver beyond unigram statistics and still failed (the synthetic
# language has 3 learnable nats; 0.25 is under a tenth of them). Set after the pilot runs of
# results/v0/README.md, which also lists every run's loss, so other thresholds can be read off.
FAILURE_MARGIN = 0.25
# nats above the running minimum of the train loss. Not the z-score detector (`loss_spikes`, still
# reported): on a noisy 1k-token batch it fires on ordinary noise, and `max_train_loss` is above
# the frequency loss in every short run (the loss right after warmup), so neither separates a
# blow-up from a healthy run. Batch noise here is ~0.2 nats; a rebound of 1 nat is a blow-up.
SPIKE_REBOUND = 1.0
KINDS = ("nonfinite", "frequency_loss", "spike")  # failure kinds, most severe first
# `classify`'s threshold where no protocol declares one (the run table of `nplace report`):
# the `did_not_learn` fraction study A's protocols declare (experiments/stability.py).
DID_NOT_LEARN_FRACTION = 0.1


def _finite(x) -> bool:
  return x is not None and math.isfinite(x)


def failures(summary: Summary) -> tuple[str, ...]:
  """The failure kinds (in KINDS order) a run's summary shows; () for a healthy run. A field
  that is None (no rebound after warmup, no evaluation) is no evidence of that failure."""
  val, freq = summary.val_loss, summary.frequency_loss
  found = []
  if (summary.status == "diverged" or summary.skipped_steps > 0
      or (val is not None and not math.isfinite(val))):
    found.append("nonfinite")
  if summary.status != "diverged" and _finite(val) and _finite(freq) and val >= freq - FAILURE_MARGIN:
    found.append("frequency_loss")
  rebound = summary.max_loss_rebound
  if _finite(rebound) and rebound >= SPIKE_REBOUND:
    found.append("spike")
  return tuple(found)


def counts(runs) -> dict:
  """`failed` (any kind) and each kind: how many of `runs` (with a summary) show it."""
  found = [failures(run.summary) for run in runs]
  return {"failed": sum(bool(f) for f in found)} | {kind: sum(kind in f for f in found) for kind in KINDS}


DIVERGED, DID_NOT_LEARN, LEARNED = "diverged", "did_not_learn", "learned"
CLASSES = (DIVERGED, DID_NOT_LEARN, LEARNED)


@dataclasses.dataclass(frozen=True)
class Spike:
  step: int  # the first logged step at least `rebound` nats above the running minimum
  size: float  # nats: the excursion's highest loss minus the minimum before it
  recovered: bool  # the loss came back within half a rebound of that minimum


def learned_fraction(summary: Summary) -> float | None:
  """(frequency loss - val loss) / (frequency loss - entropy rate): 0 at unigram statistics, 1
  at the best achievable loss; None without a finite val loss or an entropy rate (text data)."""
  val, freq, rate = summary.val_loss, summary.frequency_loss, summary.entropy_rate
  if not (_finite(val) and _finite(freq) and _finite(rate)) or freq <= rate:
    return None
  return (freq - val) / (freq - rate)


def spikes(loss, warmup: int, rebound: float, blow_ups: bool = False) -> list[Spike]:
  """The excursions of the logged train loss `[(step, loss)]` after warmup that climbed at least
  `rebound` nats above its running minimum. With `blow_ups`: that minimum includes the warmup's
  steps (the first step after warmup is judged too), and an excursion above the loss at init is
  a blow-up (`blow_up`), not a spike."""
  found, low, start, peak, top = [], math.inf, None, 0.0, -math.inf
  ceiling = loss[0][1] if blow_ups and loss else math.inf

  def close(recovered):
    if top <= ceiling:
      found.append(Spike(start, peak, recovered))

  for step, value in loss:
    if not math.isfinite(value):
      continue
    if step <= warmup:
      low = min(low, value) if blow_ups else low
      continue
    if start is None:
      if value - low >= rebound:
        start, peak, top = step, value - low, value
      else:
        low = min(low, value)
    else:
      peak, top = max(peak, value - low), max(top, value)
      if value - low < rebound / 2:
        close(True)
        start, low = None, min(low, value)
  if start is not None:
    close(False)
  return found


def blew_up(loss, warmup: int, rise: float) -> bool:
  """Whether the logged train loss `[(step, loss)]`, at some step after warmup, stood `rise` nats
  or more above its running minimum (over every step before it, warmup's included) or was not
  finite: a blow-up whether or not the run recovered (a protocol's `stable_needs_no_blow_up`)."""
  low = math.inf
  for step, value in loss:
    if step > warmup and (not math.isfinite(value) or value - low >= rise):
      return True
    low = min(low, value) if math.isfinite(value) else low
  return False


def stayed_above(loss, frequency_loss: float, learned_below: float, warmup: int) -> bool:
  """After warmup the train loss got below `learned_below` (it had learned), then rose above
  `frequency_loss` and stayed there to the last logged step: it threw away what it had learned
  and did not get it back."""
  after = [value for step, value in loss if step > warmup]
  first = next((i for i, value in enumerate(after) if value < learned_below), None)
  if first is None:
    return False
  rest = after[first:]
  last_below = max(i for i, value in enumerate(rest) if value <= frequency_loss)
  return last_below < len(rest) - 1


@dataclasses.dataclass(frozen=True)
class BlowUp:
  step: int  # the first step after warmup above the loss at init
  peak: float  # nats: the highest loss after warmup minus the loss at init
  recovered: bool  # the run ended below the frequency loss


def blow_up(summary: Summary, loss, warmup: int) -> BlowUp | None:
  """The blow-up (module doc), or None: the train loss after warmup above the first
  step's, the loss at init."""
  if not loss:
    return None
  init = loss[0][1]
  above = [(step, value) for step, value in loss if step > warmup and math.isfinite(value) and value > init]
  if not above:
    return None
  val, freq = summary.val_loss, summary.frequency_loss
  recovered = _finite(val) and _finite(freq) and val < freq
  return BlowUp(above[0][0], max(v for _, v in above) - init, bool(recovered))


def classify(summary: Summary, loss, warmup: int, did_not_learn: float, blow_ups: bool = False,
             learned_margin: float = 0.0) -> str:
  """`diverged`, `did_not_learn` or `learned` (protocol 1's rules, with `blow_ups` as well: module doc).
  Without an entropy rate (text data) a run learned when its val loss is more than
  `learned_margin` nats below the frequency loss."""
  val, freq = summary.val_loss, summary.frequency_loss
  if (summary.status == "diverged" or summary.skipped_steps > 0
      or (val is not None and not math.isfinite(val))
      or any(not math.isfinite(value) for _, value in loss)):
    return DIVERGED
  if blow_ups:
    found = blow_up(summary, loss, warmup)
    if found is not None and not found.recovered:
      return DIVERGED
  fraction = learned_fraction(summary)
  if fraction is not None:
    if stayed_above(loss, freq, freq - did_not_learn * (freq - summary.entropy_rate), warmup):
      return DIVERGED
    return DID_NOT_LEARN if fraction < did_not_learn else LEARNED
  return LEARNED if _finite(val) and _finite(freq) and val < freq - learned_margin else DID_NOT_LEARN


def plateau_gap(loss, level: float) -> float | None:
  """The mean logged train loss over the last quarter of the run minus `level`; a mean,
  because one batch's loss is noisier than study B's margin. None without logged losses."""
  if not loss:
    return None
  last = max(step for step, _ in loss)
  tail = [value for step, value in loss if step >= 0.75 * last]
  return float(np.mean(tail)) - level


def plateau(loss, level: float, margin: float) -> bool | None:
  """Study B's `collapsed` judged on a plateau, not one point: the last quarter's mean train
  loss within `margin` of `level` (the frequency loss). None without logged losses."""
  gap = plateau_gap(loss, level)
  return None if gap is None else bool(abs(gap) <= margin)
