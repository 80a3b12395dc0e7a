"""Study A. A sweep's report (`section`): failures per configuration over seeds (the paper's
"1/5 and 3/5 vs 0/5"), each failure kind in its own column, and the final metrics as mean ± std
over seeds. Its results-page tables and figures under a protocol (lr_sensitivity.Measures): the
stability table, loss against learning rate, final losses without a sweep, every grid point."""
import numpy as np

from nplace.logs import plots
from nplace.model import size
from nplace.studies import exact, grid, intervals, markdown, outcomes, runs as runs_lib
from nplace.studies.report import generic, tables

NO_WEIGHT_DECAY = ", no weight decay"  # the label suffix of study A's arms without weight decay

METRICS = (  # header, summary key; teacher-forced ROUGE beside the copy baseline it must beat
    ("val loss", "val_loss"), ("val ppl", "val_perplexity"),
    ("ROUGE-1 teacher-forced", "rouge1"), ("ROUGE-L teacher-forced", "rougeL"), ("ROUGE-L copy", "copy_rougeL"),
    ("ROUGE-L generated", "gen_rougeL"))


def seed_links(page, runs) -> str:
  """Each run's directory, labelled by its seed (or its name when it has no seed override)."""
  return " ".join(page.link(str(run.overrides.get("seed", run.name)), run.path) for run in runs)


def failure_table(page, runs) -> str:
  """Rows: configurations (overrides but the seed); failures as `k/n`, metrics over seeds.
  Metrics leave out nonfinite runs (their last numbers predate the blow-up)."""
  grouped = runs_lib.groups(runs)
  keys = list(dict.fromkeys(k for group in grouped for k, _ in group))
  rows = []
  for group, members in grouped.items():
    values, n = dict(group), len(members)
    c = outcomes.counts(members)
    kept = [run.summary for run in members if "nonfinite" not in outcomes.failures(run.summary)]
    rows.append([*(str(values.get(k, "-")) for k in keys),
                 f"{c['failed']}/{n}", *(f"{c[kind]}/{n}" for kind in outcomes.KINDS),
                 *(markdown.mean_std([getattr(s, key) for s in kept]) for _, key in METRICS),
                 seed_links(page, members)])
  header = [k.rsplit(".", 1)[-1] for k in keys] + ["failed", *outcomes.KINDS, *(h for h, _ in METRICS), "runs"]
  return markdown.table(header, rows)


def unfinished(runs) -> str:
  """A line on trials without a final summary (pending, running, preempted, crashed)."""
  rest = [run for run in runs if run not in runs_lib.finished(runs)]
  if not rest:
    return ""
  items = ", ".join(f"{run.name} ({run.status})" for run in rest)
  return f"Not counted, not finished: {items}."


def section(page, source, key: str) -> str:
  done = runs_lib.finished(source.runs)
  parts = ["Failure kinds are defined in `nplace/studies/outcomes.py`; a run can show several, "
           "`failed` counts runs with any. Metrics: mean ± std over seeds, nonfinite runs left out.",
           failure_table(page, done) if done else "(no finished trials)", unfinished(source.runs),
           generic.run_table(page, source.runs), generic.loss_curves(page, done, key),
           markdown.commands(source.runs)]
  return "\n\n".join(p for p in parts if p)


def _mean_cell(values, protocol, rng) -> str:
  """`mean [interval]` over the seeds (the protocol's method), or `-` where a seed has no value."""
  return "-" if None in values or not values else markdown.ci(*intervals.mean_interval(values, protocol, rng))


def _rates(values) -> str:
  """Per-seed maximum stable rates (-log10 values from per_seed), as rates."""
  return ", ".join("none" if v is None else f"{10 ** -v:.2g}" for v in values)


