"""summary.json's schema: written whole, read back strictly (a field too many or too few is a
one-line error naming the file and the field, but for fields added since summaries were filed),
eval results filed under their names."""
import dataclasses
import json
import math

import pytest

from nplace.train.summary import Summary, SummaryError, eval_fields


def test_a_summary_round_trips_through_its_file(tmp_path):
  s = Summary(status="diverged", step=7, diverged_at=7, frequency_loss=4.48, loss_spikes=2)
  (tmp_path / "summary.json").write_text(s.to_json())
  assert Summary.read(tmp_path / "summary.json") == s
  assert set(json.loads(s.to_json())) == {f.name for f in dataclasses.fields(Summary)}  # every field written


@pytest.mark.parametrize("change,needle", [
    (lambda d: d | {"val_los": 2.0}, "unknown summary field 'val_los'"),
    (lambda d: {k: v for k, v in d.items() if k != "max_loss_rebound"}, "'max_loss_rebound' is missing"),
    (lambda d: [d], "a JSON object"),
    (lambda d: d | {"val_loss": "abc"}, "summary field val_loss='abc' is not float or NoneType"),
    (lambda d: d | {"step": 2.5}, "summary field step=2.5 is not int"),
    (lambda d: d | {"loss_spikes": True}, "summary field loss_spikes=True is not int"),
    (lambda d: d | {"collapsed": 1}, "summary field collapsed=1 is not bool or NoneType"),
    (lambda d: d | {"status": "bogus"}, "status 'bogus' at step 0: expected completed | diverged | preempted"),
    (lambda d: d | {"step": -5}, "status 'completed' at step -5"),
])
def test_a_file_off_the_schema_is_one_line_naming_it(tmp_path, change, needle):
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(change(Summary().to_dict())))
  with pytest.raises(SummaryError) as error:
    Summary.read(path)
  assert needle in str(error.value) and str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_summary_filed_before_fields_were_added_reads_them_as_none(tmp_path):
  added = {f.name for f in dataclasses.fields(Summary) if f.metadata["since"]}
  assert {"copy_rougeL", "gen_rougeL", "gen_decoding", "gen_bertscore_f1"} <= added
  assert not added & {"rouge1", "rougeL", "val_loss", "bertscore_f1"}  # the original fields stay required
  filed = Summary(step=300, val_loss=3.5, rougeL=0.33, copy_rougeL=0.9, gen_rougeL=0.1, gen_decoding="greedy")
  old = {name: value for name, value in filed.to_dict().items() if name not in added}
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(old))
  read = Summary.read(path)
  assert (read.step, read.val_loss, read.rougeL) == (300, 3.5, 0.33)
  assert all(getattr(read, name) is None for name in added)
  path.write_text(json.dumps(old | {"gen_rougeX": 0.1}))  # unknown is still an error
  with pytest.raises(SummaryError, match="unknown summary field 'gen_rougeX'"):
    Summary.read(path)


def test_not_json_is_a_summary_error(tmp_path):
  (tmp_path / "summary.json").write_text('{"status": ')
  with pytest.raises(SummaryError, match="summary.json"):
    Summary.read(tmp_path / "summary.json")


def test_eval_results_are_filed_under_their_summary_names():
  results = {"loss": 2.5, "perplexity": 13.0, "perplexity_of_mean_loss": 12.2, "teacher_forced_rouge1": 0.4,
             "copy_rouge1": 0.9, "gen_rouge1": 0.1}
  assert eval_fields(results) == {"val_loss": 2.5, "val_perplexity": 13.0, "val_perplexity_of_mean_loss": 12.2,
                                  "rouge1": 0.4, "copy_rouge1": 0.9, "gen_rouge1": 0.1}
  s = Summary()
  s.file_eval(results)
  assert (s.val_loss, s.val_perplexity, s.rouge1, s.rouge2, s.gen_rouge1) == (2.5, 13.0, 0.4, None, 0.1)


