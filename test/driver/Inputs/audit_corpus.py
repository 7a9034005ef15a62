#!/usr/bin/env python3
"""Writes a corpus of LibTorch-style translation units on the mock headers,
with a compile database, for the --audit tests.

    audit_corpus.py OUT MOCK_INPUTS [--tus N] [--with-errors] [--unshared]

OUT/src/ gets the sources, OUT/build/compile_commands.json the database.
The corpus has:
  - N TUs `train_K.cpp` that open with the same includes
    (<torch/torch.h>, "model.h", <c10/cuda/CUDACachingAllocator.h>, then
    some a <vector>): they share one precompiled header; each has findings
    of several checks, and model.h has one of its own (shown with
    --header-filter=model.h);
  - 2 TUs `eval_K.cpp`, compiled with -DEVAL_BUILD, that open with
    "model.h": they share a second PCH, of the includes that open model.h;
  - with --unshared, TUs that cannot share it: other flags (variant.cpp,
    -DVARIANT=2), another first include (vector_first.cpp), a #define before
    the includes (macro_first.cpp), no includes (plain.cpp);
  - with --with-errors, broken.cpp: the shared prefix and a compiler error.
"""

import argparse
import json
import os

MODEL_H = """\
// The project header that every training TU includes first.
#pragma once
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

inline void release_between_epochs(int epochs) {
  for (int e = 0; e < epochs; ++e)
    c10::cuda::CUDACachingAllocator::emptyCache();
}
"""

TRAIN = """\
// Generated training TU {k}.
/* It opens with the includes that the others share. */
#include <torch/torch.h>
#include "model.h"
#include <c10/cuda/CUDACachingAllocator.h>
{extra_include}
struct Net{k}Impl : torch::nn::Module {{
  torch::Tensor forward(torch::Tensor x);
}};
TORCH_MODULE(Net{k});

std::vector<torch::Tensor> batches_{k}();
void report_{k}(const torch::Tensor &t);

void train_{k}(Net{k} &net, torch::optim::SGD &opt, at::Tensor weights) {{
  torch::Tensor total = torch::zeros({{}});
  for (const auto &x : batches_{k}()) {{
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
    total += loss;
    c10::cuda::CUDACachingAllocator::emptyCache();
  }}
  weights.cuda();
  report_{k}(total);
}}
"""

EVAL = """\
// Generated evaluation TU {k}: its first include is the project header.
#include "model.h"
#ifndef EVAL_BUILD
#error built with the wrong flags
#endif
at::Tensor score_{k}(at::Tensor x, int n) {{
  for (int i = 0; i < n; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
  x.cuda();
  return x;
}}
"""

VARIANT = """\
#include <torch/torch.h>
#include "model.h"
#if VARIANT != 2
#error built with the wrong flags
#endif
void variant(at::Tensor t, int n) {
  while (n--)
    c10::cuda::CUDACachingAllocator::emptyCache();
  t.cuda();
}
"""

VECTOR_FIRST = """\
#include <vector>
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
void vector_first(std::vector<at::Tensor> &ts) {
  for (auto &t : ts) {
    t.cuda();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}
"""

MACRO_FIRST = """\
#define RELEASE() c10::cuda::CUDACachingAllocator::emptyCache()
#include <torch/torch.h>
#include "model.h"
void macro_first(int n) {
  for (int i = 0; i < n; ++i)
    RELEASE();
}
"""

PLAIN = """\
namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }
void plain(int n) {
  do { c10::cuda::CUDACachingAllocator::emptyCache(); } while (--n);
}
"""

BROKEN = """\
#include <torch/torch.h>
#include "model.h"
#include <c10/cuda/CUDACachingAllocator.h>
void broken(at::Tensor t) {
  for (;;) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    undeclared_function(t);
  }
}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mock_inputs")
    parser.add_argument("--tus", type=int, default=4)
    parser.add_argument("--with-errors", action="store_true")
    parser.add_argument("--unshared", action="store_true")
    args = parser.parse_args()

    src = os.path.join(os.path.abspath(args.out), "src")
    build = os.path.join(os.path.abspath(args.out), "build")
    os.makedirs(src, exist_ok=True)
    os.makedirs(build, exist_ok=True)
    files = {"model.h": MODEL_H}
    for k in range(args.tus):
        files["train_%d.cpp" % k] = TRAIN.format(
            k=k, extra_include="#include <vector>\n" if k % 2 else "")
    flags = {}
    for k in range(2):
        files["eval_%d.cpp" % k] = EVAL.format(k=k)
        flags["eval_%d.cpp" % k] = ["-DEVAL_BUILD"]
    if args.unshared:
        files.update({"variant.cpp": VARIANT, "vector_first.cpp": VECTOR_FIRST,
                      "macro_first.cpp": MACRO_FIRST, "plain.cpp": PLAIN})
        flags["variant.cpp"] = ["-DVARIANT=2"]
    if args.with_errors:
        files["broken.cpp"] = BROKEN
    for name, text in files.items():
        with open(os.path.join(src, name), "w") as f:
            f.write(text)

    mock = os.path.abspath(args.mock_inputs)
    database = []
    for name in sorted(files):
        if not name.endswith(".cpp"):
            continue
        database.append({
            "directory": src,
            "file": name,
            "arguments": ["clang++", "-std=c++17", "-isystem", mock]
                         + flags.get(name, []) + ["-c", name, "-o", name + ".o"],
        })
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(database, f, indent=2)


if __name__ == "__main__":
    main()
