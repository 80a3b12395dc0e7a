"""Signal-propagation probes: per-layer measurements of the scanned model, through its
perturbation taps and sown intermediates (no unrolled copy of the model).

`suite.run_suite` runs them all; `summaries.ProbeWriter` puts them in TensorBoard; `nplace probe`
(command.py) writes them as JSON. Definitions: SCIENCE.md, "Definitions for the probes".
"""
