"""Study A's table: failures per configuration over seeds (the paper's "1/5 and 3/5 vs 0/5"),
each failure kind in its own column, and the final metrics as mean ± std over seeds."""
from nplace.studies import outcomes
from nplace.studies.report import generic, markdown, runs as runs_lib

METRICS = (  # header, summary key; teacher-forced ROUGE beside the copy baseline it must beat
    ("val loss", "val_loss"), ("val ppl", "val_perplexity"),
    ("ROUGE-1 teacher-forced", "rouge1"), ("ROUGE-L teacher-forced", "rougeL"), ("ROUGE-L copy", "copy_rougeL"),
    ("ROUGE-L generated", "gen_rougeL"))


def seed_links(page, runs) -> str:
  """Each run's directory, labelled by its seed (or its name when it has no seed override)."""
  return " ".join(page.link(str(run.overrides.get("seed", run.name)), run.path) for run in runs)


def counts(runs) -> dict:
  """`failed` (any kind) and each kind: how many of `runs` show it."""
  found = [outcomes.failures(run.summary) for run in runs]
  return {"failed": sum(bool(f) for f in found)} | {kind: sum(kind in f for f in found)
                                                     for kind in outcomes.KINDS}


def failure_table(page, runs) -> str:
  """Rows: configurations (overrides but the seed); failures as `k/n`, metrics over seeds.
  Metrics leave out nonfinite runs (their last numbers predate the blow-up)."""
  grouped = runs_lib.groups(runs)
  keys = list(dict.fromkeys(k for group in grouped for k, _ in group))
  rows = []
  for group, members in grouped.items():
    values, n = dict(group), len(members)
    c = counts(members)
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
