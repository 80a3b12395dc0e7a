"""`nplace plot`: one probe of a real run and of a probe JSON file on one axis; bad input."""
import json

import pytest
from PIL import Image

from nplace.commands import main, plot as plot_command
from nplace.logs import plots


@pytest.mark.slow
def test_plot_command_compares_a_run_and_a_probe_json(probe_run, tmp_path, capsys):
  probed = tmp_path / "init.json"
  probed.write_text(json.dumps({"similarity": [0.05, 0.2], "placement": "post", "n_layer": 2, "step": 0}))
  out = tmp_path / "cmp.png"
  assert main.main(["plot", str(probe_run), str(probed), "--probe", "similarity", "--out", str(out)]) == 0
  assert Image.open(out).size == (plots.WIDTH, plots.HEIGHT)
  fig = plot_command.figure([probe_run, probed], "similarity")
  assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["run (step 2)", "init (step 0)"]
  assert main.main(["plot", str(probe_run), "--probe", "loss", "--out", str(out)]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["--out", "x.png"], "--probe"),
    (["--probe", "similarity", "--out", "x.png"], "RUN_DIR"),
    (["nowhere", "--probe", "similarity", "--out", "x.png"], "nowhere"),
    (["{run}", "--probe", "nosuch", "--out", "x.png"], "nosuch"),
    (["{run}", "--probe", "similarity", "--step", "7", "--out", "x.png"], "step 7"),
    (["{run}", "--probe", "similarity", "--out", "x.jpgg"], "--out x.jpgg: not an image file type"),
    (["{run}", "--probe", "similarity", "--out", "x"], "--out x: not an image file type"),
    (["{json}/cut.json", "--probe", "rms", "--out", "x.png"], "cut.json: not a probe JSON file (Expecting"),
    (["{json}/nostep.json", "--probe", "rms", "--out", "x.png"], "nostep.json: not a probe JSON file (no integer 'step'"),
    (["{json}/words.json", "--probe", "rms", "--out", "x.png"], "words.json: probe 'rms' holds [1, 'x'], not numbers"),
])
@pytest.mark.slow
def test_plot_bad_input_is_one_line(probe_run, capsys, argv, needle, tmp_path):
  for name, text in [("cut", '{"rms": [1, 2'), ("nostep", '{"rms": [1, 2]}'), ("words", '{"step": 3, "rms": [1, "x"]}')]:
    (tmp_path / f"{name}.json").write_text(text)
  argv = [a.format(run=probe_run, json=tmp_path) for a in argv]
  assert main.main(["plot", *argv]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err
