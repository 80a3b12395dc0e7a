"""The pieces every study section of results/README.md shares: the scale it ran at, a protocol's
thresholds, its verdicts (at each horizon too, with each three-way claim's false-positive rate
and power), and the verdicts with each threshold halved and doubled."""

from nplace.model import size
from nplace.protocol import FINDING, THREE_WAY
from nplace.studies import grid, judge, markdown, three_way

UNDERPOWERED = 0.8  # a claim whose test reproduces a true effect less often than this is marked


def scale(found, arg: str, study) -> tuple[list[int], int]:
  """(the parameter counts of the study's models, ascending; the tokens one trial trains on)."""
  base = found.config(arg)
  tokens = base.train.steps * base.train.batch_size * base.train.get("grad_accum", 1) * base.data.seq_len
  models = {tuple((k, v) for k, v in t.overrides.items() if k.startswith("model.")): t for t in study.trials}
  params = {size.model_info(grid.apply(base, t.overrides, t.name))["params"] for t in models.values()}
  return sorted(params), tokens


def corpus(found, arg: str, study) -> str:
  data = found.config(arg).data
  if data.source != "synthetic":
    return f"the corpus `{data.source}`"
  rate = study.trials[0].summary.entropy_rate
  return (f"a synthetic language (an order-{data.synthetic_order} Markov chain over {data.synthetic_vocab} "
          f"tokens, entropy rate {rate:.2f} nats)")


def scale_line(grid_file, arg: str, study, found) -> str:
  """One line: the corpus, the models' sizes and the tokens a trial (`found`, the study's
  `scale`), and what the study stands in for."""
  params, tokens = found
  sizes = markdown.count(params[0]) + ("" if len(params) == 1 else f" to {markdown.count(params[-1])}")
  return (f"**Scale**: {corpus(grid_file, arg, study)}; models of {sizes} parameters, {markdown.count(tokens)} "
          f"tokens a trial: a small-scale proxy of the seed's claim about {grid_file.seed_setting}.")


def effects(verdict) -> str:
  if verdict.counts is not None:
    b, runs_b, w, runs_w = verdict.counts
    outcome = "diverged" if verdict.claim.metric == "divergences" else "failed"
    return f"{outcome}: {verdict.claim.better} {b} of {runs_b}, {verdict.claim.worse} {w} of {runs_w}"
  whats = {e.what for e in verdict.effects}
  text = "; ".join(f"{e.shape}: {markdown.ci(e.mean, e.low, e.high)}" for e in verdict.effects)
  return f"{', '.join(sorted(whats))}: {text}" if text else "-"


def operating_values(protocol, measures) -> dict | None:
  """Claim id -> its test's (false-positive rate, power), why they cannot be estimated, or None
  (three_way.operating), for a three-way protocol; None for another."""
  if protocol.verdicts != THREE_WAY:
    return None
  return {claim.id: three_way.operating(claim, protocol, measures, protocol.bootstrap_seed)
          for claim in protocol.claims}


def underpowered(found) -> bool:
  return isinstance(found, tuple) and found[1] < UNDERPOWERED


def operating_cells(protocol, values: dict | None) -> dict | None:
  """operating_values as the verdict table's cells."""
  if values is None:
    return None
  cells = {}
  for claim in protocol.claims:
    found = values[claim.id]
    cells[claim.id] = ("-" if found is None else found if isinstance(found, str) else
                       f"{found[0]:.2f} / {found[1]:.2f} at {claim.power_at}"
                       + (" **underpowered**" if underpowered(found) else ""))
  return cells


def verdict_table(protocol, verdicts, tier: str, seeds: int, at_horizons=None, operating=None, fragile=None) -> str:
  """`at_horizons`: claim id -> the verdicts at the protocol's earlier horizons (a column);
  `operating`: claim id -> its test's false-positive rate and power (a column); `fragile`: claim
  id -> the threshold changes within half to double that flip its verdict (a note beside it)."""
  fragile = fragile or {}
  rows = [[f"{v.claim.statement} (`{v.claim.id}`)", tier, f"v{protocol.version}", f"**{v.verdict}**"
           + (f" (fragile: flips at {', '.join(fragile[v.claim.id])})" if v.claim.id in fragile else ""),
           effects(v), str(seeds), v.would_change] + ([at_horizons[v.claim.id]] if at_horizons else [])
          + ([operating[v.claim.id]] if operating else [])
          for v in verdicts]
  return markdown.table(["claim", "tier", "protocol", "verdict",
                         "effect [interval]",
                         "seeds", "what would change it"] + (["at earlier horizons"] if at_horizons else [])
                        + ([f"false positives / power ({three_way.DRAWS} draws each)"] if operating else []), rows)


