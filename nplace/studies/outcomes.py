"""What counts as a failed run: the one definition the sweeps, the report and the lab share.

A run is judged from its summary (nplace/train/summary.py) alone, so a sweep's `sweep.json`
is enough to count failures. Each kind is reported separately; a run can fail in more than one way.

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
- `ok`: none of these.
"""
import math

from nplace.train.summary import Summary

# nats: study A's "ended at or near the frequency loss". Wider than the collapse margin: a run
# 0.1 nats below it learned a sliver beyond unigram statistics and still failed (the synthetic
# language has 3 learnable nats; 0.25 is under a tenth of them). Set after the pilot runs of
# results/README.md, which also lists every run's loss, so other thresholds can be read off.
FAILURE_MARGIN = 0.25
# nats above the running minimum of the train loss. Not the z-score detector (`loss_spikes`, still
# reported): on a noisy 1k-token batch it fires on ordinary noise, and `max_train_loss` is above
# the frequency loss in every short run (the loss right after warmup), so neither separates a
# blow-up from a healthy run. Batch noise here is ~0.2 nats; a rebound of 1 nat is a blow-up.
SPIKE_REBOUND = 1.0
KINDS = ("nonfinite", "frequency_loss", "spike")  # failure kinds, most severe first
OK = "ok"


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


def outcome(summary: Summary) -> str:
  """The most severe failure kind of a run, or `ok`."""
  found = failures(summary)
  return found[0] if found else OK
