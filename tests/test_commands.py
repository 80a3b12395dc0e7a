"""The console script: `--help` for every command, `nplace info` (its keys and placements), and
bad input as one line + exit code 2."""
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from nplace.commands import info, main
from nplace.config import base_config
from nplace.placements import PLACEMENTS
from nplace.runtime import workdirs

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPT2 = str(ROOT / "experiments/gpt2.py")


def run_main(capsys, *argv):
  code = main.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.mark.parametrize("override,key", [
    ("--config.model.placement=bogus", "model.placement"),
    ("--config.model.norm=batchnorm", "model.norm"),
    ("--config.model.mix_post_fraction=1.5", "model.mix_post_fraction"),
    ("--config.model.qk_norm=maybe", "model.qk_norm"),
    ("--config.model.attention=linear", "model.attention"),
    ("--config.model.init=xavier", "model.init"),
    ("--config.model.mlp=relu", "model.mlp"),
    ("--config.model.remat=some", "model.remat"),
    ("--config.model.dtype=float16", "model.dtype"),
    ("--config.model.n_head=7", "model.d_model"),
    ("--config.model.vocab_size=3000000000", "model.vocab_size"),  # int32 ids: an overflow traceback at init
    ("--config.model.max_len=10000000000", "model.max_len"),
    ("--config.model.dt=0", "model.dt"),
    ("--config.model.dt=-0.1", "model.dt"),
    ("--config.model.embed_scale=0", "model.embed_scale"),
    ("--config.model.attn_out_scale=0", "model.attn_out_scale"),
    ("--config.data.seq_len=1025", "data.seq_len"),
    ("--config.model.loss_chunks=0", "model.loss_chunks"),
    ("--config.model.loss_chunks=5", "model.loss_chunks"),
    ("--config.model.head_vocab_multiple=0", "model.head_vocab_multiple"),
    ("--config.model.n_layer=0", "model.n_layer"),
    ("--config.model.scan_unroll=0", "model.scan_unroll"),
    ("--config.model.d_model=-8", "model.d_model"),
    ("--config.model.vocab_size=0", "model.vocab_size"),
    ("--config.model.d_ff=0", "model.d_ff"),
    ("--config.train.batch_size=0", "train.batch_size"),
    ("--config.train.cpu_devices=0", "train.cpu_devices"),
    ("--config.probe.images=some", "probe.images"),
    ("--config.probe.early_every=-1", "probe.early_every"),
    ("--config.probe.early_until=-1", "probe.early_until"),
    ("--config.probe.early_every=25", "probe.early_every"),
    ("--config.probe.early_until=500", "probe.early_until"),
    ("--config.model.bogus=1", "bogus"),
    ("--config.model.n_layer.x=3", "no such config key 'model.n_layer.x' (in --config.model.n_layer.x=3)"),
    ("--config.model.n_layer=abc", "model.n_layer"),
    ("--config.seed=-1", "seed"),
    ("--config.seed=4294967296", "seed"),
    ("--config.data.synthetic_seed=-1", "data.synthetic_seed"),
    ("--config.optim.lr=inf", "optim.lr"),
    ("--config.optim.weight_decay=nan", "optim.weight_decay"),
    ("--config.optim.b1=1", "optim.b1"),  # Adam's bias correction 1 - b1^t = 0: the run "diverges" at step 2
    ("--config.optim.b2=1", "optim.b2"),
    ("--config.optim.eps=0", "optim.eps"),  # 0/0 in every parameter with a zero gradient: NaN, run "completed"
    ("--config.train.profile_steps=²,³", "train.profile_steps"),  # str.isdigit, but not int()'s: a traceback
    ("--config.model.dt=inf", "model.dt"),
    ("--config.model.dt=1e300", "model.dt=1e+300: must be finite in float32"),  # inf once computed
    ("--config.distributed.num_processes=0", "distributed.num_processes"),
    ("--config.mesh.rules=foo", "mesh.rules"),  # each a traceback at startup
    ("--config.mesh.rules=(('batch','nope'),)", "mesh.rules"),
    ("--config.mesh.rules=((1,2),)", "mesh.rules"),
    ("--config.distributed.process_id=2 --config.distributed.num_processes=2", "distributed.process_id"),
    ("--config.distributed.coordinator_address=nohostport", "distributed.coordinator_address"),
])
def test_config_errors_are_one_line(capsys, override, key):
  code, out, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", *override.split())
  assert code == 2 and out == ""
  assert err.count("\n") == 1 and key in err, err