def stability_table(protocol, measures) -> str:
  """A stability sweep's per-arm table: sensitivity, best loss and its gap to the entropy rate, the
  best rate and whether it is bracketed, each seed's maximum stable rate, failed trials by
  kind, transient blow-ups, and whether the sweep's top rate failed."""
  rng = np.random.default_rng(protocol.bootstrap_seed)
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      sensitivity = measures.per_seed("lr_sensitivity", arm, shape)
      best = measures.per_seed("best_loss", arm, shape)
      rate = measures.of(arm, shape)[0].trial.summary.entropy_rate
      best_cell = _mean_cell(best, protocol, rng)
      if None not in best and rate is not None:
        best_cell += f" (+{np.mean(best) - rate:.2f} over the entropy rate)"
      at, bracketed = measures.best_lr(arm, shape)
      counts = {c: sum(measures.counts(arm, shape, lr)[c] for lr in measures.lrs) for c in outcomes.CLASSES}
      rows.append([shape, arm, _mean_cell(sensitivity, protocol, rng),
                   best_cell, "-" if at is None else f"{at:.2g}" + ("" if bracketed else " (not bracketed)"),
                   _rates(measures.per_seed("max_stable_lr", arm, shape)),
                   f"{counts[outcomes.DIVERGED]} / {counts[outcomes.DID_NOT_LEARN]} of {sum(counts.values())}",
                   markdown.blow_ups(measures.blow_ups(arm, shape)),
                   "yes" if measures.top_rate_fails(arm, shape) else "**no**: failure region not reached"])
  return markdown.table(["shape", "arm", "LR sensitivity (cap ln V)", "best final loss",
                         "best lr (lowest mean loss)", "maximum stable lr per seed",
                         "failed: diverged / did not learn", "transient blow-ups", "top rate fails"], rows)


def training_line(found, arg: str, measures) -> str:
  """Tokens per trial and per parameter in each shape (the configs the grid trains)."""
  base = found.config(arg)
  tokens = base.train.steps * base.train.batch_size * base.train.get("grad_accum", 1) * base.data.seq_len
  per_shape = []
  for shape in measures.shapes:
    trial = next(p.trial for p in measures.points if p.shape == shape)
    params = size.model_info(grid.apply(base, trial.overrides, trial.name))["params"]
    per_shape.append(f"{shape}: {markdown.count(params)} parameters, {tokens / params:.1f} tokens per parameter")
  return f"Each trial trains on {markdown.count(tokens)} tokens; " + "; ".join(per_shape) + "."


def sweep_figures(page, key: str, measures) -> str:
  """Loss vs learning rate per shape: each seed's point, failed trials as crosses,
  the failure region shaded, the arms without weight decay dashed in their arm's colour."""
  parts = []
  for shape in measures.shapes:
    lines = tables.reference_lines(next(p.trial for p in measures.points if p.shape == shape).summary)
    cap = measures.cap(measures.arms[0], shape, "init")
    base_arms = list(dict.fromkeys(a.removesuffix(NO_WEIGHT_DECAY) for a in measures.arms))
    arms = {}
    for arm in measures.arms:
      mine = measures.of(arm, shape)
      if not mine:  # an arm a ladder does not run at every width
        continue
      ok = [p for p in mine if p.outcome == outcomes.LEARNED]
      failed = [p for p in mine if p.outcome != outcomes.LEARNED]
      arms[arm] = {"mean": measures.mean_curve(arm, shape),
                   "seeds": (np.array([p.lr for p in ok]), np.array([measures.final_loss(p) for p in ok])),
                   "failed": (np.array([p.lr for p in failed]), np.array([measures.final_loss(p) for p in failed])),
                   "dashed": arm.endswith(NO_WEIGHT_DECAY),
                   "color": base_arms.index(arm.removesuffix(NO_WEIGHT_DECAY))}
    fig = plots.sweep(arms, f"peak learning rate ({shape})", "final val loss (nats)", cap, hlines=lines)
    parts.append(page.figure(fig, f"{key}_{shape}", f"final validation loss vs learning rate, {shape}: lines "
                             "the mean over seeds (a diverged seed at ln V, dotted), dots the seeds that "
                             "learned, crosses the failed trials, shaded where every trial failed; dashed: "
                             "no weight decay"))
  return "\n\n".join(parts)


def final_table(protocol, measures) -> str:
  """A grid without a learning-rate sweep: each arm's final loss and learned fraction."""
  rng = np.random.default_rng(protocol.bootstrap_seed)
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      values = measures.per_seed("final_loss", arm, shape)
      loss = _mean_cell(values, protocol, rng)
      fractions = [outcomes.learned_fraction(p.trial.summary) for p in measures.of(arm, shape)]
      rows.append([shape, arm, loss, markdown.mean_std([f for f in fractions if f is not None], 2)])
  return markdown.table(["shape", "arm", "final val loss, mean [interval]", "learned fraction"], rows)


