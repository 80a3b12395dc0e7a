"""gcloud command lines for one Cloud TPU slice, as argv lists (nothing here runs them).

Flags follow the gcloud reference for `compute tpus tpu-vm` and `compute tpus
queued-resources` and the runtime-version table of the Cloud TPU docs; BUILD_NOTES says
what was checked against documentation only.
"""
import dataclasses
import re
import shlex

# Cloud accelerator-type prefix -> (runtime version to install JAX on, TensorCores per chip).
# The number in `PREFIX-N` counts TensorCores: v4-8 and v5p-8 are 4 chips, v5litepod-16 is 16.
GENERATIONS = {
    "v4": ("tpu-ubuntu2204-base", 2),
    "v5p": ("v2-alpha-tpuv5", 2),
    "v5litepod": ("v2-alpha-tpuv5-lite", 1),
    "v6e": ("v2-alpha-tpuv6e", 1),
}
ONE_CORE_SIZES = (1, 4, 8, 16, 32, 64, 128, 256)  # the v5e and v6e slice shapes, in chips
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a TPU node id

# Where things live on every worker (unquoted in remote commands, so `~` expands there).
SRC = "~/nplace"  # the unpacked source tree (the experiments/ configs are read from here)
VENV = "~/nplace-venv"  # Python 3.12 made by uv: the TPU images ship an older python3
LOG = "~/nplace-train.log"  # nplace train's stdout and stderr, appended across attempts
CACHE = "~/.cache/nplace/data"  # nplace's default prepared-data cache


@dataclasses.dataclass(frozen=True)
class Accelerator:
  type: str  # the Cloud accelerator type, e.g. v5litepod-16
  runtime: str  # the TPU software version to create it with
  chips: int


def accelerator(name: str) -> Accelerator:
  """Raises ValueError (one line) on a type this launcher does not know."""
  prefix, _, count = name.rpartition("-")
  if prefix in GENERATIONS and count.isdigit():
    runtime, cores = GENERATIONS[prefix]
    n = int(count)
    if n in ONE_CORE_SIZES if cores == 1 else n > 0 and n % 8 == 0:
      return Accelerator(name, runtime, n // cores)
  sizes = ", ".join(map(str, ONE_CORE_SIZES))
  raise ValueError(f"unknown accelerator type {name!r}: expected v4-N or v5p-N (N TensorCores, "
                   f"a multiple of 8) or v5litepod-N or v6e-N (N in {sizes})")


@dataclasses.dataclass(frozen=True)
class Slice:
  """A TPU VM (or a queued resource whose node has the same name) in one project and zone."""
  name: str
  project: str
  zone: str
  queued: bool = False

  @property
  def _group(self):
    return ["gcloud", "compute", "tpus", "queued-resources" if self.queued else "tpu-vm"]

  @property
  def _where(self):
    return [f"--zone={self.zone}", f"--project={self.project}"]

  @property
  def healthy(self) -> str:
    """What `state()` prints while the slice is up."""
    return "ACTIVE" if self.queued else "READY"

  def create(self, acc: Accelerator, spot: bool) -> list[str]:
    if self.queued:
      argv = [*self._group, "create", self.name, f"--node-id={self.name}", *self._where,
              f"--accelerator-type={acc.type}", f"--runtime-version={acc.runtime}"]
    else:
      argv = [*self._group, "create", self.name, *self._where, f"--accelerator-type={acc.type}",
              f"--version={acc.runtime}"]
    return argv + ["--spot"] * spot

  def state(self) -> list[str]:
    field = "state.state" if self.queued else "state"
    return [*self._group, "describe", self.name, *self._where, f"--format=value({field})"]

  def delete(self) -> list[str]:
    force = ["--force"] if self.queued else []  # deletes the node first, then the request
    return [*self._group, "delete", self.name, *self._where, *force, "--quiet"]

  def ssh(self, command: str, worker: str = "all") -> list[str]:
    return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", self.name, *self._where,
            f"--worker={worker}", f"--command={command}"]

  def scp(self, local: str, remote: str) -> list[str]:
    return ["gcloud", "compute", "tpus", "tpu-vm", "scp", local, f"{self.name}:{remote}",
            *self._where, "--worker=all"]


def install_command(tarball: str) -> str:
  """Unpacks the source on a worker and installs it with the TPU extra into VENV."""
  return " && ".join([
      f"rm -rf {SRC}", f"tar xzf ~/{tarball} -C ~",
      "(test -x ~/.local/bin/uv || curl -LsSf https://astral.sh/uv/install.sh | sh)",
      f"(test -x {VENV}/bin/pip || ~/.local/bin/uv venv --seed --python 3.12 {VENV})",
      f'{VENV}/bin/pip install --quiet "$HOME/nplace[tpu]"'])


def nplace_command(args: list[str], nohup: bool = False) -> str:
  """`nplace ARGS` run from the source tree on a worker (config paths are relative to it);
  nohup: a dropped ssh connection does not stop it."""
  return f"cd {SRC} && {'nohup ' * nohup}{VENV}/bin/nplace {shlex.join(args)}"


def train_command(args: list[str], workdir: str) -> str:
  """nplace train logging to LOG; then the log is copied to WORKDIR/logs/HOST.log."""
  return (f"{nplace_command(args, nohup=True)} >> {LOG} 2>&1; "
          f"gcloud storage cp {LOG} {shlex.quote(workdir + '/logs/')}$(hostname).log")
