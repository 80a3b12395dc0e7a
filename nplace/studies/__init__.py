"""Studies: grids of trials (`grid`) run by `sweep`, filed as results (`results`, `runs`), each
run's outcome (`outcomes`), a protocol's measures by its kind (`measures`: `lr_sensitivity`,
`depth_growth`, `collapse`, `ladder`) and its verdicts (`judge`, with `intervals` and `fits`);
`markdown` writes the pieces of a page. Protocols are declared in the grid files
(experiments/*.py) in nplace/protocol.py's vocabulary; the lab (`lab/`) measures a model at init
and reads what the filed grids measured, and `report/` draws the pages.

Rule: the modules here may import the config, placements, protocol, train, probes, logs and
runtime, and load experiment files at run time (never at import); none of them imports `lab/`
or `report/`. `lab/` may import them, never `report/`; `report/` only renders, and only the
commands import it."""
