"""The section for runs of no known study (e.g. `make demo`'s): a table and loss curves.
Its pieces (the per-run table, loss curves) are reused by the study sections."""
from nplace.logs import plots
from nplace.studies import markdown, outcomes, runs as runs_lib


def _digits(n: int):
  return lambda x: markdown.number(x, n)


COLUMNS = (  # header, summary key, how it is written
    ("val loss", "val_loss", _digits(4)), ("val ppl", "val_perplexity", _digits(3)),
    ("freq loss", "frequency_loss", _digits(4)), ("entropy rate", "entropy_rate", _digits(4)),
    ("max train loss", "max_train_loss", _digits(4)), ("tok/s", "tokens_per_sec", markdown.count))


def run_table(page, runs) -> str:
  """One row per run: its directory (linked), status (a failed trial's with its error), outcome of a finished run
  (`outcomes.classify`, the definition the protocols use), summary numbers, and its loss
  spikes with their size and recovery (`outcomes.spikes`)."""
  rows = []
  for run in runs:
    steps, values = runs_lib.scalars(run).get("train/loss", ((), ()))
    loss, warmup = list(zip(steps, values)), runs_lib.warmup(run)
    verdict = (outcomes.classify(run.summary, loss, warmup, outcomes.DID_NOT_LEARN_FRACTION)
               if runs_lib.is_finished(run) else "-")  # a preempted run is not judged
    spikes = markdown.spikes(outcomes.spikes(loss, warmup, outcomes.SPIKE_REBOUND)) if loss else "-"
    status = f"{run.status}: {run.error}" if run.error else run.status
    rows.append([page.link(run.name, run.path), status, verdict, markdown.number(runs_lib.value(run, "step")),
                 *(write(runs_lib.value(run, key)) for _, key, write in COLUMNS), spikes])
  return markdown.table(["run", "status", "outcome", "step", *(h for h, _, _ in COLUMNS), "loss spikes"], rows)


def reference_lines(runs) -> dict:
  """The frequency loss and entropy rate of the runs' data (from the first summary that has them)."""
  lines = {}
  for run in runs:
    for label, key in (("frequency loss", "frequency_loss"), ("entropy rate", "entropy_rate")):
      if runs_lib.value(run, key) is not None:
        lines.setdefault(label, runs_lib.value(run, key))
  return lines


def loss_curves(page, runs, key: str, tag: str = "train/loss") -> str:
  """`tag` of every run on one axis, against the frequency-loss and entropy-rate lines."""
  series = {run.name: runs_lib.scalars(run)[tag] for run in runs if tag in runs_lib.scalars(run)}
  if not series:
    return f"(no `{tag}` events found)"
  fig = plots.curves(series, "step", "loss (nats)", tag, hlines=reference_lines(runs))
  return page.figure(fig, f"{key}_{tag.replace('/', '_')}", f"{tag} of every run")


def section(page, source, key: str) -> str:
  left_out = ["Not in this table: " + "; ".join(f"{page.link(name, source.path / name)} ({why})"
                                               for name, why in source.left_out.items()) + "."] if source.left_out else []
  return "\n\n".join([run_table(page, source.runs), *left_out, loss_curves(page, source.runs, key),
                      loss_curves(page, source.runs, key, "eval/loss"), markdown.commands(source.runs)])
