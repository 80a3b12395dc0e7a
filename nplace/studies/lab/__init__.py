"""The placement lab: a model's scorecard at init (`measure`), the theory checks and the
stability rule (`checks`), and the rule scored on a sweep (`rank`, which files STUDY/lab.json
for nplace/studies/ranking.py to judge).

Rule: the lab may import the model, probes, train, data and the studies below it (`measures`,
`ranking`, `results`); it never imports `report/`, which shows its scores."""
