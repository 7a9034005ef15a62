#!/usr/bin/env python3
"""The LibTorch header sets torch-tidy is tested against, and their flags.

  libtorch-1.13  Debian 12's libtorch-dev 1.13 (/usr/include/torch)
  libtorch-2.6   Debian 13's libtorch-dev 2.6, unpacked by scripts/setup.sh
                 into <build>/libtorch-2.6/include
  libtorch-user  $TORCH_TIDY_LIBTORCH: a tree in the layout of the pytorch.org
                 zip (include/ and include/torch/csrc/api/include), such as
                 the unpacked zip or a pip wheel's torch/ directory

Used by test/lit.cfg.py (one lit feature per present set), bench/ and
scripts/demo.sh. As a script:

  libtorch_sets.py [--build-dir DIR] list         # the present sets, one a line
  libtorch_sets.py [--build-dir DIR] flags SET    # its compiler flags, one a line
  libtorch_sets.py [--build-dir DIR] describe SET # one line: where it comes from
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("libtorch-1.13", "libtorch-2.6", "libtorch-user")
SHIM = os.path.join(ROOT, "test", "shim")  # the generated header Debian lacks
CUDA_INCLUDE = "/usr/local/cuda/include"


def _tree_include(name, build_dir):
    """The include/ directory of a set (where torch/, ATen/, c10/ are)."""
    if name == "libtorch-1.13":
        return "/usr/include"
    if name == "libtorch-2.6":
        return os.path.join(os.path.abspath(build_dir or os.path.join(ROOT, "build")),
                            "libtorch-2.6", "include")
    if name == "libtorch-user":
        tree = os.environ.get("TORCH_TIDY_LIBTORCH", "")
        return os.path.join(os.path.abspath(tree), "include") if tree else ""
    raise ValueError("unknown LibTorch header set '%s' (known: %s)"
                     % (name, ", ".join(NAMES)))


def present(name, build_dir=None):
    include = _tree_include(name, build_dir)
    return bool(include) and os.path.isfile(
        os.path.join(include, "torch", "csrc", "api", "include", "torch", "torch.h"))


def available(build_dir=None):
    return [n for n in NAMES if present(n, build_dir)]


def flags(name, build_dir=None, std="c++17"):
    """-std, the set's two include directories, the shim and the CUDA headers
    (when installed), all as -isystem like a real build's."""
    include = _tree_include(name, build_dir)
    result = ["-std=" + std]
    if include != "/usr/include":  # a default directory: -isystem would reorder it
        result += ["-isystem", include]
    result += ["-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
               "-isystem", SHIM]
    if os.path.isdir(CUDA_INCLUDE):
        result += ["-isystem", CUDA_INCLUDE]
    return result


def describe(name, build_dir=None):
    include = _tree_include(name, build_dir)
    if name == "libtorch-1.13":
        return "libtorch-1.13: Debian 12 libtorch-dev (%s/torch)" % include
    if name == "libtorch-2.6":
        source = os.path.join(os.path.dirname(include), "SOURCE")
        origin = open(source).read().strip() if os.path.exists(source) else "Debian 13 libtorch-dev"
        return "libtorch-2.6: %s (%s)" % (origin, include)
    return "libtorch-user: TORCH_TIDY_LIBTORCH (%s)" % include


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("command", choices=("list", "flags", "describe"))
    parser.add_argument("set", nargs="?")
    args = parser.parse_args()
    if args.command == "list":
        print("\n".join(available(args.build_dir)))
        return 0
    if args.set not in NAMES:
        sys.exit("error: unknown LibTorch header set '%s' (known: %s)"
                 % (args.set, ", ".join(NAMES)))
    if not present(args.set, args.build_dir):
        sys.exit("error: LibTorch header set '%s' is not present (%s has no "
                 "torch/csrc/api/include/torch/torch.h)"
                 % (args.set, _tree_include(args.set, args.build_dir) or "TORCH_TIDY_LIBTORCH unset"))
    if args.command == "flags":
        print("\n".join(flags(args.set, args.build_dir)))
    else:
        print(describe(args.set, args.build_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