def test_a_misspelt_key_is_plain_text_with_the_suggestion(capsys):
  code, _, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", "--config.train.stpes=3")
  assert code == 2 and err == ("nplace info: no such config key 'stpes' (in --config.train.stpes=3); "
                               'did you mean "steps" instead of "stpes"?\n'), err


def test_placement_error_lists_valid_choices(capsys):
  _, _, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", "--config.model.placement=bogus")
  assert "placement" in err and all(p in err for p in PLACEMENTS)


def test_info_lists_placements_and_options(capsys):
  code, out, _ = run_main(capsys, "info", "--config", f"{GPT2}:124m", "--placements")
  lines = out.splitlines()
  assert code == 0 and len(lines) == 1 + len(PLACEMENTS) + 3
  assert lines[2].split()[:2] == ["pre", "124,439,808"] and "arXiv 2002.04745" in lines[2]
  assert [l.split()[1] for l in lines[-3:]] == ["model.qk_norm:", "model.norm=dyt:", "model.mix_post_fraction:"]


@pytest.mark.parametrize("argv,needle", [
    (["info"], "--config"),
    (["info", "--config", "no/such/file.py"], "no/such/file.py"),
    (["info", "--config", f"{GPT2}:999m"], "999m"),
    (["info", "--config", ":pre"], "--config ':pre': names no file"),
    (["info", "--config", f"{GPT2}:124m", "--keys", "--placements"], "--keys and --placements: give one"),
    (["info", "--config="], "--config '': names no file"),
    (["info", "--config", f"{GPT2}:124m", "stray"], "stray"),
    (["bogus-command"], "usage"),
])
def test_usage_errors_are_one_line(capsys, argv, needle):
  code, _, err = run_main(capsys, *argv)
  assert code == 2 and err.count("\n") == 1 and needle in err, err


@pytest.mark.slow
def test_console_script_info_json_and_error():
  nplace = pathlib.Path(sys.executable).parent / "nplace"
  done = subprocess.run([nplace, "info", "--config", f"{GPT2}:124m,peri", "--json"],
                        capture_output=True, text=True, check=True, cwd=ROOT)
  info = json.loads(done.stdout)
  # Peri-LN's 4 norms of 2d per layer, and its embedding norm
  assert info["params"] == 124_439_808 + 4 * 768 * 12 + 2 * 768 and info["placement"] == "peri"
  assert {"params", "flops_per_token", "state_bytes"} <= info.keys()
  bad = subprocess.run([nplace, "info", "--config", f"{GPT2}:124m", "--config.model.placement=bogus"],
                       capture_output=True, text=True, cwd=ROOT)
  assert bad.returncode == 2 and "Traceback" not in bad.stderr
  assert [l for l in bad.stderr.splitlines() if "placement" in l] == [bad.stderr.strip().splitlines()[-1]]


@pytest.mark.parametrize("config", ["tiny.py:peri", "deep48.py:peri", "gpt2.py:124m,peri",
                                    "tiny.py:peri_no_embed_norm", "gpt2.py:124m,peri_no_embed_norm"])
def test_peri_presets_carry_the_embedding_norm_and_the_block_alone_is_the_ablation(capsys, config):
  code, out, _ = run_main(capsys, "info", "--config", str(ROOT / "experiments" / config), "--keys")
  rows = {line.split()[0]: line.split()[1] for line in out.splitlines()}
  assert code == 0 and rows["model.placement"] == "peri"
  assert rows["model.embed_norm"] == str(not config.endswith("no_embed_norm"))


def test_help_lists_every_command():
  nplace = pathlib.Path(sys.executable).parent / "nplace"
  done = subprocess.run([nplace, "--help"], capture_output=True, text=True, cwd=ROOT)
  assert done.returncode == 0 and done.stderr == ""
  listed = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
  assert list(listed) == list(main.COMMANDS)
  assert all(main.COMMANDS[name] in line for name, line in listed.items())


@pytest.mark.slow
@pytest.mark.parametrize("name", main.COMMANDS)
def test_every_command_answers_help_as_installed(name):
  """`nplace CMD --help`: exit 0, the usage, and every flag the command defines with its doc."""
  nplace = pathlib.Path(sys.executable).parent / "nplace"
  done = subprocess.run([nplace, name, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert done.returncode == 0 and done.stderr == "", done.stderr
  assert done.stdout.startswith(f"usage: nplace {name}")
  command = importlib.import_module(f"nplace.commands.{name}").COMMAND
  fv = command.flag_values()
  listed = done.stdout.split("\nflags:\n", 1)[1].splitlines()
  for flag in fv:
    shown = f"--[no]{flag}" if fv[flag].boolean else f"--{flag}"
    line = next((line for line in listed if line.strip().startswith(shown + " ")), None)
    assert line is not None and fv[flag].help.split()[0] in line, (flag, done.stdout)
  assert ("nplace info --config FILE --keys" in done.stdout) == (command.config != "none")
  config_doc = re.search(r"\n  --config (.*?)\n  --", done.stdout, re.S)
  required = "(required)" in (config_doc.group(1) if config_doc else "")
  assert required == (command.config == "required" and not command.config_default), done.stdout


def test_info_keys_lists_every_key_with_its_value_and_doc(capsys):
  code, out, _ = run_main(capsys, "info", "--config", f"{GPT2}:124m", "--config.model.dt=0.25",
                          "--config.data.tfds_data_dir=gs://b/tfds", "--keys")
  rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()}

  def flat(tree, prefix=""):
    for key, value in tree.items():
      yield from flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
  assert code == 0 and sorted(rows) == sorted(flat(base_config().to_dict()))
  assert rows["model.dt"][0] == "0.25" and rows["model.dt"][1] == "residual step: h + dt * branch"
  assert rows["data.tfds_data_dir"][0] == "gs://b/tfds" and rows["model.n_layer"][0] == "12"
  assert all(len(doc.split()) >= 2 for _, doc in rows.values())


TINY = str(ROOT / "experiments/tiny.py:pre")
UNWRITABLE = "/proc/none/out"  # as root os.access says /proc is writable; creating a file there fails


@pytest.mark.parametrize("argv,heavy", [
    (["probe", "--config", TINY, "--json", UNWRITABLE], "nplace.commands.probe.probe"),
    (["eval", "--workdir", "run", "--json", UNWRITABLE], "nplace.commands.eval.evaluate_checkpoint"),
    (["lab", "pre", "--json", UNWRITABLE], "nplace.studies.lab.measure.measure_all"),
    (["report", "runs", "--out", UNWRITABLE], "nplace.studies.report.build.write"),
    (["report", "--results", UNWRITABLE, "sweep"], "nplace.studies.results.file_sweep"),
    (["plot", "run", "--probe", "similarity", "--out", UNWRITABLE], "nplace.commands.plot.figure"),
    (["convert", "--from-hf", "gpt2", "--out", UNWRITABLE], "nplace.hf.from_hf"),
    (["prepare", "--out", UNWRITABLE], "nplace.data.prepare.prepare"),
    (["train", "--config", TINY, "--workdir", UNWRITABLE], "nplace.commands.train.train"),
    (["sweep", "--config", TINY, "--workdir", UNWRITABLE], "nplace.studies.grid.expand"),
    (["demo", "--logdir", UNWRITABLE], "nplace.commands.demo.run"),
])
def test_an_unwritable_output_fails_in_one_line_before_the_work(argv, heavy, capsys, monkeypatch):
  monkeypatch.setattr(heavy, lambda *args, **kwargs: pytest.fail(f"{heavy} ran"))
  flag = argv[argv.index(UNWRITABLE) - 1]
  code, out, err = run_main(capsys, *argv)
  assert code == 2 and out == ""
  assert err.startswith(f"nplace {argv[0]}: {flag} {UNWRITABLE}: cannot write there (") and err.count("\n") == 1, err


@pytest.mark.parametrize("target", ["summary.json", "counters.json", "events.out.tfevents.1.vm.from0",
                                    "checkpoints/4/config/metadata"])
def test_an_output_file_never_replaces_a_file_of_the_run(target, tmp_path, capsys, monkeypatch):
  """`--json RUN/summary.json` replaced the run's summary (a checkpoint's metadata: the run no
  longer restored). A file of one's own beside them is fine."""
  run = tmp_path / "run"
  for name in ("summary.json", "counters.json", "data.json", "events.out.tfevents.1.vm.from0",
               "checkpoints/4/config/metadata"):
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).write_text("kept")
  monkeypatch.setattr("nplace.commands.eval.evaluate_checkpoint", lambda *a, **k: pytest.fail("evaluated"))
  code, out, err = run_main(capsys, "eval", "--workdir", str(run), "--json", str(run / target))
  assert code == 2 and out == "" and err == (f"nplace eval: --json {run / target}: a file nplace keeps in the run "
                                             f"directory {run}: name another file\n")
  assert all(p.read_text() == "kept" for p in run.rglob("*") if p.is_file())
  workdirs.check_writable(workdirs.resolve(run / "eval.json"), "--json", file=True)


