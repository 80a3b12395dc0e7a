"""results/README.md is exactly what `nplace report --results results/` makes of the committed
results: nothing on the page was typed by hand."""
import pathlib
import re
import shutil

from nplace.studies.report import verdicts

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "results"


def test_the_committed_results_page_is_its_regeneration(tmp_path):
  def generated(directory, names):  # what the regeneration writes
    return [n for n in names if pathlib.Path(directory) == RESULTS and n in ("README.md", "figures")]

  copy = tmp_path / "results"
  shutil.copytree(RESULTS, copy, ignore=generated)
  verdicts.write(copy, repo=RESULTS.parent)
  committed = (RESULTS / "README.md").read_text()
  assert (copy / "README.md").read_text() == committed
  shown = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", committed)
  assert shown and sorted(shown) == sorted(f"figures/{p.name}" for p in (copy / "figures").iterdir())
  assert all((RESULTS / figure).is_file() for figure in shown)
