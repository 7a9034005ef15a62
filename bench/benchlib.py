"""What the bench/ scripts share: the repository root and the compiler
flags that parse a TU against Debian's libtorch-dev headers."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def libtorch_flags():
    flags = ["-std=c++17", "-isystem", "/usr/include/torch/csrc/api/include",
             "-isystem", os.path.join(ROOT, "test", "shim")]
    if os.path.isdir("/usr/local/cuda/include"):
        flags += ["-isystem", "/usr/local/cuda/include"]
    return flags
