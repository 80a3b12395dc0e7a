"""The placement lab: a model's scorecard at init (`measure`, from the theory checks in
`checks`), and what the filed grids measured, each configuration's maximum stable rate by size
(`measured`, `nplace lab --all`).

Rule: the lab may import the model, probes, train, data and the studies below it (`measures`,
`results`, `ladder`); it never imports `report/`."""
