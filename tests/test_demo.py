"""The demo's runs (Peri-LN with the embedding norm) and its closing table, including runs that
diverged (no val loss)."""
from nplace.commands import demo, main
from nplace.config import experiment
from nplace.errors import ConfigError
from nplace.train.summary import Summary


def test_peri_runs_are_peri_ln_with_the_embedding_norm():
  for name, (variant, _) in demo.RUNS.items():
    model = experiment("tiny", variant).model
    assert model.embed_norm == (model.placement == "peri") == name.startswith("peri"), name


def test_table_rows_and_missing_values():
  rows = demo.table({
      "post": Summary(status="diverged", frequency_loss=4.4772),
      "peri": Summary(val_loss=2.12345, frequency_loss=4.4772, entropy_rate=1.4519, tokens_per_sec=5018.8),
  }).splitlines()
  assert rows[0].split() == ["run", "status", "val", "loss", "freq", "loss", "entropy", "rate", "tok/s"]
  assert rows[1].split() == ["post", "diverged", "-", "4.4772", "-", "-"]
  assert rows[2].split() == ["peri", "completed", "2.1235", "4.4772", "1.4519", "5,019"]


def test_a_logdir_of_another_steps_is_refused_with_the_demos_advice(tmp_path, monkeypatch, capsys):
  def train(config, workdir):
    raise ConfigError("train.steps", config.train.steps, "holds a run started with train.steps=5; ... --extend")
  monkeypatch.setattr(demo, "train", train)
  assert main.main(["demo", "--logdir", str(tmp_path), "--steps", "3"]) == 2
  assert capsys.readouterr().err.endswith(f"nplace demo: --logdir {tmp_path}: holds demo runs of another --steps than 3: "
                                          "remove it, or give another --logdir\n")
