"""What a run leaves for people to read: TensorBoard event files (`writer`, read back by
`events`), figures (`plots`, drawn off the train loop by `drawing`) and the console line
(`progress`).

Rule: logs imports only `runtime` (where a run writes); nothing here knows what a probe, a
model or a study is."""
