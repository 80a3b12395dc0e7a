"""Training: the loop (`loop.train`), the train state and its jitted steps, the hooks between
steps (checkpoints, eval, probes, profiles), the one-step-late step log, the optimizer,
checkpoints, evaluation and its scores, the run summary, and the ahead-of-time fit check."""
