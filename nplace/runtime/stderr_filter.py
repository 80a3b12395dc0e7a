"""Lines a native library writes to file descriptor 2 that say nothing to the user, dropped
(`dropping`): libtpu, loaded on a machine without a TPU to compile for one (`nplace compile`),
complains that it cannot find the TPU it does not need, in five lines before the answer."""
import contextlib
import os
import re
import sys
import threading

# libtpu's start on a machine without a TPU: the environment it looks for is absent
LIBTPU_WITHOUT_TPU = re.compile(r"could not determine TPU|Logging before InitGoogle\(\)|"
                                r"^=== Source Location Trace: ===\s*$|^[\w/.-]+\.cc:\d+$")


@contextlib.contextmanager
def dropping(noise: re.Pattern):
  """Within, what is written to fd 2 (native code's stderr as well as Python's) goes through a
  pipe; a thread passes on each line that `noise` does not match, whole lines, in order."""
  sys.stderr.flush()
  read_end, write_end = os.pipe()
  original = os.dup(2)
  os.dup2(write_end, 2)
  os.close(write_end)  # fd 2 is now the pipe's only writer: restoring fd 2 closes it, and the thread sees EOF
  thread = threading.Thread(target=_pass_on, args=(read_end, original, noise), daemon=True)
  thread.start()
  try:
    yield
  finally:
    sys.stderr.flush()
    os.dup2(original, 2)
    thread.join()
    os.close(original)


def _pass_on(read_end: int, out: int, noise: re.Pattern):
  with os.fdopen(read_end, "rb") as lines:
    for line in lines:
      if not noise.search(line.decode(errors="replace").rstrip("\n")):
        os.write(out, line)
