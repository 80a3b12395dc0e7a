"""Dropping a native library's noise from file descriptor 2, and passing on the rest."""
import os

from nplace.runtime import stderr_filter

# what libtpu printed loading on a machine without a TPU (nplace compile), shortened
LIBTPU_START = [
    "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, "
    "please set env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.",
    "WARNING: Logging before InitGoogle() is written to STDERR",
    "E0000 00:00:1796521637.756270   30428 common_lib.cc:554] INVALID_ARGUMENT: Error: unexpected worker "
    "hostname 'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES.",
    "=== Source Location Trace: === ",  # with its trailing space
    "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327",
]


def test_libtpus_complaints_are_dropped_and_every_other_line_passes_in_order(capfd):
  with stderr_filter.dropping(stderr_filter.LIBTPU_WITHOUT_TPU):
    os.write(2, b"before\n")
    os.write(2, "\n".join(LIBTPU_START).encode() + b"\n")
    os.write(2, b"E0000 compiler.cc:12] RESOURCE_EXHAUSTED: a real error\nno newline at the end")
  os.write(2, b"\nafter\n")  # fd 2 is the terminal's again
  assert capfd.readouterr().err == ("before\nE0000 compiler.cc:12] RESOURCE_EXHAUSTED: a real error\n"
                                    "no newline at the end\nafter\n")
