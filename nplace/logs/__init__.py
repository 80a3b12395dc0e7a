"""What a run leaves for people to read: TensorBoard event files (`writer`, read back by
`events`), figures (`plots`, drawn off the train loop by `drawing`) and the console line
(`progress`). Nothing here knows what a probe is."""
