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


TITLE = "# nplace report"


def write(dirs, out) -> tuple[pathlib.Path, dict]:
  """Writes OUT/report.md and OUT/figures/*.png (an earlier report's other figures removed);
  returns the report's path and the runs and sweeps of the folders it left out (path -> why).
  Raises runs.RunsError when a directory holds no runs or unreadable JSON, or OUT a report.md
  this did not write."""
  previous = pathlib.Path(out) / "report.md"
  if previous.is_file() and not previous.read_text(errors="replace").startswith(TITLE):
    raise runs_lib.RunsError(f"{out}: holds a report.md that nplace report did not write; refusing to replace it")
  sources = [runs_lib.load(d) for d in dirs]
  page = markdown.Page(out)
  parts = [TITLE]
  for i, source in enumerate(sources):
    title, section = SECTIONS[source.study]
    made_by = f" (`{source.config}`)" if source.config else ""
    parts += [f"## {title}: {page.link(source.path.name or str(source.path), source.path)}{made_by}",
              section(page, source, f"{i}_{source.study}")]
  path = page.out / "report.md"
  path.write_text("\n\n".join(parts) + "\n")
  for stale in set(page.figures_dir.glob("*.png")) - set(page.figures):  # an earlier report's, shown no more
    stale.unlink()
  return path, {source.path / name: why for source in sources for name, why in source.left_out.items()}
