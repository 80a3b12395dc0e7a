"""Training: the loop (`loop.train`), the train state and its jitted steps, the hooks between
steps (checkpoints, eval, probes, profiles), the one-step-late step log, the optimizer,
checkpoints, evaluation and its scores, the run summary, and the ahead-of-time fit check.

Rule: train may import the config, data, model, probes, logs and runtime; it never imports
studies or commands (a study runs trainings, not the other way round)."""
