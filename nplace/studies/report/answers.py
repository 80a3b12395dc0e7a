"""The top of results/README.md: what the page's current protocols found, before any section.
One row per claim (the seed's wording or this project's, its verdict, its effect with the
interval, the scale it was judged at, a link to its section), study A first, then growth, study
B and the placements; and the take-away in plain words, read off named claims' verdicts. Each
answer carries what its section says beside the verdict: the cautions (fragile, underpowered,
changes with the horizon), trials seen before the protocol's version, and the other verdicts the
same protocol reaches on other trials."""
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Judged:
  """A section of the page, as the answers read it."""
  section: object  # page.Section
  heading: str
  verdicts: list
  marks: dict  # claim id -> its cautions


def order_key(section) -> tuple:
  """Study, then the newest protocol first, then a grid's own trials before re-judged ones."""
  protocol = section.protocol
  return (STUDY_ORDER.index(protocol.name) if protocol.name in STUDY_ORDER else len(STUDY_ORDER),
          -protocol.version, _rejudged(section), -len(section.study.trials), section.study.path.name)


def _rejudged(section) -> bool:
  return section.own_version != section.protocol.version


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


def _key(j, v) -> tuple:
  """A claim of one protocol version: (protocol name, version, claim id)."""
  return j.section.protocol.name, j.section.protocol.version, v.claim.id


def _found(judged) -> dict:
  """_key -> [(its Judged, its verdict)] in page order."""
  found = {}
  for j in judged:
    for v in j.verdicts:
      found.setdefault(_key(j, v), []).append((j, v))
  return found


def _seen(j) -> str:
  """What a claim judged on earlier trials says beside it."""
  return f" (on protocol {j.section.own_version}'s trials, seen before this version)" if _rejudged(j.section) else ""


def _elsewhere(found, j, v, word=lambda verdict: f"**{verdict}**", link=True, joiner="; ") -> str:
  """The other verdicts the same protocol reaches on the claim, with the trials each read."""
  others = {}
  for o, w in found[_key(j, v)][1:]:
    if w.verdict != v.verdict:
      others.setdefault(w.verdict, []).append(f"`{o.section.arg}`" + _seen(o)
                                              + (f" ([section]({anchor(o.heading)}))" if link else ""))
  return "".join(f"{joiner}{word(verdict)} on {' and '.join(where)}" for verdict, where in others.items())


def _cautions(j, v) -> str:
  marks = j.marks.get(v.claim.id, [])
  return f" ({', '.join(marks)})" if marks else ""


def _verdict_cell(found, j, v) -> str:
  return f"**{v.verdict}**" + _cautions(j, v) + _elsewhere(found, j, v)


def rows(judged) -> list[list[str]]:
  """`judged`: Judged sections in page order. One row per claim, each claim id once per protocol
  (the first section that judges it: the widest own data; its other verdicts beside it); a claim
  that continues the one before it ("... and so without weight decay") is left to its section
  where it agrees with it, and names that claim where its row is not the one above."""
  found, shown, out, above = _found(judged), set(), [], None
  for j in judged:
    section = j.section
    source = section.grid.config(section.arg).data.source
    for before, v in zip([None, *j.verdicts], j.verdicts):
      key, statement = _key(j, v), v.claim.statement
      continues = statement.startswith("...") and before
      if key in shown or (continues and before.verdict == v.verdict):
        continue
      if continues and above != _key(j, before):
        statement = f"{before.claim.statement} {statement}"
      shown.add(key)
      above = key
      link = f"[{section.protocol.name} v{section.protocol.version}]({anchor(j.heading)})"
      out.append([statement + _seen(j), _verdict_cell(found, j, v), tables.effects(v),
                  scale_cell(section, source), link])
  return out


def takeaway(judged) -> str:
  """The take-away: each question's claims' verdicts in plain words (yes: reproduced; no:
  contradicted; not shown: inconclusive; not yet: not testable), each with its cautions."""
  found, first = _found(judged), {}
  for j in judged:
    for v in j.verdicts:
      first.setdefault((j.section.protocol.name, v.claim.id), (j, v))

  def plain(verdict):
    return f"**{PLAIN.get(verdict, 'not yet')}**"
  parts = []
  for question, claims in TAKEAWAY:
    answers = []
    for j, v in (first[c] for c in claims if c in first):
      answers.append(f"{v.claim.statement}{_seen(j)}: {plain(v.verdict)}{_cautions(j, v)}"
                     + _elsewhere(found, j, v, plain, link=False, joiner=", but "))
    if answers:
      parts.append(f"*{question}?* " + ". ".join(answers) + ".")
  return ("**What to take away at this scale** (each answer a claim's verdict below: yes = reproduced, no = "
          "contradicted, not shown = inconclusive, not yet = not testable yet; in brackets, what its section says "
          "beside it): " + " ".join(parts))


def table(judged) -> str:
  return markdown.table(["claim", "verdict", "effect [interval]", "scale", "section"], rows(judged))
