#!/usr/bin/env python3
"""A corpus shaped like a real LibTorch project, with the compile database
CMake writes for it (issue 14: the shapes that defeated a shared preamble
keyed on the leading includes and every flag):

  OUT/common/include/proj/utils.h        #pragma once, <torch/torch.h>, helpers
  OUT/apps/appK/include/appK/model.h     guarded; includes <proj/utils.h>
  OUT/apps/appK/src/tu_NN.cpp            a body from --bodies, after its
                                         project header ("appK/model.h")
  OUT/build/compile_commands.json        per target: its own compile dir
                                         (OUT/build/appK, as CMake's Makefile
                                         generator writes), its own -I dir,
                                         the common -I dir, the flags after --

Every TU reaches <torch/torch.h> through its own project header. Some TUs
open with a standard header (<iostream>) or a #define of their own before
it, as real code does.

Usage: project_corpus.py OUT --bodies F.cpp... [--targets K] [--tus N]
                         [--compiler clang++] -- FLAGS...
"""

import argparse
import json
import os
import sys

UTILS_H = """\
// The project's common header: every target includes it through its own.
#pragma once
#include <torch/torch.h>
#include <string>

namespace proj {
inline torch::Tensor scaled(const torch::Tensor &t, double s) { return t * s; }
inline std::string tag(int k) { return "app" + std::to_string(k); }
} // namespace proj
"""

MODEL_H = """\
// The project header of target app{k}.
#ifndef APP{k}_MODEL_H
#define APP{k}_MODEL_H
#include <proj/utils.h>

namespace app{k} {{
struct ModelImpl : torch::nn::Module {{
  torch::Tensor forward(torch::Tensor x) {{ return proj::scaled(x, {k}); }}
}};
TORCH_MODULE(Model);
}} // namespace app{k}
#endif // APP{k}_MODEL_H
"""

# What comes before the project header in some TUs (index % len).
OPENINGS = ["", "", "", "", "#include <iostream>\n", "", "",
            "#define APP_VERBOSE 1\n"]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make(out, bodies, targets, tus, flags, compiler="clang++"):
    """Writes the corpus; returns (build dir, [absolute TU paths])."""
    out = os.path.abspath(out)
    write(os.path.join(out, "common", "include", "proj", "utils.h"), UTILS_H)
    texts = []
    for body in bodies:
        with open(body) as f:
            texts.append((os.path.basename(body), f.read(),
                          os.path.dirname(os.path.abspath(body))))
    database, files = [], []
    for k in range(targets):
        app = os.path.join(out, "apps", "app%d" % k)
        write(os.path.join(app, "include", "app%d" % k, "model.h"),
              MODEL_H.format(k=k))
    for n in range(tus):
        k = n % targets
        name, text, origin = texts[n % len(texts)]
        src = os.path.join(out, "apps", "app%d" % k, "src",
                           "tu_%02d_%s" % (n, name))
        body = (OPENINGS[n % len(OPENINGS)]
                + '#include "app%d/model.h"\n' % k + text
                + "\n// copy %d\nint corpus_copy_%d() { return %d; }\n" % (n, n, n))
        write(src, body)
        # A header of the body's own, next to it (examples/net.h).
        for line in text.splitlines():
            if line.startswith('#include "'):
                header = os.path.join(origin, line.split('"')[1])
                if os.path.isfile(header):
                    with open(header) as f:
                        write(os.path.join(os.path.dirname(src),
                                           line.split('"')[1]), f.read())
        directory = os.path.join(out, "build", "app%d" % k)
        os.makedirs(directory, exist_ok=True)
        database.append({
            "directory": directory,
            "file": src,
            "arguments": [compiler, "-I" + os.path.join(out, "apps", "app%d" % k,
                                                        "include"),
                          "-I" + os.path.join(out, "common", "include")]
                         + flags + ["-o", os.path.basename(src) + ".o", "-c", src],
        })
        files.append(src)
    build = os.path.join(out, "build")
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(database, f, indent=2)
    return build, files


def main():
    argv = sys.argv[1:]
    flags = []
    if "--" in argv:
        flags = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--bodies", nargs="+", required=True)
    ap.add_argument("--targets", type=int, default=5)
    ap.add_argument("--tus", type=int, default=40)
    ap.add_argument("--compiler", default="clang++")
    args = ap.parse_args(argv)
    make(args.out, args.bodies, args.targets, args.tus, flags, args.compiler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
