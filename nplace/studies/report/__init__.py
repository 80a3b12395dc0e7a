"""`nplace report`: report.md and its figures for sweeps and runs, a section per study (`build`
picks it from what a directory holds), and results/README.md (`page`: a section per study and
protocol, its kind's tables from `study_a`, `growth`, `study_b` and `ladder`, the shared ones
from `tables`).

Rule: report only renders: it imports studies/ for what it shows and decides no verdict; nothing
in nplace imports it but the commands."""
