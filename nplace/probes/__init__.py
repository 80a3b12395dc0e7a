"""Signal-propagation probes: per-layer measurements of the scanned model, through its
perturbation taps and sown intermediates (no unrolled copy of the model).

`suite.suite` runs them all, compiled apart from the train step; `summaries.ProbeWriter` puts
them in TensorBoard (`figures` draws them, `history` reads them back); `theory` holds the
curves they are drawn against; `inputs` fixes the batch and the random key they run on.
Definitions: docs/science.md, "Probes".

Rule: probes may import the config, data, model, placements, logs and runtime; never train
or studies, which call them.
"""
