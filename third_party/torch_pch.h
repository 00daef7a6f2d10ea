// The LibTorch headers most Kiln files include, directly or through Kiln's own headers: compiled once per
// configuration into a precompiled header (tools/cc.bzl) that every target with `torch_pch` is compiled against.
// Only @libtorch//:torch's headers belong here (no c10d, no CUDA): GCC accepts a precompiled header only when every
// macro it saw is defined alike at use, and c10d's headers depend on USE_C10D_GLOO, which some targets define.

#include "ATen/ATen.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/optimizer.h"
#include "torch/optim/sgd.h"
