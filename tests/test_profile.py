"""train.profile_steps: conftest's real `nplace train` profiles step 2 into its workdir, where
TensorBoard's profile plugin looks (plugins/profile/RUN/HOST.xplane.pb), with step annotations;
bad values are one-line config errors."""
import pytest

from test_commands import GPT2, run_main


def test_the_run_writes_a_trace_with_step_annotations(probe_run):
  (trace,) = (probe_run / "plugins" / "profile").glob("*/*.xplane.pb")
  body = trace.read_bytes()
  assert b"step_num" in body and b"train" in body  # jax.profiler.StepTraceAnnotation("train", step_num=2)


@pytest.mark.parametrize("value", ["3", "a,b", "0,2", "5,4", "1,1001", "2,3,4"])
def test_bad_profile_steps_are_one_line_errors(capsys, value):
  code, out, err = run_main(capsys, "info", "--config", f"{GPT2}:124m", "--config.train.steps=1000",
                            f"--config.train.profile_steps={value}")
  assert code == 2 and out == ""
  assert err.count("\n") == 1 and "train.profile_steps" in err, err
