"""The top of results/README.md: what the page's current protocols found, before any section.
One row per claim (the seed's wording or this project's, its verdict, its effect with the
interval, the scale it was judged at, a link to its section), study A first, then growth, study
B and the placements; and the take-away in plain words, read off named claims' verdicts."""
import math
import re

from nplace.studies import markdown, verdict as verdict_lib
from nplace.studies.report import tables

# The page's order of studies (protocol names): study A (the ladder, protocol 4, the embedding
# ablation), growth over depth, study B, the placements table.
STUDY_ORDER = ("ladder", "stability", "peri_embedding", "growth", "collapse", "placements")
PLAIN = {verdict_lib.REPRODUCED: "yes", verdict_lib.CONTRADICTED: "no", verdict_lib.INCONCLUSIVE: "not shown",
         verdict_lib.NOT_REPRODUCED: "not shown"}
# The take-away's questions, each answered by the verdicts of the claims it names (protocol name, claim id).
TAKEAWAY = (
    ("Peri-LN rather than Pre-LN", (("stability", "peri_higher_max_lr"), ("stability", "pre_diverges_more"),
                                    ("stability", "pre_fails_more_at_edge"),
                                    ("ladder", "peri_above_pre_at_every_width"))),
    ("dt = 0.1 for Peri-LN", (("stability", "dt_flatter"),)),
)


def order_key(section) -> tuple:
  """Study, then the newest protocol first, then a grid's own trials before re-judged ones."""
  protocol = section.protocol
  rejudged = section.grid.declared_version(section.arg) != protocol.version
  return (STUDY_ORDER.index(protocol.name) if protocol.name in STUDY_ORDER else len(STUDY_ORDER),
          -protocol.version, rejudged, -len(section.study.trials), section.study.path.name)


def anchor(heading: str) -> str:
  """GitHub's link target for a `## ` heading."""
  text = re.sub(r"[^\w\- ]", "", heading.removeprefix("## ").strip().lower())
  return "#" + text.replace(" ", "-")


def _compact(n: float) -> str:
  return f"{n / 1e6:.2g}M" if n >= 1e6 else f"{n / 1e3:.3g}k"


def scale_cell(section, source: str) -> str:
  params, tokens = section.scale
  sizes = _compact(params[0]) + ("" if len(params) == 1 else f"–{_compact(params[-1])}")
  return f"{sizes} params, `{source}`, {_compact(tokens)} tokens"


def _effect(v) -> str:
  if v.counts is not None:
    return tables.effects(v)
  return "; ".join(f"{e.shape}: {markdown.ci(e.mean, e.low, e.high)}" for e in v.effects
                   if not math.isnan(e.mean)) or "-"


def rows(judged) -> list[list[str]]:
  """`judged`: (section, its heading, its verdicts) in page order. One row per claim, each claim
  id once per protocol (the first section that judges it: the widest own data); a claim that
  continues the one before it ("... and so without weight decay") is left to its section."""
  shown, out = set(), []
  for section, heading, verdicts in judged:
    source = section.grid.config(section.arg).data.source
    for v in verdicts:
      key = (section.protocol.name, section.protocol.version, v.claim.id)
      if key in shown or v.claim.statement.startswith("..."):
        continue
      shown.add(key)
      out.append([v.claim.statement, f"**{v.verdict}**", _effect(v), scale_cell(section, source),
                  f"[{section.protocol.name} v{section.protocol.version}]({anchor(heading)})"])
  return out


def takeaway(judged) -> str:
  """The take-away: each question's claims' verdicts in plain words (yes: reproduced; no:
  contradicted; not shown: inconclusive; not yet: not testable)."""
  found = {}
  for section, _, verdicts in judged:
    for v in verdicts:
      found.setdefault((section.protocol.name, v.claim.id), v)
  parts = []
  for question, claims in TAKEAWAY:
    answers = [f"{found[c].claim.statement}: **{PLAIN.get(found[c].verdict, 'not yet')}**"
               for c in claims if c in found]
    if answers:
      parts.append(f"*{question}?* " + "; ".join(answers) + ".")
  return ("**What to take away at this scale** (each answer a claim's verdict below: yes = reproduced, no = "
          "contradicted, not shown = inconclusive, not yet = not testable yet): " + " ".join(parts))


def table(judged) -> str:
  return markdown.table(["claim", "verdict", "effect, mean [interval]", "scale", "section"], rows(judged))