@pytest.mark.parametrize("argv", [
    ["report", "runs", "--out", "gs://b/report"],
    ["report", "--results", "gs://b/results", "sweep"],
    ["demo", "--logdir", "gs://b/demo"],
    ["prepare", "--out", "gs://b/data"],
    ["convert", "--from-hf", "gpt2", "--out", "gs://b/gpt2"],
])
def test_a_bucket_output_of_a_command_that_writes_local_files_is_one_line(argv, capsys):
  """report --out wrote into a local folder named `gs:` and said it wrote the bucket; demo made
  one and crashed at its first checkpoint."""
  uri = next(arg for arg in argv if arg.startswith("gs://"))
  flag = argv[argv.index(uri) - 1]
  code, out, err = run_main(capsys, *argv)
  assert code == 2 and out == ""
  assert err == f"nplace {argv[0]}: {flag} {uri}: a bucket; this command writes to local disk only\n"


@pytest.mark.parametrize("argv,heavy,returns,written", [
    (["probe", "--config", TINY, "--json"], "nplace.commands.probe.probe", {"step": 0}, {"step": 0}),
    (["eval", "--config", TINY, "--workdir", "run", "--json"], "nplace.commands.eval.evaluate_checkpoint",
     {"val_loss": 2.5}, {"val_loss": 2.5}),
    (["lab", "--all", "--json"], "nplace.studies.lab.measured.report", ("table", {"pre": 0.1}), {"pre": 0.1}),
    (["plot", "run", "--probe", "similarity", "--out"], "nplace.commands.plot.figure", "figure", None),
])
def test_an_output_file_in_directories_not_yet_made_is_written_there(argv, heavy, returns, written, capsys,
                                                                     monkeypatch, tmp_path):
  """The check before the work passes an output file on its nearest existing directory; the
  write after the work makes the rest (it raised FileNotFoundError: the work was lost)."""
  from nplace.logs import plots
  if returns == "figure":
    returns = plots.curves({"run": ([0, 1], [1.0, 0.5])}, "layer", "similarity", "similarity")
  monkeypatch.setattr(heavy, lambda *args, **kwargs: returns)
  out = tmp_path / "new" / "dir" / ("image.png" if written is None else "out.json")
  code, _, err = run_main(capsys, *argv, str(out))
  assert code == 0, err
  if written is None:
    assert out.read_bytes().startswith(b"\x89PNG")
  else:
    assert json.loads(out.read_text()) == written


@pytest.mark.parametrize("argv", [
    pytest.param(["sweep", "--config", str(ROOT / "experiments/stability.py:cpu"), "--workdir", "runs/x", "--list"],
                 marks=pytest.mark.slow, id="sweep-list"),
    pytest.param(["sweep", "--help"], id="command-help"),  # printed before the command's own handling
    pytest.param(["--help"], id="overview")])
