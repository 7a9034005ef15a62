"""What the bench/ scripts share: the repository root and the compiler
flags that parse a TU against a LibTorch header set (scripts/libtorch_sets.py).

As a script, it runs a bench script once per header set:

  benchlib.py SCRIPT [--libtorch SET]... [SCRIPT's options]

SET: 1.13 (the default), 2.6, user (TORCH_TIDY_LIBTORCH) or all (every set
present); each run prints its own ratios under a line naming the set."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import libtorch_sets  # noqa: E402

FLAGS_ENV = "TORCH_TIDY_BENCH_LIBTORCH_FLAGS"


def libtorch_flags():
    """The flags of the header set this run measures (libtorch-1.13 unless
    the wrapper below chose another)."""
    if os.environ.get(FLAGS_ENV):
        return json.loads(os.environ[FLAGS_ENV])
    return libtorch_sets.flags("libtorch-1.13")


def _sets(specs, build_dir):
    names = []
    for spec in specs or ["1.13"]:
        if spec == "all":
            names += libtorch_sets.available(build_dir)
            continue
        name = spec if spec.startswith("libtorch-") else "libtorch-" + spec
        if name not in libtorch_sets.NAMES:
            sys.exit("error: unknown LibTorch header set '%s' (1.13, 2.6, user or all)" % spec)
        if not libtorch_sets.present(name, build_dir):
            sys.exit("error: LibTorch header set %s is not present (scripts/setup.sh "
                     "fetches 2.6; TORCH_TIDY_LIBTORCH names a user tree)" % name)
        names.append(name)
    return list(dict.fromkeys(names))


def main(argv):
    script, rest, specs = argv[0], [], []
    i = 1
    while i < len(argv):
        if argv[i] == "--libtorch" and i + 1 < len(argv):
            specs.append(argv[i + 1])
            i += 2
            continue
        if argv[i].startswith("--libtorch="):
            specs.append(argv[i].split("=", 1)[1])
        else:
            rest.append(argv[i])
        i += 1
    build_dir = os.path.join(ROOT, "build")
    for j, arg in enumerate(rest):
        if arg == "--build-dir" and j + 1 < len(rest):
            build_dir = rest[j + 1]
        elif arg.startswith("--build-dir="):
            build_dir = arg.split("=", 1)[1]
    status = 0
    for name in _sets(specs, build_dir):
        print("== LibTorch header set %s" % libtorch_sets.describe(name, build_dir), flush=True)
        env = dict(os.environ)
        env[FLAGS_ENV] = json.dumps(libtorch_sets.flags(name, build_dir))
        rc = subprocess.call([sys.executable, os.path.join(ROOT, "bench", script)] + rest,
                             env=env)
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
