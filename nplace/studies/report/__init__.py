"""`nplace report`: report.md and its figures for sweeps and runs, a section per study (`build`
picks it from what a directory holds; `runs` finds the runs and their summaries)."""