def figures(page, key: str, measures) -> str:
  """Per shape of a grid without a sweep: each arm's final loss per seed."""
  parts = []
  for shape in measures.shapes:
    lines = tables.reference_lines(next(p.trial for p in measures.points if p.shape == shape).summary)
    losses = {arm: [measures.final_loss(p) for p in measures.of(arm, shape)] for arm in measures.arms}
    fig = plots.dots(losses, "final val loss (nats)", vlines=lines)
    parts.append(page.figure(fig, f"{key}_{shape}", f"final validation loss per arm (dots: seeds, bar: their mean), "
                                                     f"{shape}"))
  return "\n\n".join(parts)


def _spikes(trials, protocol) -> str:
  return markdown.spikes([s for t in trials
                          for s in outcomes.spikes(t.loss, t.warmup, protocol.threshold("spike_rebound"),
                                                   protocol.blow_ups)])


def outcome_table(protocol, measures) -> str:
  rows = []
  for shape in measures.shapes:
    for arm in measures.arms:
      for lr in measures.lrs:
        entries = measures.of(arm, shape, lr)
        if not entries:
          continue
        counts = measures.counts(arm, shape, lr)
        losses = [measures.final_loss(t) for t in entries]
        fractions = [outcomes.learned_fraction(p.trial.summary) for p in entries]
        blow_ups = [markdown.blow_ups(measures.blow_ups(arm, shape, lr))] if protocol.blow_ups else []
        rows.append([shape, arm, "-" if lr is None else f"{lr:.2g}", *(str(counts[c]) for c in outcomes.CLASSES),
                     markdown.mean_std(losses, 3), markdown.mean_std([f for f in fractions if f is not None], 2),
                     _spikes([p.trial for p in entries], protocol), *blow_ups])
  return markdown.table(["shape", "arm", "lr", *outcomes.CLASSES, "final val loss", "learned fraction",
                         "loss spikes"] + (["transient blow-ups"] if protocol.blow_ups else []), rows)


def fixed_rates_table(protocol, measures) -> str:
  """Per arm and rate: the failed runs and their exact interval, the runs that blew up at any
  step or ended diverged, and the final loss over the runs that stayed finite."""
  rows = []
  for shape in measures.shapes:
    for lr in measures.lrs:
      for arm in measures.arms:
        points = measures.of(arm, shape, lr)
        if not points:
          continue
        failed = sum(p.failed for p in points)
        low, high = exact.rate_interval(failed, len(points), protocol.interval)
        rows.append([shape, f"{lr:.2g}", arm, f"{failed} of {len(points)}", markdown.ci(failed / len(points), low, high),
                     str(sum(p.blew_up for p in points)), str(sum(p.outcome == outcomes.DIVERGED for p in points)),
                     markdown.mean_std([measures.final_loss(p) for p in points], 3)])
  return markdown.table(["shape", "lr", "arm", "failed", f"failure rate [{protocol.interval:.0%} exact]", "blew up",
                         "ended diverged", "final val loss"], rows)


def sensitivity_claims(protocol) -> list:
  """The protocol's claims on LR sensitivity: the ones `effect_source_table` traces."""
  return [claim for claim in protocol.claims if claim.metric == "lr_sensitivity"]


def effect_source_table(protocol, measures) -> str:
  """Where each LR-sensitivity claim's effect comes from: worse - better over the whole sweep,
  and over the rates at which every seed of both arms learned."""
  rng = np.random.default_rng(protocol.bootstrap_seed)
  rows = []
  for claim in sensitivity_claims(protocol):
    for shape in measures.shapes:
      both = [lr for lr in measures.lrs
              if all(p.outcome == outcomes.LEARNED for arm in (claim.better, claim.worse)
                     for p in measures.of(arm, shape, lr))]
      cells = []
      for lrs in (measures.lrs, both):
        better, worse = (measures.sensitivity_over(arm, shape, lrs) for arm in (claim.better, claim.worse))
        usable = len(lrs) > 1 and None not in better + worse
        cells.append(markdown.ci(*intervals.difference(better, worse, protocol, rng)) if usable else "-")
      rows.append([f"`{claim.id}`", shape, cells[0], ", ".join(f"{lr:.2g}" for lr in both) or "none", cells[1]])
  return markdown.table(["claim", "shape", "worse − better, whole sweep", "rates where every seed of both learned",
                         "worse − better there"], rows)