def test_a_reader_that_leaves_early_ends_the_command_quietly(argv):
  """`nplace sweep --list | head`: the pipe closes before the output is written."""
  proc = subprocess.Popen([pathlib.Path(sys.executable).parent / "nplace", *argv],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  proc.stdout.close()
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 141 and err == "", err


def test_a_native_crash_in_a_command_prints_its_python_stack():
  """A segfault in native code (seen once in a profiled train's stop_trace) ends with the stack of
  every thread, naming the frame that crashed, where before it left only exit code -11."""
  crash = ("import ctypes, sys, types; from nplace.commands import main; "
           "info = types.ModuleType('nplace.commands.info'); info.COMMAND = None; "
           "info.main = lambda argv: ctypes.string_at(0); sys.modules['nplace.commands.info'] = info; "
           "sys.argv = ['nplace', 'info']; main.main()")
  done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == -11
  assert "Fatal Python error: Segmentation fault" in done.stderr and "in <lambda>" in done.stderr, done.stderr


def test_ctrl_c_during_an_async_save_is_one_line():
  """Ctrl-C while orbax was saving left its coroutines unawaited, and Python named each at exit,
  after the one line (seen as a flaky end of test_train's Ctrl-C test); orbax's commit thread
  logged its failure with a traceback."""
  cut = ("import logging, sys, threading, time, types; from nplace.commands import main\n"
         "class JsonCheckpointHandler:\n  async def async_save(self): pass\n"
         "def fail_later():\n  time.sleep(0.5); logging.getLogger('absl').error('commit failed', exc_info="
         "RuntimeError('cannot schedule new futures after shutdown'))\n"
         "def cut_short(argv):\n  global pending; import flax; threading.Thread(target=fail_later).start()\n"
         "  pending = JsonCheckpointHandler().async_save(); raise KeyboardInterrupt\n"
         "train = types.ModuleType('nplace.commands.train'); train.COMMAND = None; train.main = cut_short\n"
         "sys.modules['nplace.commands.train'] = train; sys.argv = ['nplace', 'train']; sys.exit(main.main())")
  done = subprocess.run([sys.executable, "-c", cut], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 130
  assert done.stderr == "\nnplace train: interrupted; rerun the same command to resume from the last checkpoint\n"
  # a save's thread left waiting for ever: Python's exit would join it (seen in test_train's Ctrl-C test)
  stuck = cut.replace("threading.Thread(target=fail_later).start()", "threading.Thread(target=threading.Event().wait).start()")
  done = subprocess.run([sys.executable, "-c", stuck], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 130 and done.stderr.endswith("from the last checkpoint\n"), done.stderr


def test_sweep_list_writes_nothing_so_its_workdir_is_not_checked(capsys):
  code, out, _ = run_main(capsys, "sweep", "--config", str(ROOT / "experiments/stability.py:cpu"),
                          "--workdir", UNWRITABLE, "--list")
  assert code == 0 and f"--workdir {UNWRITABLE}/" in out


def test_an_output_file_that_is_a_directory_is_one_line(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr("nplace.commands.probe.probe", lambda *args: pytest.fail("probed"))
  code, _, err = run_main(capsys, "probe", "--config", TINY, "--json", str(tmp_path))
  assert code == 2 and err == f"nplace probe: --json {tmp_path}: is a directory, not a file\n"


TINY_FILE = "from nplace.config import experiment\n"


@pytest.mark.parametrize("source,message", [
    ("def get_config(arg=None):\n  return dict(\n", "{file}, line 2: SyntaxError: '(' was never closed"),
    ("\0\1", "{file}: SyntaxError: source code string cannot contain null bytes"),
    ("import no_such_module_here\n", "{file}, line 1: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("def get_config(arg=None):\n  raise RuntimeError('boom')\n", "{file}, line 2: RuntimeError: boom"),
    ("def get_config(arg=None):\n  return {'model': {}}\n",
     "{file}: get_config() returned dict, not an ml_collections.ConfigDict"),
    ("def get_config(arg=None):\n  pass\n", "{file}: get_config() returned None, not an ml_collections.ConfigDict"),
    ("x = 1\n", "{file}: defines no get_config()"),
    (TINY_FILE + "def get_config(arg=None):\n  c = experiment('tiny', 'pre')\n  c.train.stepz = 4\n  return c\n",
     "config error: train.stepz=4: no such config key (nplace info --config FILE --keys lists them)"),
    (TINY_FILE + "def get_config(arg=None):\n  c = experiment('tiny', 'pre')\n  del c.optim.lr\n  return c\n",
     "config error: optim.lr: missing: a config starts from nplace.config.base_config()"),
])
def test_a_config_file_that_fails_is_one_line_naming_where(source, message, capsys, tmp_path):
  info.COMMAND.parse(["--config", TINY])  # a file read before in the process lends it none of its names
  file = tmp_path / "mine.py"
  file.write_text(source)
  code, _, err = run_main(capsys, "info", "--config", str(file))
  assert code == 2 and err.splitlines()[-1] == "nplace info: " + ("" if message.startswith("config error") else "--config ") \
      + message.format(file=file), err


@pytest.mark.parametrize("spec", [["--config", "no_such_file.py"], ["--config=no_such_file.py:arg"]])
def test_a_missing_config_file_is_named(spec, capsys, tmp_path):
  code, _, err = run_main(capsys, "train", *spec, "--workdir", str(tmp_path / "run"))
  assert code == 2 and err == "nplace train: --config no_such_file.py: no such file\n"
