"""The lab's part of a swept study's section on the results page: the lab's prediction of each
configuration against what the sweep measured, judged by the lab protocol the study's protocol
names (nplace/studies/ranking.py), from STUDY/lab.json (`nplace lab --rank STUDY`): rule version
3's init-time score against LR sensitivity, or (lab protocol 3 on) version 4's range test against
the measured maximum stable rates and the grid file's baselines."""
from nplace.studies import judge, markdown, measures as measures_lib, ranking as ranking_lib
from nplace.studies.lab import checks as lab_checks
from nplace.studies.lab.rank import configurations_part, max_lr_table, ranking_table
from nplace.studies.report import tables


def lab_part(study, module, arg: str, protocol, tier: str) -> list[str]:
  """The lab's scores on `study` ranked against its measures under `protocol` (the section's);
  nothing where the protocol names no lab protocol or the lab has not scored the study."""
  lab = protocol.lab
  ranking = lab and measures_lib.measures_for(lab, study, module, arg, ranked=protocol)
  if ranking is None:
    return []
  header = ranking_lib.record_of(study)
  found = judge.sensitivity(lab, ranking.under)
  scores = f"{study.path.name}/{ranking_lib.SCORES}"
  history = markdown.table(["rule version", "commit", "what changed"],
                           [[str(v), f"`{c}`", text] for v, c, text in lab_checks.RULE_HISTORY])
  per_configuration = ranking_lib.judges_configurations(lab)
  if per_configuration:
    title, parts = "The lab's predicted maximum stable rate", configurations_part(ranking)
  else:
    title = "The lab's init-time score against LR sensitivity"
    parts = ["Per configuration (ranks: 1 = most stable):", ranking_table(ranking),
               *(["Predicted against observed maximum stable learning rate:", max_lr_table(ranking)]
                 if ranking_lib.judges_max_lr(lab) else [])]
  return [f"### {title}: lab protocol v{lab.version}, rule version {header['rule_version']}",
          f"{lab.summary} Scores: [{scores}]({scores}) (`nplace lab --rank results/{study.path.name}`). "
          f"The rule: {header['rule']}",
          tables.thresholds_table(lab),
          tables.verdict_table(lab, judge.judge(lab, ranking), tier, len(ranking.seeds), fragile=judge.fragile(lab, found)),
          "With the threshold halved and doubled:", tables.sensitivity_table(lab, found),
          *parts,
          "The rule's versions:", history]
