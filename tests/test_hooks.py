"""The loop's hook schedule: every N steps, at the start of a fresh run, once at the end."""
from nplace.train.hooks import Hooks


def test_hooks_run_every_n_steps_at_start_and_at_end_in_order():
  calls, hooks = [], Hooks()
  hooks.add(lambda step, state: calls.append(("save", step)), every=1,
            at_end=lambda step, state: calls.append(("final save", step, state)))
  hooks.add(lambda step, state: calls.append(("eval", step, state)), every=3, at_start=True,
            at_end=lambda step, state: step % 3 and calls.append(("final eval", step)))
  hooks.add(lambda step, state: calls.append(("probe", step)), every=0, at_start=True)  # 0 = off
  hooks.start("s0")
  for step in range(1, 5):
    hooks.step(step, f"s{step}")
  hooks.end(4, "s4")
  assert calls == [("eval", 0, "s0"), ("save", 1), ("save", 2), ("save", 3), ("eval", 3, "s3"), ("save", 4),
                   ("final save", 4, "s4"), ("final eval", 4)]
