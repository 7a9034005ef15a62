#pragma once
// Debian's libtorch-dev omits this generated header; the real build writes it
// from cuda_cmake_macros.h.in. The CPU-only package needs no macro from it.
