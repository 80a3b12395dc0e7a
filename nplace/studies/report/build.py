"""`report.md` for the runs under some directories: one section per directory, chosen by
what it holds (see runs.study_of)."""
import pathlib

from nplace.studies import markdown, runs as runs_lib
from nplace.studies.report import generic, growth, study_a, study_b

SECTIONS = {  # study -> (title, section(page, source, key) -> markdown)
    "stability": ("Study A: stability", study_a.section),
    "growth": ("Hidden-state growth over depth", growth.section),
    "collapse": ("Study B: Post-Norm collapse", study_b.section),
    "runs": ("Runs", generic.section),
}


def write(dirs, out) -> pathlib.Path:
  """Writes OUT/report.md and OUT/figures/*.png; returns the report's path.
  Raises runs.RunsError when a directory holds no runs or unreadable JSON."""
  sources = [runs_lib.load(d) for d in dirs]
  page = markdown.Page(out)
  parts = ["# nplace report"]
  for i, source in enumerate(sources):
    title, section = SECTIONS[source.study]
    made_by = f" (`{source.config}`)" if source.config else ""
    parts += [f"## {title}: {page.link(source.path.name or str(source.path), source.path)}{made_by}",
              section(page, source, f"{i}_{source.study}")]
  path = page.out / "report.md"
  path.write_text("\n\n".join(parts) + "\n")
  return path