def verdict_tables(protocol, verdicts, tier: str, seeds: int, at_horizons=None, operating=None, fragile=None) -> str:
  """verdict_table, in two parts when the protocol labels some claims as this project's own
  findings: what the reproduced paper (the seed) claims, then what this project found."""
  findings = [v for v in verdicts if v.claim.source == FINDING]
  if not findings:
    return verdict_table(protocol, verdicts, tier, seeds, at_horizons, operating, fragile)
  seed = [v for v in verdicts if v.claim.source != FINDING]
  return "\n\n".join(["**The seed's claims**", verdict_table(protocol, seed, tier, seeds, at_horizons, operating, fragile),
                       "**This project's findings** (not claims of the seed: a verdict either way is a result)",
                       verdict_table(protocol, findings, tier, seeds, at_horizons, operating, fragile)])


def horizon_label(fraction: float) -> str:
  return "the end" if fraction == 1 else f"{fraction:g} of the run"


def horizon_verdicts(protocol, measures_for) -> dict:
  """Horizon -> the verdicts judged on the trials as they stood then."""
  return {h: judge.judge(protocol, measures_for(protocol, h)) for h in protocol.horizons}


def changes_with_horizon(by_horizon: dict) -> dict:
  """Claim id -> [(horizon, verdict) at each earlier horizon] where one differs from the end's verdict;
  [] where none does."""
  final = {v.claim.id: v.verdict for v in by_horizon[1.0]}
  earlier = {claim_id: [(h, next(v.verdict for v in vs if v.claim.id == claim_id)) for h, vs in by_horizon.items()
                        if h != 1.0] for claim_id in final}
  return {claim_id: found if any(v != final[claim_id] for _, v in found) else [] for claim_id, found in earlier.items()}


def at_horizons(by_horizon: dict) -> dict:
  """Claim id -> "same at 0.25, 0.5" or the verdicts that differ, flagged."""
  same = "same at " + ", ".join(f"{h:g}" for h in by_horizon if h != 1.0)
  return {claim_id: "**changes with the horizon**: " + "; ".join(f"{h:g}: {v}" for h, v in changed) if changed else same
          for claim_id, changed in changes_with_horizon(by_horizon).items()}


def horizon_table(protocol, by_horizon: dict) -> str:
  """Every claim's verdict and effect at each horizon of the protocol."""
  rows = []
  for i, claim in enumerate(protocol.claims):
    rows.append([f"`{claim.id}`", *(f"**{vs[i].verdict}**: {effects(vs[i])}" for vs in by_horizon.values())])
  return markdown.table(["claim", *(horizon_label(h) for h in by_horizon)], rows)


def sensitivity_table(protocol, found) -> str:
  """`found`: judge.sensitivity's rows."""
  registered = {(t.name, t.value) for t in protocol.thresholds}
  rows = [[f"`{name}`" + (" (registered)" if (name, value) in registered else ""), markdown.number(value), *verdicts]
          for name, value, verdicts in found]
  changing = {name for name, _, verdicts in found
              if verdicts != next(v for n, x, v in found if n == name and (n, x) in registered)}

  def names(changes: bool) -> str:
    return ", ".join(f"`{t.name}`" for t in protocol.thresholds if (t.name in changing) == changes)
  line = (f"Thresholds that change a verdict within half to double their value: {names(True)}; that change none: "
          f"{names(False) or '-'}." if changing else "No threshold changes a verdict within half to double its value.")
  bounded = [f"`{t.name}`'s distance to {t.bound:g}" for t in protocol.thresholds if t.bound is not None]
  if bounded:
    line += f" A bounded threshold is varied by its distance to the bound: {', '.join(bounded)}, halved and doubled."
  return markdown.table(["threshold", "value", *(f"`{c.id}`" for c in protocol.claims)], rows) + "\n\n" + line


def thresholds_table(protocol) -> str:
  return markdown.table(["threshold", "value", "meaning"],
                        [[f"`{t.name}`", markdown.number(t.value), t.doc] for t in protocol.thresholds])


def reference_lines(s) -> dict:
  """The data's frequency loss and entropy rate (from a run's summary), labelled with their values."""
  lines = {f"frequency loss {s.frequency_loss:.2f}": s.frequency_loss}
  if s.entropy_rate is not None:
    lines[f"entropy rate {s.entropy_rate:.2f}"] = s.entropy_rate
  return lines


def seed_values(values, digits=3) -> str:
  return ", ".join(markdown.number(v, digits) for v in values)
