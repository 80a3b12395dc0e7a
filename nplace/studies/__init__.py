"""Studies: grids of trials (`grid`), run by `sweep`, judged by `outcomes`, tabulated and drawn
by `report`, and predicted at init by the `lab`; `fits` holds the growth fits both use."""