def test_the_counters_are_what_a_resume_carries_over():
  """The running counters, the last train loss and the last evaluation's results: a run resumed at
  its last step (killed before its summary.json, or SIGTERM at that step) trains and evaluates
  nothing again, and its summary must still hold them."""
  evaluated = set(eval_fields({name: 0.0 for name in ("loss", "perplexity", "perplexity_of_mean_loss")}))
  assert evaluated <= set(Summary().counters())
  assert set(Summary().counters()) == {"loss_spikes", "skipped_steps", "max_train_loss", "min_train_loss",
                                       "max_loss_rebound", "train_loss", "val_loss", "val_perplexity",
                                       "val_perplexity_of_mean_loss", "rouge1", "rouge2", "rougeL",
                                       "bertscore_p", "bertscore_r", "bertscore_f1", "copy_rouge1",
                                       "copy_rouge2", "copy_rougeL", "gen_rouge1", "gen_rouge2", "gen_rougeL",
                                       "gen_bertscore_p", "gen_bertscore_r", "gen_bertscore_f1"}


class Scalars:
  """A writer that keeps what it is given."""

  def __init__(self):
    self.logged = {}

  def scalars(self, step, values):
    self.logged.setdefault(step, {}).update(values)


def test_a_run_resumed_at_its_last_step_keeps_its_losses(tmp_path):
  from nplace.config import base_config
  from nplace.train.step_log import StepLog
  config = base_config()
  before = StepLog(config, None, Summary(loss_spikes=3), 1, None, tmp_path / "counters.json")
  for step in (10, 20, 30):
    before.save_counters(step)
  before.summary.train_loss = 4.5
  before.summary.file_eval({"loss": 4.25, "perplexity": 70.0, "perplexity_of_mean_loss": 70.1,
                            "teacher_forced_rougeL": 0.5, "copy_rougeL": 0.9, "gen_rougeL": 0.1})
  before.save_counters(40)
  # checkpoint.keep (3) checkpoints' counters, and one more for the checkpoint being written
  assert sorted(json.loads((tmp_path / "counters.json").read_text()), key=int) == ["10", "20", "30", "40"]
  after = StepLog(config, Scalars(), Summary(step=40), 1, None, tmp_path / "counters.json")
  after.restore_counters(40)
  s = after.summary
  assert (s.train_loss, s.val_loss, s.val_perplexity, s.rougeL, s.copy_rougeL, s.gen_rougeL) == (
      4.5, 4.25, 70.0, 0.5, 0.9, 0.1)
  after.record(41, {"loss": 4.4, "finite": True, "grad_norm": 1.0, "lr": 0.1}, 0.0)
  assert s.loss_spikes == 3  # counting on from the saved count


# Steps 1-9 of a run warming up for 2: a transient low inside warmup (2.0, which the counters
# must not see), a 1.5-nat climb back (3.0 -> 4.5), a non-finite step 8.
LOSSES = [6.0, 2.0, 4.0, 3.0, 4.5, 2.5, 3.2, math.nan, 2.8]


@pytest.mark.parametrize("mode", ["skip", "stop"])
def test_the_step_log_counts_after_warmup_and_handles_a_non_finite_step(mode):
  from nplace.config import base_config
  from nplace.train.step_log import StepLog
  config = base_config()
  config.optim.warmup_steps = 2
  config.train.update(steps=9, log_every=1, on_divergence=mode)
  log = StepLog(config, Scalars(), Summary(), 1, None, None)
  for step, loss in enumerate(LOSSES, 1):
    log.record(step, {"loss": loss, "finite": math.isfinite(loss), "grad_norm": 1.0, "lr": 0.1}, float(step))
    if log.summary.status == "diverged":  # the loop stops the run here
      break
  s = log.summary
  # every step after warmup, to the last finite one: min 2.5, max 4.5, the climb 3.0 -> 4.5
  assert (s.min_train_loss, s.max_train_loss, s.max_loss_rebound) == (2.5, 4.5, pytest.approx(1.5))
  if mode == "skip":
    assert (s.status, s.diverged_at, s.skipped_steps, s.step, s.train_loss) == ("completed", None, 1, 9, 2.8)
  else:  # diverged at step 8, where the loop stops the run
    assert (s.status, s.diverged_at, s.skipped_steps) == ("diverged", 8, 0)
