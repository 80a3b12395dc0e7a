"""Where a run executes: the device mesh and the logical-axis layout of parameters and
activations (`sharding`), the platforms a process may start and what it settles first
(`startup`), a CPU host split into one device per core (`cpu_split`), glibc malloc settings
(`malloc`), the accelerators' memory and peak FLOP/s (`chips`), run directories on disk or in
a bucket (`workdirs`).

Rule: runtime imports nothing of nplace but `errors`; every other floor may use it."""
