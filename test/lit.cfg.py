# -*- Python -*-
import os
import shutil
import sys
import time

import lit.formats

config.name = "torch-tidy"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".cpp", ".test"]
config.excludes = ["Inputs", "shim", "unit", "fuzz", "lit.cfg.py", "fixtures"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.torch_tidy_obj_root, "test")

llvm_bin = config.llvm_tools_dir
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.torch_tidy_obj_root, "bin"), llvm_bin,
     config.environment.get("PATH", "")])
# One id per lit run: what tests share within a run (test/check_batch.py).
config.environment["TORCH_TIDY_LIT_RUN"] = "%d-%f" % (os.getpid(), time.time())
# Keep colour and terminal-only output out of the tests.
config.environment["TERM"] = "dumb"
# A plain run without a compile database keeps its shared preambles in
# $XDG_CACHE_HOME/torch-tidy: the tests' own, not the user's.
config.environment["XDG_CACHE_HOME"] = os.path.join(config.test_exec_root,
                                                    "xdg-cache")

plugin = os.path.join(config.torch_tidy_obj_root, "lib", "libTorchTidy.so")
inputs = os.path.join(config.test_source_root, "Inputs")

# A sanitized build (-DTORCH_TIDY_SANITIZE=...): config.clang_tidy is a
# wrapper that preloads the ASan runtime into clang-tidy-19 (test/CMakeLists).
if getattr(config, "sanitize", ""):
    config.available_features.add("sanitize")
    config.environment.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
check = ("python3 %s --clang-tidy=%s --plugin=%s --filecheck=%s --inputs=%s" % (
    os.path.join(config.test_source_root, "check_torch_tidy.py"),
    config.clang_tidy, plugin, os.path.join(llvm_bin, "FileCheck"), inputs))

config.substitutions.append(("%check_torch_tidy", check))
config.substitutions.append(("%clang_tidy_plugin",
                             "%s --load=%s" % (config.clang_tidy, plugin)))
config.substitutions.append(("%torch_tidy_plugin_path", plugin))
config.substitutions.append(("%torch_tidy",
                             os.path.join(config.torch_tidy_obj_root, "bin", "torch-tidy")))
config.substitutions.append(("%clang_tidy", config.clang_tidy))
config.substitutions.append(("%clangxx", config.clangxx))
config.substitutions.append(("%inputs", inputs))
config.substitutions.append(("%repo", config.torch_tidy_src_root))
# The real LibTorch header sets (scripts/libtorch_sets.py): a feature for each
# one present; test/integration/ runs each test once per set. Elsewhere,
# %libtorch_flags are the first present set's flags.
sys.path.insert(0, os.path.join(config.torch_tidy_src_root, "scripts"))
sys.path.insert(0, config.test_source_root)
import libtorch_sets  # noqa: E402
import libtorch_matrix  # noqa: E402

config.libtorch_sets = [(name, libtorch_sets.flags(name, config.torch_tidy_obj_root))
                        for name in libtorch_sets.available(config.torch_tidy_obj_root)]
config.libtorch_set_names = libtorch_sets.NAMES
for name, flags in config.libtorch_sets[:1]:
    config.available_features.add("libtorch")
    config.substitutions.extend(libtorch_matrix.set_substitutions(name, flags))
for name, _ in config.libtorch_sets:
    config.available_features.add(name)
# libc++ (libc++-19-dev): <format> and <print> for the C++23 tests.
if os.path.exists(os.path.join(llvm_bin, "..", "include", "c++", "v1", "print")):
    config.available_features.add("libcxx")
if os.path.exists("/usr/local/cuda/include/cuda_runtime_api.h"):
    config.available_features.add("cuda-headers")
multitool = os.path.join(config.torch_tidy_obj_root, "node_modules", "@microsoft",
                         "sarif-multitool-linux", "Sarif.Multitool")
if os.path.exists(multitool):
    config.available_features.add("sarif-multitool")
    config.substitutions.append(("%sarif_multitool", multitool))
if shutil.which("script"):  # util-linux: runs a command on a terminal
    config.available_features.add("script")
if os.path.exists(os.path.join(config.torch_tidy_obj_root, "bin", "torch-tidy-verify")):
    config.available_features.add("runtime-check")
# Headless Chromium for the HTML report's browser test (scripts/setup.sh
# installs Debian's `chromium`).
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if chromium:
    config.available_features.add("chromium")
    config.substitutions.append(("%chromium", chromium))
else:
    lit_config.note("no chromium on PATH: the HTML report's browser test "
                    "(ecosystem/html-report-browser.test) is skipped; "
                    "scripts/setup.sh installs it")
if shutil.which("pre-commit"):
    config.available_features.add("pre-commit")
if shutil.which("cmake") and shutil.which("ninja"):
    config.available_features.add("cmake")
run_clang_tidy = (shutil.which("run-clang-tidy-19")
                  or shutil.which("run-clang-tidy", path=llvm_bin))
if run_clang_tidy:
    config.available_features.add("run-clang-tidy")
    config.substitutions.append(("%run_clang_tidy", run_clang_tidy))
# The build directory (build/examples/compile_commands.json lives there).
config.substitutions.append(("%obj_root", config.torch_tidy_obj_root))
if os.getuid() == 0:
    config.available_features.add("root")

# `check-<name>` for every check the driver registers, so that a driver test
# of a check (e.g. its fix-it) runs as soon as the check lands.
torch_tidy_bin = os.path.join(config.torch_tidy_obj_root, "bin", "torch-tidy")
if os.path.exists(torch_tidy_bin):
    import subprocess
    try:
        listed = subprocess.run(
            [torch_tidy_bin, "--list-checks", "--checks=-*,torch-*"],
            capture_output=True, text=True, timeout=120).stdout
        for line in listed.splitlines()[1:]:
            if line.strip():
                config.available_features.add("check-" + line.split()[0])
    except (OSError, subprocess.SubprocessError):
        pass

# Neovim's built-in LSP client drives `torch-tidy lsp` (ecosystem/neovim-lsp.test).
nvim = shutil.which("nvim")
if nvim:
    config.available_features.add("nvim")
    config.substitutions.append(("%nvim", nvim))
config.substitutions.append(("%lsp_server", torch_tidy_bin))
