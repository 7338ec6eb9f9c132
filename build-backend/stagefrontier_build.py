"""The PEP 517 backend that builds stagefrontier's wheel (`pip wheel .`, `pip install .`).

maturin and setuptools-rust put either a Python extension or a binary in a wheel, not a
binary (`sf`) beside a plain C-ABI shared library loaded by LD_PRELOAD and the CUDA/NCCL
injection variables (PyO3/maturin#368); this backend does only that. It runs

    cargo zigbuild --profile dist --target x86_64-unknown-linux-gnu.2.28 -p stagefrontier --lib --bin sf

(zig links against glibc 2.28's symbol versions, so the binaries run on any Linux with glibc
2.28 or newer: RHEL/Rocky 8, Ubuntu 20.04), and zips sf, libstagefrontier.so and the Python
modules under python/ into a `py3-none-manylinux_2_28_x86_64` wheel. The dist profile has no
debug info. ziglang and cargo-zigbuild come from the build requirements; cargo and the
Rust toolchain must be on PATH. CUDA, CUPTI and NCCL are loaded at run time, never linked,
so one wheel serves every CUDA and NCCL version.

The version is Cargo.toml's. No sdist: the wheel is built from the repository.
"""

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "stagefrontier"
TAG = "py3-none-manylinux_2_28_x86_64"
RUST_TARGET = "x86_64-unknown-linux-gnu"
GLIBC = "2.28"
PROFILE = "dist"
PYTHON_DIR = os.path.join(ROOT, "python")
PYTHON_PARTS = ("stagefrontier", "stagefrontier_torch.py", "stagefrontier_boot")
# A fixed time for every entry, so that the same binaries give the same wheel.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def _package():
    """Name, version, description and license from Cargo.toml, the one place they are kept."""
    out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"], cwd=ROOT,
                         check=True, stdout=subprocess.PIPE).stdout
    return next(p for p in json.loads(out)["packages"] if p["name"] == NAME)


def _zig_on_path(env):
    # cargo-zigbuild runs zig as `python3 -m ziglang` where that works, else `zig` from PATH;
    # the pinned ziglang build requirement ships the binary in its package directory, so it
    # serves the second way too (a python3 on PATH other than the one running this build).
    import ziglang
    env["PATH"] = os.path.dirname(ziglang.__file__) + os.pathsep + env.get("PATH", "")


def _cargo_zigbuild():
    """The cargo-zigbuild executable of the build environment (or PATH's)."""
    for directory in [os.path.dirname(sys.executable)] + os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory, "cargo-zigbuild")
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError("cargo-zigbuild is not installed: it is a build requirement (pyproject.toml)")


def build_binaries():
    """Builds sf and libstagefrontier.so; returns the directory that holds them."""
    env = dict(os.environ)
    _zig_on_path(env)
    command = [_cargo_zigbuild(), "zigbuild", "--locked", "--profile", PROFILE,
               "--target", "%s.%s" % (RUST_TARGET, GLIBC), "-p", NAME, "--lib", "--bin", "sf"]
    sys.stderr.write("stagefrontier: %s\n" % " ".join(command[1:]))
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=sys.stderr)
    target = env.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    return os.path.join(target, RUST_TARGET, PROFILE)


def _python_files():
    """(path in the wheel, path here) of every Python module the wheel carries."""
    for part in PYTHON_PARTS:
        path = os.path.join(PYTHON_DIR, part)
        if os.path.isfile(path):
            yield part, path
            continue
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    here = os.path.join(directory, name)
                    yield os.path.relpath(here, PYTHON_DIR), here


def _metadata(package):
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % NAME,
        "Version: %s" % package["version"],
        "Summary: %s" % package["description"],
        "License: %s" % package["license"],
        "Requires-Python: >=3.8",
        "Platform: Linux",
    ]
    return "\n".join(lines) + "\n"


class _Wheel:
    """A wheel being written: every entry lands in RECORD with its hash and size."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data, executable=False):
        info = zipfile.ZipInfo(name, ZIP_TIME)
        info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (name, digest, len(data)))

    def close(self, record_name):
        self.record.append("%s,," % record_name)
        info = zipfile.ZipInfo(record_name, ZIP_TIME)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n", compress_type=zipfile.ZIP_DEFLATED)
        self.zip.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    package = _package()
    built = build_binaries()
    version = package["version"]
    dist_info = "%s-%s.dist-info" % (NAME, version)
    filename = "%s-%s-%s.whl" % (NAME, version, TAG)
    wheel = _Wheel(os.path.join(wheel_directory, filename))
    for name, path in _python_files():
        wheel.add(name, _read(path))
    wheel.add("stagefrontier/libstagefrontier.so", _read(os.path.join(built, "libstagefrontier.so")), True)
    wheel.add("stagefrontier/sf", _read(os.path.join(built, "sf")), True)
    wheel.add(dist_info + "/METADATA", _metadata(package).encode())
    wheel.add(dist_info + "/WHEEL",
              ("Wheel-Version: 1.0\nGenerator: stagefrontier_build\nRoot-Is-Purelib: false\nTag: %s\n" % TAG).encode())
    wheel.add(dist_info + "/entry_points.txt",
              b"[console_scripts]\nsf = stagefrontier.installed:sf_command\n")
    wheel.close(dist_info + "/RECORD")
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []
